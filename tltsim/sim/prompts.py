"""The prompt groups a run draws from, in trace order.

`PromptStream` serves the trace's prompt groups in trace order, as a data loader
serves a dataset: a step that launches more groups than the trace's step holds
(partial rollout, tail batching) takes the next step's groups early, and the
stream wraps around at the end of the trace. With exactly as many groups launched
as each trace step holds, step s gets exactly trace step s. Asynchronous RL draws
from it as its engines free up.
"""
from __future__ import annotations

import numpy as np


class PromptStream:
    """The trace's prompt groups (rows of one step and prompt_id) in trace order, served k at a time."""

    def __init__(self, trace_df):
        columns = ["prompt_id", "sample", "prompt_len", "response_len"] + [
            c for c in ("engine", "aborted", "reward", "turn_response_len", "tool_latency_s", "tool_tokens")
            if c in trace_df]  # reward: rl.skip_zero_advantage trains only groups whose rewards differ
        self.cols = {c: trace_df[c].to_numpy() for c in columns}
        if "tool_tokens" in trace_df:  # a multi-turn trace: the tools' tokens each sequence holds
            self.cols["tool_total"] = np.fromiter((sum(t) for t in trace_df["tool_tokens"]), np.int64, len(trace_df))
            self.cols["tool_pending_s"] = np.zeros(len(trace_df))  # none starts in a tool call
        key = trace_df["step"].to_numpy() * (int(trace_df["prompt_id"].max()) + 1) + trace_df["prompt_id"].to_numpy()
        self.starts = np.flatnonzero(np.concatenate([[True], np.diff(key) != 0]))
        self.ends = np.append(self.starts[1:], len(key))
        self.served = 0  # groups served so far; also the next group's id

    def take(self, k: int, step: int) -> dict:
        """The next k groups as a step's rows: `group` numbers them in serving order, `origin` = step, `carried` 0."""
        g = (self.served + np.arange(k)) % len(self.starts)
        rows = np.concatenate([np.arange(self.starts[i], self.ends[i]) for i in g]) if k else np.array([], np.int64)
        sizes = self.ends[g] - self.starts[g]
        out = {c: v[rows] for c, v in self.cols.items()}
        out["step"] = np.full(len(rows), step)
        out["group"] = np.repeat(self.served + np.arange(k), sizes)
        out["origin"] = np.full(len(rows), step)
        out["carried"] = np.zeros(len(rows), dtype=np.int64)
        self.served += k
        return out
