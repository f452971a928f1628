"""Which rows of a step each worker runs, in the order its engine admits them. Torch-free.

    placed_rows(prompts, group, world)              # verl's: each worker a contiguous block of whole groups
    placed_rows(prompts, group, world, predictor)   # longest-first's: tltsim.control.placement's LPT over the rows

longest-first places rows as the simulator's policy (tltsim/policies/length_aware.py) does, by the same code: every
row of the step in (prompt_id, sample) order gets its prompt's predicted length (tltsim.control.placement.
HistoryPredictor), and the rows are dealt longest first to the least-loaded worker (lpt_shares), each worker's in
the order it admits them. A group's rows may then land on several workers, so the step's advantages are computed
over every worker's rewards (real/run/rows.py).
"""
from __future__ import annotations

import numpy as np

from tltsim.control.placement import HistoryPredictor, lpt_shares


def placed_rows(prompts: int, group: int, world: int, predictor: HistoryPredictor | None = None
                ) -> list[list[tuple[int, int]]]:
    """Per worker, its rows (prompt_id, sample) in admission order."""
    if predictor is None:
        return [[(pid, j) for pid in block.tolist() for j in range(group)]
                for block in np.array_split(np.arange(prompts), world)]
    rows = [(pid, j) for pid in range(prompts) for j in range(group)]
    shares = lpt_shares(predictor.predict(np.array([pid for pid, _ in rows])), world)
    return [[rows[i] for i in share.tolist()] for share in shares]

