"""Prompt groups for the policies that launch more than a step trains on (partial rollout, tail batching).

They draw prompt groups from a `tltsim.sim.prompts.PromptStream`; the rows' helpers and the rule of when such a
step stops are tltsim.control.groups', which a real executor drives too.

`rollout_until_groups` runs a step's rollout and stops every engine once `target`
groups have finished (a group finishes with its last sample). Each engine's rollout
is computed to completion and then cut (tltsim.sim.rollout.truncate), so with
speculation (`partial+tlt`) the tuner has also seen the iterations after the cut.
"""
from __future__ import annotations

import numpy as np

from tltsim.control.groups import needs_engine, quota_stop
from tltsim.sim.rollout import StepRollout, truncate


def rollout_until_groups(df: dict, shares: list[np.ndarray], run, target: int) -> tuple[StepRollout, np.ndarray]:
    """Run every share, then stop all engines when `target` groups have finished (tltsim.control.groups.quota_stop).

    Rows with nothing left to generate (response_len 0: finished in an earlier step) count as finished
    at 0 and are not sent to an engine, but for the trace's aborted rows, which are (admitted, then aborted)
    (tltsim.control.groups.needs_engine). Returns the step's rollout and the mask of rows in finished groups
    (every group finished at the stop time, which may be more than `target` on a tie)."""
    n = len(df["step"])
    full: dict[int, tuple[np.ndarray, object]] = {}
    finish = np.zeros(n)
    runs = needs_engine(df["response_len"], df.get("aborted"))
    for e, rows in enumerate(shares):
        rows = rows[runs[rows]]
        if len(rows):
            ro = run(e, df["prompt_len"][rows], df["response_len"][rows], rows)
            full[e] = (rows, ro)
            finish[rows] = ro.finished_at
    stop, done = quota_stop(df["group"], finish, target)
    sr = StepRollout.empty(n)
    for e, (rows, ro) in full.items():
        cut, got = truncate(ro, stop, df["response_len"][rows])
        sr.add(e, rows, cut, got)
    return sr, done
