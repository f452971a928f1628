"""Speculation in one engine's rollout: what drafting and verifying cost, and the speculative chunk, the one
routine by which both executors that advance between batch changes speculate (the single-turn fast path,
tltsim.sim.engine.fast_rollout, and the multi-turn one, tltsim.sim.agentic).

A chunk is a run of speculative iterations at a constant batch with one strategy, the one the engine's control
decided: as many iterations as the tuner's chunk (`chunk_iters`, or the guard's trial) allows, no more than the
running row nearest its end needs, and cut where something outside the batch happens first (a tool returning, in an
agentic rollout). Every row gains the strategy's mean accepted length per iteration, so its wall time is the cost
model's closed-form sum (`segment_time`) of the verifies plus the drafting; the drafter first catches up on the
tokens per row it has not read (plain iterations' since it last ran). The control is told what it observed.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tltsim.control.control import EngineControl


@dataclass
class Speculation:
    """What an engine needs to speculate in one rollout: the decisions (`control`) and the world they act in."""

    control: EngineControl  # the engine's decisions (its rollout begun by the caller)
    acceptance: object  # mean(strategy, q), sample(strategy, q, rng, size)
    quality: float  # drafter quality this step
    row_quality: np.ndarray | None = None  # exact path: each request's own quality (in the engine's admission order),
    # where the caller knows it (a replayed run: what each response accepted); the fast path runs on `quality`
    chunk_iters: int = 32  # fast path: iterations per tuner decision
    rng: np.random.Generator | None = None  # exact path: acceptance sampling
    model_free: bool = False  # n-gram or history drafter: no drafter forwards to pay for
    lookup_fraction: float = 0.0  # a history drafter's index lookup and catch-up, as a share of each verify's time
    method: object = None  # the drafter's method (tltsim.drafter.methods.Method): what drafting costs; None:
    # the EAGLE-style drafter's `depth` forwards

    def draft_time(self, cost, batch: int, strategy) -> float:
        """Drafting cost of one speculative iteration: the method's forwards (none when model-free)."""
        return drafting_time(cost, batch, strategy, self.model_free, self.method)

    def catchup_time(self, cost, batch: int, tokens_per_row: float, ctx: float) -> float:
        """The drafter feeding on `tokens_per_row` tokens per row that plain iterations emitted since it last
        ran (the first speculative iteration after them; the batch holds `ctx` tokens): the cost model's
        catch-up (none when model-free)."""
        return 0.0 if self.model_free or tokens_per_row <= 0 else float(cost.catchup_time(batch, tokens_per_row, ctx))

    def iteration_time(self, cost, batch: int, strategy, ctx: float) -> float:
        """One speculative iteration: drafting, then one verify of the last token plus `verify` nodes per request
        (and the history lookup's share of it)."""
        return speculative_iteration_time(cost, batch, strategy, ctx, self.model_free, self.lookup_fraction,
                                          self.method)


def drafting_time(cost, batch: int, strategy, model_free: bool, method=None) -> float:
    """Drafting cost of one speculative iteration at `batch`: what the drafter's method drafts with
    (tltsim.drafter.methods; None: `depth` drafter forwards of the cost model), none when model-free."""
    if model_free:
        return 0.0
    if method is not None:
        return method.drafting_time(cost, batch, strategy)
    return strategy.depth * float(cost.draft_time(batch, strategy.topk))


def speculative_iteration_time(cost, batch: int, strategy, ctx: float, model_free: bool = False,
                               lookup_fraction: float = 0.0, method=None) -> float:
    """One speculative iteration at `batch` with `ctx` tokens in the batch: drafting, then one verify of the last
    token plus `verify` nodes per request, and a history lookup's share (`lookup_fraction`) of the verify."""
    return drafting_time(cost, batch, strategy, model_free, method) + (1.0 + lookup_fraction) * float(
        cost.verify_time(batch, strategy.verify + 1, ctx))


@dataclass(frozen=True)
class Chunk:
    """A chunk of speculative iterations: its strategy, iterations (fractional: the fast path's token clock), wall
    seconds (the drafter's catch-up included) and the mean accepted length each iteration gained every row."""

    strategy: object
    iterations: float
    seconds: float
    accepted: float


def speculate(spec: Speculation, cost, strategy, batch: int, ctx: float, left: float, behind: float,
              room: float = np.inf) -> Chunk:
    """One chunk (the module docstring) at `batch` rows holding `ctx` tokens, with `strategy` (the control's
    decision): at most `left / accepted` iterations (`left`: the tokens the row nearest its end still needs), fewer
    where `room` seconds run out first (at least those that reach it); the drafter catches up on `behind` tokens per
    row first. Tells `spec.control` what it observed."""
    acc = float(spec.acceptance.mean(strategy, spec.quality))

    def iterations_time(k):
        return k * spec.draft_time(cost, batch, strategy) + (1.0 + spec.lookup_fraction) * float(
            cost.segment_time(batch * (strategy.verify + 1), strategy.verify + 1, ctx, batch * acc, k))

    catchup = spec.catchup_time(cost, batch, behind, ctx)
    k_max = min(spec.control.trial_chunk(batch) or spec.chunk_iters, spec.chunk_iters, left / acc)
    k, dt = within(k_max, room - catchup, iterations_time, whole=False)
    dt += catchup
    spec.control.observe_spec(strategy, batch, acc * batch * k, dt, catchup, k)
    return Chunk(strategy, k, dt, acc)


def within(k_max, room: float, stretch: Callable[[float], float], whole: bool) -> tuple:
    """(iterations, their seconds) of a stretch timed by `stretch(k)`: `k_max`, or fewer where they would run past
    `room` seconds (those that reach it, at least one; a whole number of them where `whole`)."""
    full = float(stretch(k_max))
    if full <= room:
        return k_max, full
    k = k_max * max(room, 0.0) / full if full > 0 else k_max
    k = max(1, int(np.ceil(k))) if whole else min(max(k, min(1.0, k_max)), k_max)
    return k, float(stretch(k))


@dataclass
class Tally:
    """What a rollout's speculation added up to: iterations, the sum over them of the mean accepted length, and the
    iterations of each strategy (EngineRollout's sd_iterations, sd_accepted and strategies)."""

    iterations: float = 0.0
    accepted: float = 0.0
    strategies: Counter = field(default_factory=Counter)

    def add(self, chunk: Chunk) -> None:
        self.iterations += chunk.iterations
        self.accepted += chunk.iterations * chunk.accepted
        self.strategies[str(chunk.strategy)] += chunk.iterations


def strategies_text(iterations: Counter) -> str:
    """A step's `strategies` column: each strategy's iterations, most used first ("3_1_3:120,2_1_2:40")."""
    return ",".join(f"{s}:{n:.0f}" for s, n in iterations.most_common())
