"""Longest-predicted-first admission across engines (length-aware scheduling, as in Seer and RhymeRL).

Each step, every response gets a predicted length; responses are handed out
longest first, each to the engine with the least predicted work so far (the LPT
rule), and each engine admits its share in that order. Long responses then start
first and are spread over the engines instead of landing together in one
engine's contiguous chunk, so the slowest engine finishes sooner. Nothing is
stopped or carried: it is on-policy.

On multi-turn trajectories it is trajectory-aware ordering (as Heddle schedules an agent's rollout): a
trajectory's predicted length (its tokens over all its turns) places it, and ranks it in its engine's queue
for every turn, so a long trajectory coming back from a tool goes before fresh and shorter ones rather than
behind them.

Predictors:
    history  the mean length of the same prompt (prompt_id) in earlier steps (RhymeRL reuses the
             previous epoch's lengths of a prompt; Seer predicts from the lengths of a prompt's group);
             a prompt never seen gets the mean of every earlier length (equal predictions are dealt
             round-robin: step 0 spreads requests evenly by count)
    oracle   the true length, times exp(noise x N(0, 1)): `noise = 0` is a perfect oracle

Defaults: `predictor = "history"` (what a deployment can know), `noise = 0.0`.

The history predictor and the placement are tltsim.control.placement's, which a real executor drives too.
"""
from __future__ import annotations

import numpy as np

from tltsim.control.placement import HistoryPredictor, LongestFirstKnobs, lpt_shares
from tltsim.policies.knobs import KnobbedPolicy
from tltsim.sim.hooks import StepOutcome


class LongestFirst(KnobbedPolicy):
    """The simulator's glue around tltsim.control.placement (the history predictor, the LPT placement), and the
    oracle predictor, which only a simulator can have."""

    name = "longest-first"
    Knobs = LongestFirstKnobs

    def bind(self, sim) -> None:
        super().bind(sim)
        self.rng = np.random.default_rng([sim.cfg.seed, 7])
        self.history = HistoryPredictor()

    def predict(self, df: dict) -> np.ndarray:
        if self.k.predictor == "oracle":
            r = df["response_len"].astype(float)
            return r * np.exp(self.k.noise * self.rng.standard_normal(len(r))) if self.k.noise else r
        return self.history.predict(df["prompt_id"])

    def split(self, df: dict, engines: int) -> list[np.ndarray]:
        self._pred = self.predict(df)
        return lpt_shares(self._pred, engines)

    def priority(self, df: dict, rows: np.ndarray) -> np.ndarray:
        """The rows' predicted lengths, as `split` placed them (the same draws: computed once per step)."""
        return self._pred[np.asarray(rows)]

    def end_rollout(self, step: int, t: float, df: dict, sr) -> StepOutcome:
        done = sr.finished
        self.history.observe(df["prompt_id"][done], df["response_len"][done])
        return StepOutcome()
