"""A cost model whose times follow a per-step speed factor: a machine whose speed drifts.

`tltsim validate --speed` replays a real run with the fitted profile scaled, step by step, by
how fast the machine was then (the run's speed probe over the profile's time for the same
iteration): on a shared machine the speed moves by 10-40% between minutes, and a profile measured
at one minute does not say what the next one costs. The simulator calls `begin_step(step)` at the
start of every synchronous step (tltsim.sim.simulator); every time is the base model's times the
step's factor (`default` for a step without one), and drafter-training throughput is divided by it.
With no per-step factors and a default, it is a cluster uniformly slower or faster than the model
(tltsim.cost.calibrated builds the calibrated cluster on it, phase by phase).
"""
from __future__ import annotations


class StepScaled:
    """`base`'s times, each multiplied by factors[step] of the step being simulated."""

    def __init__(self, base, factors: dict[int, float], default: float = 1.0):
        self.base = base
        self.factors = {int(s): float(f) for s, f in factors.items()}
        self.default = float(default)
        self.factor = self.default
        self.kv_capacity_tokens = base.kv_capacity_tokens
        self.padded_prefill = base.padded_prefill
        self.name = f"{getattr(base, 'name', 'cost')} x step speed"

    def begin_step(self, step: int) -> None:
        self.factor = self.factors.get(int(step), self.default)

    def decode_time(self, batch, ctx):
        return self.factor * self.base.decode_time(batch, ctx)

    def verify_time(self, batch, tokens_per_request, ctx):
        return self.factor * self.base.verify_time(batch, tokens_per_request, ctx)

    def draft_time(self, batch, topk=1, vocab=None):
        return self.factor * self.base.draft_time(batch, topk, vocab)

    def prefill_time(self, tokens, sq_tokens=None):
        return self.factor * self.base.prefill_time(tokens, sq_tokens)

    def catchup_time(self, batch, tokens_per_row, ctx):
        return self.factor * self.base.catchup_time(batch, tokens_per_row, ctx)

    def switch_time(self, batch, ctx, sq_tokens):
        return self.factor * self.base.switch_time(batch, ctx, sq_tokens)

    def segment_time(self, q, k, ctx0, growth, n):
        return self.factor * self.base.segment_time(q, k, ctx0, growth, n)

    def train_time(self, tokens, gpus, sq_tokens=0.0):
        return self.factor * self.base.train_time(tokens, gpus, sq_tokens)

    def logprob_time(self, tokens, gpus, sq_tokens=0.0):
        return self.factor * self.base.logprob_time(tokens, gpus, sq_tokens)

    def sync_time(self):
        return self.factor * self.base.sync_time()

    def drafter_train_tokens_per_s(self, gpus):
        return self.base.drafter_train_tokens_per_s(gpus) / self.factor
