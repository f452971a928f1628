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
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from tltsim.sim.hooks import StepOutcome
from tltsim.control.knobs import knob
from tltsim.policies.knobs import KnobbedPolicy


@dataclass(frozen=True)
class LongestFirstKnobs:
    predictor: str = knob("history", choices=("history", "oracle"))  # where predicted lengths come from
    noise: float = knob(0.0, lo=0.0, hi=10.0, needs=("predictor", "oracle"))  # log-normal sigma on the true length


class LongestFirst(KnobbedPolicy):
    name = "longest-first"
    Knobs = LongestFirstKnobs

    def bind(self, sim) -> None:
        super().bind(sim)
        self.rng = np.random.default_rng([sim.cfg.seed, 7])
        self.sums: dict[int, float] = {}  # prompt_id -> sum of its earlier lengths
        self.counts: dict[int, int] = {}
        self.total, self.n = 0.0, 0

    def predict(self, df: dict) -> np.ndarray:
        if self.k.predictor == "oracle":
            r = df["response_len"].astype(float)
            return r * np.exp(self.k.noise * self.rng.standard_normal(len(r))) if self.k.noise else r
        default = self.total / self.n if self.n else 0.0
        return np.array([self.sums[p] / self.counts[p] if p in self.counts else default for p in df["prompt_id"].tolist()])

    def split(self, df: dict, engines: int) -> list[np.ndarray]:
        pred = self._pred = self.predict(df)
        order = np.argsort(-pred, kind="stable")
        load = [(0.0, 0, e) for e in range(engines)]  # heap of (predicted tokens, requests, engine)
        shares: list[list[int]] = [[] for _ in range(engines)]
        for i in order.tolist():
            w, k, e = heapq.heappop(load)
            shares[e].append(i)
            heapq.heappush(load, (w + float(pred[i]), k + 1, e))
        return [np.array(s, dtype=np.int64) for s in shares]

    def priority(self, df: dict, rows: np.ndarray) -> np.ndarray:
        """The rows' predicted lengths, as `split` placed them (the same draws: computed once per step)."""
        return self._pred[np.asarray(rows)]

    def end_rollout(self, step: int, t: float, df: dict, sr) -> StepOutcome:
        done = sr.finished
        for p, length in zip(df["prompt_id"][done].tolist(), df["response_len"][done].tolist()):
            self.sums[p] = self.sums.get(p, 0.0) + length
            self.counts[p] = self.counts.get(p, 0) + 1
        self.total += float(df["response_len"][done].sum())
        self.n += int(done.sum())
        return StepOutcome()
