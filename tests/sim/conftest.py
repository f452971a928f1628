import numpy as np
import pandas as pd
import pytest

from tltsim.trace import Trace, TraceMeta


class ConstantCost:
    """A cost model whose every decode iteration takes `decode` seconds and every prefill `prefill` seconds.

    Makes rollout timelines computable by hand."""

    kv_capacity_tokens = 10**9
    padded_prefill = False

    def __init__(self, decode=1.0, prefill=0.5, kv_capacity=10**9):
        self.decode, self.prefill, self.kv_capacity_tokens = decode, prefill, kv_capacity

    def decode_time(self, batch, ctx):
        return np.full(np.shape(batch), self.decode, dtype=float)

    def verify_time(self, batch, tokens_per_request, ctx):
        return np.full(np.shape(batch), self.decode, dtype=float)

    def draft_time(self, batch, topk=1):
        return np.zeros(np.shape(batch))

    def prefill_time(self, tokens, sq_tokens=None):
        tokens = np.asarray(tokens, dtype=float)
        return np.where(tokens > 0, self.prefill, 0.0)

    def catchup_time(self, batch, tokens_per_row, ctx):  # as Roofline: a drafter forward over the tokens
        return self.draft_time(np.asarray(batch, dtype=float) * np.asarray(tokens_per_row, dtype=float), 1)

    def switch_time(self, batch, ctx, sq_tokens):  # as Roofline: a target prefill
        return self.prefill_time(ctx, sq_tokens)

    def segment_time(self, q, k, ctx0, growth, n):
        return np.asarray(n, dtype=float) * self.decode

    def train_time(self, tokens, gpus, sq_tokens=0.0):
        return 2.0

    def logprob_time(self, tokens, gpus, sq_tokens=0.0):
        return 0.0

    def sync_time(self):
        return 1.0

    def drafter_train_tokens_per_s(self, gpus):
        return 1000.0 * gpus


def make_trace(lengths_by_step, prompt_len=10, group=1):
    """lengths_by_step: list (per step) of lists of response lengths; consecutive `group` rows form a prompt."""
    rows = []
    for s, lengths in enumerate(lengths_by_step):
        for i, L in enumerate(lengths):
            rows.append((s, i // group, i % group, prompt_len, L))
    return Trace.from_frame(pd.DataFrame(rows, columns=["step", "prompt_id", "sample", "prompt_len", "response_len"]),
                            TraceMeta(source="test"))


@pytest.fixture
def const_cost():
    return ConstantCost()
