"""Prompt groups for the policies that launch more than a step trains on (partial rollout, tail batching).

`PromptStream` serves the trace's prompt groups in trace order, as a data loader
serves a dataset: a step that launches more groups than the trace's step holds takes
the next step's groups early, and the stream wraps around at the end of the trace.
With exactly as many groups launched as each trace step holds, step s gets exactly
trace step s.

`rollout_until_groups` runs a step's rollout and stops every engine once `target`
groups have finished (a group finishes with its last sample). Each engine's rollout
is computed to completion and then cut (tltsim.sim.rollout.truncate), so with
speculation (`partial+tlt`) the tuner has also seen the iterations after the cut.
"""
from __future__ import annotations

import numpy as np

from tltsim.sim.rollout import StepRollout, truncate


class PromptStream:
    """The trace's prompt groups (rows of one step and prompt_id) in trace order, served k at a time."""

    def __init__(self, trace_df):
        columns = ["prompt_id", "sample", "prompt_len", "response_len"] + (["engine"] if "engine" in trace_df else [])
        self.cols = {c: trace_df[c].to_numpy() for c in columns}
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


def groups_in(df: dict) -> int:
    return len(np.unique(df["group"])) if "group" in df else len(np.unique(df["prompt_id"]))


def concat(parts: list[dict]) -> dict:
    parts = [p for p in parts if p and len(p["step"])]
    if not parts:
        return {}
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def take_rows(df: dict, mask: np.ndarray) -> dict:
    return {c: v[mask] for c, v in df.items()}


def rollout_until_groups(df: dict, shares: list[np.ndarray], run, target: int) -> tuple[StepRollout, np.ndarray]:
    """Run every share, then stop all engines when `target` groups have finished.

    Rows with nothing left to generate (response_len 0: finished in an earlier step) count as finished
    at 0 and are not sent to an engine. Returns the step's rollout and the mask of rows in finished groups
    (every group finished at the stop time, which may be more than `target` on a tie)."""
    n = len(df["step"])
    full: dict[int, tuple[np.ndarray, object]] = {}
    finish = np.zeros(n)
    for e, rows in enumerate(shares):
        rows = rows[df["response_len"][rows] > 0]
        if len(rows):
            ro = run(e, df["prompt_len"][rows], df["response_len"][rows])
            full[e] = (rows, ro)
            finish[rows] = ro.finished_at
    _, inverse = np.unique(df["group"], return_inverse=True)
    group_done = np.zeros(inverse.max() + 1 if n else 0)
    np.maximum.at(group_done, inverse, finish)
    stop = float(np.sort(group_done)[min(target, len(group_done)) - 1]) if len(group_done) and target else 0.0
    sr = StepRollout.empty(n)
    for e, (rows, ro) in full.items():
        cut, got = truncate(ro, stop, df["response_len"][rows])
        sr.add(e, rows, cut, got)
    return sr, group_done[inverse] <= stop
