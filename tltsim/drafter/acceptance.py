"""Accepted length of speculative decoding as a function of strategy and drafter quality.

One verify iteration accepts the longest drafted prefix the target agrees with,
plus one bonus token the target produces itself, so the accepted length L is in
[1, depth + 1].

The model follows EAGLE-2's dynamic draft tree (Li et al., 2024):

* At draft position l (1 = first drafted token) the drafter ranks its
  candidates; the target's token is the drafter's top-r candidate with
  probability pi_l(r). Coverage of the top r is
  ``c_l(r) = 1 - (1 - a_l) ** (r ** BETA)`` with top-1 acceptance
  ``a_l = q ** (1 + DELTA * (l - 1))``: a drafter of quality q is right at the
  first position with probability q, less so deeper (EAGLE drafts from its own
  features, so errors compound), and each further alternative helps less
  (BETA < 1).
* A tree node is a path of ranks; its value (EAGLE-2's path confidence) is the
  product of pi_l(r_l) along the path, which here is exactly the probability
  that the node lies on the target's path.
* Tree growth as in EAGLE-2: the root's `topk` children form layer 1; each
  next layer expands the `topk` best nodes of the previous layer into their
  `topk` children each; after `depth` layers the `verify` best nodes of all
  layers are verified (a child never outranks its parent, so they form a tree).
  `verify` counts drafted nodes only, not the root (the last accepted token).
* The accepted prefix reaches depth j iff a verified depth-j node is on the
  target's path, and those events are disjoint within a depth, so
  ``P(L - 1 >= j) = S_j = sum of verified depth-j node values``. Mean,
  variance and samples all come from S.

TLT (ASPLOS 2026) reports the accepted lengths in PUBLISHED_ACCEPTED for a
well-trained drafter (Qwen2.5-32B, bs 1); DELTA, BETA and Q_TRAINED are fitted
to them (see `fit`), and Q_STATIC_RL / Q_ADAPTIVE_RL reproduce its accepted
length during RL for a static (4.59) and an adaptive (6.53) drafter.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

import numpy as np

from tltsim.core.errors import TltsimError
from tltsim.control.strategy import Strategy

# docs/design.md#accepted-length table (TLT, Qwen2.5-32B, TP=4, H100, bs 1). The
# source does not name the top-k of these runs; we take 8, the top-k of its
# speedup-vs-batch grid.
PUBLISHED_ACCEPTED: Mapping[Strategy, float] = {
    Strategy(4, 8, 16): 4.63, Strategy(4, 8, 128): 4.82,
    Strategy(8, 8, 16): 6.34, Strategy(8, 8, 128): 7.51,
    Strategy(12, 8, 16): 6.80, Strategy(12, 8, 32): 7.63,
    Strategy(12, 8, 48): 7.97, Strategy(12, 8, 64): 8.21,
}
# "Top-k 4..16 barely matters (accepted 8.29..8.67)" (depth and verify not given).
PUBLISHED_TOPK_RANGE = (8.29, 8.67)

# Fitted once with the loss of `fit` (least squares on log accepted length) on
# PUBLISHED_ACCEPTED, Nelder-Mead from 18 starts (q 0.6/0.75/0.9, delta
# 0.05/0.3, beta 0.3/0.7/1.0), keeping the best; every cell lands within 2%
# (tests/control/test_acceptance.py prints the table and checks that refitting
# from these constants returns them).
Q_TRAINED = 0.92102  # well-trained drafter: top-1 acceptance at the first position
DELTA = 0.18785      # per-position decay: a_l = q ** (1 + DELTA * (l - 1))
BETA = 0.40022       # diminishing returns of alternatives: coverage 1 - (1-a) ** (r ** BETA)

# Qualities that give TLT's accepted lengths during RL with the default
# strategy 8_4_48 (an assumption: the source does not name the strategy);
# found by root-finding `mean(Strategy(8, 4, 48), q)` = 4.59 and 6.53.
RL_REFERENCE_STRATEGY = Strategy(8, 4, 48)
Q_STATIC_RL = 0.78669    # stale drafter trained once before RL: L = 4.59
Q_ADAPTIVE_RL = 0.89805  # drafter trained online by TLT's spot trainer: L = 6.53


@dataclass(frozen=True)
class AcceptanceModel:
    """Accepted length per verify iteration; deterministic except `sample`."""

    delta: float = DELTA  # how much faster top-1 acceptance falls with each deeper position
    beta: float = BETA    # exponent < 1: the r-th alternative helps less than the first

    def survival(self, strategy: Strategy, q: float) -> np.ndarray:
        """``S[j-1] = P(L - 1 >= j)`` for j = 1..depth: a non-increasing array in [0, 1]."""
        q = _check_quality(q)
        return _survival(strategy.depth, strategy.topk, strategy.verify, q,
                         self.delta, self.beta).copy()

    def mean(self, strategy: Strategy, q: float) -> float:
        """Expected accepted length (bonus token included), in [1, depth + 1]."""
        return 1.0 + float(self.survival(strategy, q).sum())

    def var(self, strategy: Strategy, q: float) -> float:
        """Variance of the accepted length of one verify iteration."""
        s = self.survival(strategy, q)
        j = np.arange(1, s.size + 1)
        m = s.sum()
        return float(((2 * j - 1) * s).sum() - m * m)

    def sample(self, strategy: Strategy, q, rng: np.random.Generator,
               size: int | None = None):
        """Accepted lengths of `size` independent verify iterations (ints in [1, depth+1]). `q` is one quality,
        or one per iteration (an array of `size`: each row of a batch drafted for at its own quality); either
        way the same draws are taken from `rng`, so equal qualities give equal samples."""
        u = np.asarray(rng.random(size))
        if np.ndim(q) == 0:
            # accepted drafts = number of j with S_j > u (S is non-increasing)
            return 1 + np.searchsorted(-self.survival(strategy, q), -u, side="left")
        q = np.asarray(q, dtype=float)
        if q.shape != u.shape:
            raise TltsimError(f"acceptance: {q.size} qualities for {u.size} samples; give one, or one per sample")
        drafted = np.empty(u.shape, dtype=np.int64)
        for qi in np.unique(q):
            rows = q == qi
            drafted[rows] = np.searchsorted(-self.survival(strategy, qi), -u[rows], side="left")
        return 1 + drafted


def invert_quality(model, strategy: Strategy | Mapping[Strategy, float], accepted: float) -> float:
    """The q in [0, 1] with model.mean(strategy, q) == accepted (clamped at the ends), by bisection. `strategy`
    may be a mix, strategy -> its iterations: then the mean over the mix's iterations equals `accepted`."""
    mix = strategy if isinstance(strategy, Mapping) else {strategy: 1.0}
    total = float(sum(mix.values()))

    def mean(q: float) -> float:
        return sum(w * model.mean(s, q) for s, w in mix.items()) / total

    lo, hi = 0.0, 1.0
    if accepted <= mean(lo):
        return lo
    if accepted >= mean(hi):
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean(mid) < accepted else (lo, mid)
    return (lo + hi) / 2


def _check_quality(q: float) -> float:
    q = float(q)
    if not 0.0 <= q <= 1.0:
        raise TltsimError(f"drafter quality {q!r}: must be in [0, 1] "
                          "(the top-1 acceptance at the first drafted position)")
    return q


@lru_cache(maxsize=4096)
def _survival(depth: int, topk: int, verify: int, q: float,
              delta: float, beta: float) -> np.ndarray:
    ranks = np.arange(topk + 1)
    values, depths = [], []
    layer = np.ones(1)  # the root: the last verified token, on the target path for sure
    for pos in range(depth):
        top1 = q ** (1.0 + delta * pos)
        coverage = 1.0 - (1.0 - top1) ** (ranks ** beta)
        coverage[0] = 0.0
        pi = np.diff(coverage)                      # [topk] P(target is the r-th candidate)
        parents = np.sort(layer)[::-1][:topk]       # [<=topk] best nodes expanded
        layer = (parents[:, None] * pi[None, :]).ravel()  # [<=topk*topk] children
        values.append(layer)
        depths.append(np.full(layer.size, pos + 1))
    values = np.concatenate(values)
    depths = np.concatenate(depths)
    chosen = np.lexsort((depths, -values))[:verify]  # best first; parents before equal children
    survival = np.bincount(depths[chosen], weights=values[chosen], minlength=depth + 1)[1:]
    survival.setflags(write=False)
    return survival


def fit(cells: Mapping[Strategy, float], start=(Q_TRAINED, DELTA, BETA)):
    """Fit (q, delta, beta) to measured mean accepted lengths by least squares on their logs.

    `cells` maps a strategy to its measured mean accepted length, all at one
    drafter quality (e.g. the docs/design.md#accepted-length table, or `real/` measurements). Returns
    ``(q, AcceptanceModel(delta, beta))``. Uses one Nelder-Mead run from `start`.
    """
    from scipy.optimize import minimize

    strategies = list(cells)
    target = np.log([cells[s] for s in strategies])

    def loss(x):
        q, delta, beta = x
        if not (0.0 < q < 1.0 and delta >= 0.0 and beta > 0.0):
            return 1e9
        pred = [1.0 + _survival(s.depth, s.topk, s.verify, q, delta, beta).sum()
                for s in strategies]
        return float(((np.log(pred) - target) ** 2).sum())

    res = minimize(loss, list(start), method="Nelder-Mead",
                   options=dict(xatol=1e-7, fatol=1e-12, maxiter=4000))
    q, delta, beta = res.x
    return float(q), AcceptanceModel(float(delta), float(beta))
