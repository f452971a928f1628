"""The adaptive rollout loop: an `Engine` driven iteration by iteration by the policy layer's objects.

Before each decode iteration, the simulator's `SDSwitch` is told the running batch
(`advance(batch, 1)`) and says whether speculation is on; if it is, a guard asks whether
speculating pays at this batch (below), and the strategy tuner (`choose(batch)`) picks the draft
tree. After a speculative iteration the tuner gets `update(strategy, batch, reward, 1)` with
reward = tokens the batch gained (accepted length, bonus token included, summed over rows) per
wall-clock second of the iteration: the same rule the simulator's exact engine applies with
modelled times (tltsim/sim/engine.py). An iteration in which the drafter built or caught up its state
(the switch's re-prefill, which the simulator times as a separate prefill) is not fed to the tuner.

Guard (optional, one per engine across rollouts like the tuner): at a batch where speculating
measured slower than plain decoding, decode plainly; the simulator's engine applies the same
`tltsim.policy.SpeculationGuard` to modelled times.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from real.generate import Engine


@dataclass
class Step:
    """One engine call (an admission's prefill or a decode iteration), on the run's clock."""

    mode: str  # "prefill", "decode" or "spec_decode" (timeline state names)
    strategy: str  # depth_topk_verify for spec_decode, "" otherwise
    batch_size: int  # rows processed
    accepted: float  # mean accepted length per row (drafts accepted + 1 bonus) for spec_decode; NaN otherwise
    tokens: int  # tokens prefilled or emitted, over all rows
    wall_s: float  # the engine's own measure of the call
    t_start: float  # run clock when the call began (the previous call's end: loop overhead is included)
    t_end: float  # run clock when it returned
    reprefill: bool = False  # the drafter built or caught up its state (the SD switch's cost)


@dataclass
class Rollout:
    """What `rollout` did: request ids in prompt order, the engine calls, and when each request came and went."""

    ids: list[int]
    steps: list[Step]
    admitted_at: dict[int, float]  # request id -> run clock at the end of its prefill
    finished_at: dict[int, float]  # request id -> run clock at the end of the call that finished it


def rollout(engine: Engine, prompts: list[list[int]], clock, switch=None, tuner=None, guard=None, *,
            max_running: int | None = None, poll=None, start: float | None = None) -> Rollout:
    """Generate every prompt to the end on `engine` (fresh: no running rows, nothing finished).

    `clock()` is the run's clock (seconds). `switch` (reset here) and `tuner` decide speculation; with
    either missing, or no drafter on the engine, every iteration decodes plainly; `guard` (a
    SpeculationGuard, or None) is told every iteration and may veto speculating. At most
    `max_running` rows run at once (all when None); finished rows make room for the next prompts.
    `poll()`, if given, is called after every engine call (the spot-training coordinator's hook).
    `start` (default: now) is where the first call's interval begins on the clock.
    """
    speculative = switch is not None and tuner is not None and engine.drafter is not None
    guard = guard if speculative else None
    if guard is not None:
        guard.begin_rollout()
    if switch is not None:
        switch.reset()
    cap = max_running or len(prompts)
    out = Rollout([], [], {}, {})
    ids, records = out.ids, out.steps
    sd = speculative and switch.on
    t_prev = clock() if start is None else start
    while len(ids) < len(prompts) or engine.running:
        room = cap - engine.running
        if room > 0 and len(ids) < len(prompts):
            batch = prompts[len(ids): len(ids) + room]
            ids += engine.add(batch)
            it = engine.iterations[-1]
            t_prev = _log(records, Step("prefill", "", it.batch_size, math.nan, it.tokens, it.wall_s, t_prev, clock()))
            out.admitted_at.update((i, t_prev) for i in ids[-len(batch):])
            if poll:
                poll()
        b = engine.running
        if speculative and not sd:
            sd = switch.advance(b, 1) == 0 and switch.on
        strategy = tuner.choose(b) if sd and (guard is None or guard.pays(b)) else None
        it = engine.step("spec" if strategy is not None else "plain", strategy)
        if strategy is not None:
            gained = sum(a + 1 for a in it.accepted)
            if not it.reprefill:  # a re-prefill's one-off cost is the switch's, not the strategy's
                tuner.update(strategy, b, gained / it.wall_s, 1)
            if guard is not None:  # steady-state rate: the simulator's guard sees no catch-up either
                guard.observe_spec(b, gained / (it.wall_s - it.catchup_s))
            step = Step("spec_decode", str(strategy), b, gained / b, it.tokens, it.wall_s, t_prev, clock(), it.reprefill)
        else:
            if guard is not None:
                guard.observe_plain(b, it.wall_s)
            step = Step("decode", "", b, math.nan, it.tokens, it.wall_s, t_prev, clock())
        t_prev = _log(records, step)
        out.finished_at.update((i, t_prev) for i in engine.finished if i not in out.finished_at)
        if poll:
            poll()
    return out


def _log(records: list[Step], step: Step) -> float:
    records.append(step)
    return step.t_end
