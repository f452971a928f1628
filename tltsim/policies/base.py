"""The ideal-balance lower bound (`ideal`); the baseline `Policy` and its hooks live in tltsim/sim/hooks.py."""
from __future__ import annotations

import numpy as np

from tltsim.sim.hooks import Policy


class Ideal(Policy):
    """Perfect load balance of the same tokens: every response of a step gets the step's mean length
    (total tokens kept), so every engine finishes together and nothing waits in a tail. A lower bound
    on rollout time for plain decoding, not a realisable policy."""

    name = "ideal"

    def prepare_step(self, step: int, df: dict) -> dict:
        r = df["response_len"]
        n, total = len(r), int(r.sum())
        balanced = np.full(n, total // n, dtype=r.dtype)
        balanced[: total % n] += 1
        return {**df, "response_len": balanced}
