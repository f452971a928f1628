"""Longest-predicted-first's decisions (length-aware scheduling, as in Seer and RhymeRL): each response's predicted
length, where it runs and in which order its engine admits it. The simulator's `longest-first` policy
(tltsim/policies/length_aware.py, which describes the method and its defaults) and a real executor drive the same
objects:

    p = HistoryPredictor()
    pred = p.predict(prompt_ids)          a length per row: the mean of the prompt's earlier lengths
    shares = lpt_shares(pred, engines)    each engine's rows, in the order it admits them (longest first)
    priority = pred[rows]                 multi-turn: a trajectory's rank in its engine's queue, every turn
    p.observe(prompt_ids, lengths)        after the step: the lengths of the responses that finished

The predictor's sums are the state a resume needs (`state_dict`). The oracle predictor (the true length, noised)
is the simulator's alone: a real executor does not know a response's length before it is generated.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from tltsim.control.knobs import knob


@dataclass(frozen=True)
class LongestFirstKnobs:
    predictor: str = knob("history", choices=("history", "oracle"))  # where predicted lengths come from
    noise: float = knob(0.0, lo=0.0, hi=10.0, needs=("predictor", "oracle"))  # log-normal sigma on the true length


class HistoryPredictor:
    """A response's predicted length: the mean length of the same prompt (prompt_id) in earlier steps; a prompt
    never seen gets the mean of every earlier length (0 before any)."""

    def __init__(self):
        self.sums: dict[int, float] = {}  # prompt_id -> sum of its earlier lengths
        self.counts: dict[int, int] = {}
        self.total, self.n = 0.0, 0

    def predict(self, prompt_ids: np.ndarray) -> np.ndarray:
        """The predicted length of a response to each of `prompt_ids`."""
        default = self.total / self.n if self.n else 0.0
        return np.array([self.sums[p] / self.counts[p] if p in self.counts else default
                         for p in np.asarray(prompt_ids).tolist()])

    def observe(self, prompt_ids: np.ndarray, lengths: np.ndarray) -> None:
        """Responses to `prompt_ids` finished with `lengths` (tokens)."""
        for p, length in zip(np.asarray(prompt_ids).tolist(), np.asarray(lengths).tolist()):
            self.sums[p] = self.sums.get(p, 0.0) + length
            self.counts[p] = self.counts.get(p, 0) + 1
        self.total += float(np.asarray(lengths).sum())
        self.n += len(lengths)

    def state_dict(self) -> dict:
        """The sums and counts per prompt and over all, as plain data."""
        return {"prompts": [[p, self.sums[p], self.counts[p]] for p in self.sums], "total": self.total, "n": self.n}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""
        self.sums = {p: s for p, s, _ in state["prompts"]}
        self.counts = {p: int(c) for p, _, c in state["prompts"]}
        self.total, self.n = float(state["total"]), int(state["n"])


def lpt_shares(pred: np.ndarray, engines: int) -> list[np.ndarray]:
    """The rows handed out longest predicted first, each to the engine with the least predicted work so far (the
    LPT rule; on a tie, the one with the fewest rows, then the lowest index, so equal predictions are dealt
    round-robin): each engine's row indices, in the order it admits them."""
    order = np.argsort(-np.asarray(pred), kind="stable")
    load = [(0.0, 0, e) for e in range(engines)]  # heap of (predicted tokens, requests, engine)
    shares: list[list[int]] = [[] for _ in range(engines)]
    for i in order.tolist():
        w, k, e = heapq.heappop(load)
        shares[e].append(i)
        heapq.heappush(load, (w + float(pred[i]), k + 1, e))
    return [np.array(s, dtype=np.int64) for s in shares]
