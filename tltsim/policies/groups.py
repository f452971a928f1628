"""Prompt groups for the policies that launch more than a step trains on (partial rollout, tail batching).

They draw prompt groups from a `tltsim.sim.prompts.PromptStream`.

`rollout_until_groups` runs a step's rollout and stops every engine once `target`
groups have finished (a group finishes with its last sample). Each engine's rollout
is computed to completion and then cut (tltsim.sim.rollout.truncate), so with
speculation (`partial+tlt`) the tuner has also seen the iterations after the cut.
"""
from __future__ import annotations

import numpy as np

from tltsim.sim.rollout import StepRollout, truncate


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
    at 0 and are not sent to an engine, but for the trace's aborted rows, which are (admitted, then aborted). Returns the step's rollout and the mask of rows in finished groups
    (every group finished at the stop time, which may be more than `target` on a tie)."""
    n = len(df["step"])
    full: dict[int, tuple[np.ndarray, object]] = {}
    finish = np.zeros(n)
    for e, rows in enumerate(shares):
        rows = rows[(df["response_len"][rows] > 0) | (df["aborted"][rows] if "aborted" in df else False)]
        if len(rows):
            ro = run(e, df["prompt_len"][rows], df["response_len"][rows], rows)
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
