"""One engine's rollout of multi-turn trajectories: generation, tool calls, and the prefill after each.

A trajectory (a row of a multi-turn trace) is a sequence of turns. The engine generates a turn in its running
batch; at the turn's end the trajectory calls a tool and leaves the batch for the tool's latency (its slot goes
to the next in line); the tool's answer (`tool_tokens`) joins its context and the trajectory queues again for
its next turn, which starts with a prefill of the answer. Its KV stays in the engine's cache while the cache has
room (the next turn's prefill then reads the cached prefix: a prefix-cache hit, as `cached_tokens` records it);
when a trajectory needs room, the cache evicts those of waiting trajectories, oldest first, and an evicted one
prefills its whole context again when it comes back.

Admission is FIFO over the queue of trajectories ready for a turn (first turns in the share's order, then each as
its tool answers), as a server takes an agent loop's requests: a slot free (running < max_running) and the cache
able to hold the turn's context and the tokens it will generate. A trajectory-aware scheduler gives each
trajectory a `priority` instead: the queue serves the highest first (first turns and returning ones alike), FIFO
among equals. An engine whose trajectories all wait on tools
has nothing to run: that time is `tool_wait` (GPU idle; a policy may train the drafter in it).

Events at batch changes, as the fast path's: between a turn's end, a tool's return and an admission, the running
batch is constant and every running row gains the same tokens per iteration (1 plain, the mean accepted length
speculating), so a stretch's wall time is the cost model's closed-form sum (`segment_time`). Speculation is
decided as the fast path decides it (`EngineControl`: the switch on the running batch, the guard, the tuner per
chunk of at most `chunk_iters` iterations); the drafter's state is built for the running rows when the switch
turns on (`cost.switch_time`) and fed the tokens plain iterations emitted since it last ran (`catchup_time`).
"""
from __future__ import annotations

import numpy as np

from tltsim.sim.agentic.fast import play
from tltsim.sim.agentic.reference import Run
from tltsim.sim.agentic.turns import Turns
from tltsim.sim.engine import EngineRollout
from tltsim.sim.speculation import Speculation

__all__ = ["Turns", "agentic_rollout"]


def agentic_rollout(turns: Turns, cost, max_running: int, spec: Speculation | None = None,
                    priority: np.ndarray | None = None, reference: bool = False) -> EngineRollout:
    """Generate one engine's trajectories (in admission order) to their ends; see the module docstring.

    The EngineRollout's `turns` holds, per turn (flat, as `turns`'s arrays), admitted_at, finished_at,
    prompt_tokens and cached_tokens; `tool_wait_s` the seconds the engine had only trajectories waiting on tools.

    Played by `fast.play` (plain floats, the running rows on the token clock, heaps for what comes next); `reference`:
    by `reference.Run`, the same events over arrays of every row, which the fast one is tested against (the same numbers;
    within rounding where speculation's fractional tokens are summed in another order)."""
    if reference:
        return Run(turns, cost, max_running, spec, priority).run()
    return play(turns, cost, max_running, spec, priority)
