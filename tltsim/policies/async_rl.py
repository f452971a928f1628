"""Bounded-staleness asynchronous RL (AReaL: Fu et al., 2025, "AReaL: A Large-Scale Asynchronous
Reinforcement Learning System for Language Reasoning"; verl's fully-async trainer).

Rollout and training overlap on separate GPU pools; the simulation is its own set
of simpy processes (tltsim.sim.async_loop), not the synchronous step loop. Knobs:

    rollout_share  share of the GPUs that roll out (rounded to whole engines, at least one engine
                   each side); AReaL and verl's fully-async trainer leave the split to the user:
                   an even split (0.5) is ours (on the shipped DAPO-like trace at 64 GPUs, TP 4, the
                   trainer on a quarter of the GPUs is the bottleneck)
    max_staleness  a sample's first tokens may be at most this many policy versions older than the
                   step that trains on it (AReaL's eta; it studies several bounds: 4 is ours)
    update_s       seconds an engine spends loading new weights when an update interrupts it (AReaL's
                   interruptible generation; then it re-prefills its running requests); -1 = the cost
                   model's weight-sync time

The engines step from batch change to batch change in both modes: `exact` does not
change an asynchronous run. A policy that only speculates runs inside it (`async+tlt`,
`async+sd-always`, `async+tlt-auto`, `async+static-sd`, `async+tlt-base`): each engine's
switch, tuner and guard decide on its running batch, whether speculation pays there is the
cost model's answer, and the drafter trains where an engine waits (tltsim.sim.async_loop).
The gate and the trainer's choice are tltsim.control.async_rl's, which a real executor drives too.

Steps report the staleness of every trained sample (`staleness_mean`, `staleness_max`,
summary `staleness_counts` = the distribution), `resumed` (samples interrupted by an
update and continued under newer weights) and `dropped` (too stale when finished).
"""
from __future__ import annotations

from dataclasses import dataclass

from tltsim.core.errors import TltsimError
from tltsim.control.async_rl import AsyncKnobs
from tltsim.control.knobs import knob
from tltsim.policies.knobs import KnobbedPolicy
from tltsim.sim.async_loop import AsyncRun


@dataclass(frozen=True)
class AsyncRLKnobs(AsyncKnobs):
    """The decisions' knobs (tltsim.control.async_rl) and the simulator's model of an interruption."""

    update_s: float = knob(-1.0, lo=-1.0)  # weight load per interrupt, s; -1 = cost model's weight sync


class AsyncRL(KnobbedPolicy):
    name = "async"
    Knobs = AsyncRLKnobs
    stream = None  # the prompt stream the run draws from (None: the trace's groups in order); a replay sets it

    def reserved_gpus(self, cluster) -> int:
        engines = cluster.gpus // cluster.tp
        if engines < 2:
            raise TltsimError(f"policy 'async': needs at least two TP groups (one rolls out, one trains); "
                              f"gpus = {cluster.gpus}, tp = {cluster.tp}")
        rollout = min(engines - 1, max(1, round(self.k.rollout_share * engines)))
        return (engines - rollout) * cluster.tp

    def loop(self, sim, env, bar):
        update = float(sim.cost.sync_time()) if self.k.update_s < 0 else self.k.update_s
        return AsyncRun(sim, env, bar, sim.engines, self.k.max_staleness, update, self.stream).process()
