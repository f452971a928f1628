"""The lower bound on plain synchronous decoding (`ideal`: a bound, not a policy, run through the policy hooks of
tltsim/sim/hooks.py).

A step's rollout, decoded plainly (no speculation) on `engines` engines of at most `max_running` running
requests each, with every response generated to its end, takes at least

    max(L, W)
    L = the longest response decoded alone on one engine: its prompt's prefill, then its tokens one
        iteration each at batch 1 (`alone_times`; the fast path's time of that request by itself)
    W = the step's work at the cluster's best throughput (`work_time`): every prompt prefilled in one
        pass, and the step's T tokens decoded in T / B iterations of the fullest batch B (max_running,
        or fewer where the KV cache cannot hold that many of the step's requests), whose contexts sum to
        what the step's iterations read (request i reads prompt_i + j tokens at its j-th token, however the
        requests are batched), spread evenly over the engines.

Why each holds, for a cost model whose iteration times are non-decreasing in batch and context, convex,
with a non-negative fixed part (the roofline and the profiled models are; docs/design.md#the-ideal-bound):
a request is prefilled no faster than alone and then needs one iteration per token, each no faster than
at batch 1 on its own context (L); over all engines, the sum of the iterations' times is at least N
iterations at the mean batch and context (convexity), N is at least T / B, and fewer iterations of larger
batches cost no more (the fixed part), so the engines' mean busy time is at least W, and the slowest
engine's at least the mean.
"""
from __future__ import annotations

import numpy as np

from tltsim.sim.engine import EngineRollout, Interval
from tltsim.sim.hooks import Policy
from tltsim.sim.rollout import StepRollout


def alone_times(prompt_len, response_len, cost) -> np.ndarray:
    """Seconds each request takes decoded alone on one engine: its prefill, then its tokens at batch 1."""
    p = np.asarray(prompt_len, dtype=float)
    r = np.asarray(response_len, dtype=float)
    return np.asarray(cost.prefill_time(p, p * p) + cost.segment_time(1, 1, p, 1, r), dtype=float)


def work_time(prompt_len, response_len, cost, engines: int, max_running: int) -> float:
    """The step's work at the cluster's best throughput, spread evenly over `engines` (see the module
    docstring): a lower bound on the mean engine's busy time."""
    p = np.asarray(prompt_len, dtype=float)
    r = np.asarray(response_len, dtype=float)
    tokens = float(r.sum())
    fits = int(cost.kv_capacity_tokens // max(float((p + r).min()), 1.0)) if len(p) else max_running
    batch = max(1, min(max_running, fits))
    prefill = float(cost.prefill_time(p.sum(), float((p * p).sum())))
    if tokens <= 0:
        return prefill / engines
    context = float(np.sum(r * p + r * (r - 1) / 2))  # context tokens read over the step's iterations
    iterations = tokens / batch
    decode = iterations * float(cost.decode_time(batch, context / iterations))
    return (prefill + decode) / engines


class Ideal(Policy):
    """Not a realisable policy: each step's rollout takes the lower bound max(L, W) of the module docstring.

    Every engine is busy for W (the work spread evenly) and no response finishes before it would alone, so
    a response finishes at max(its alone time, W) and the step's rollout at max(L, W): what remains of the
    tail is what no schedule of plain decoding removes."""

    multi_turn = False  # its bound is the single-turn one

    name = "ideal"

    def rollout(self, step, df, shares, run) -> StepRollout:
        cost, cluster = self.sim.cost, self.sim.cfg.cluster
        alone = alone_times(df["prompt_len"], df["response_len"], cost)
        busy = work_time(df["prompt_len"], df["response_len"], cost, self.sim.engines, cluster.max_running)
        finish = np.maximum(alone, busy)
        sr = StepRollout.empty(len(df["step"]))
        for e, rows in enumerate(shares):
            if len(rows):
                end = float(finish[rows].max())
                ro = EngineRollout(end, np.zeros(len(rows)), finish[rows],
                                   [Interval("decode", 0.0, end, len(rows), float(df["response_len"][rows].sum()))])
                sr.add(e, rows, ro, df["response_len"][rows])
        return sr
