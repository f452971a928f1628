"""The adaptive rollout loop: an `Engine` driven iteration by iteration by the policy layer's `EngineControl`.

Before each decode iteration the control decides (`decide(batch)`): plain decoding, or speculation with
the strategy it names (its switch, guard and tuner, the same objects and the same sequence the
simulator drives with modelled times). After the iteration it is told what happened: a plain
iteration's seconds, or a speculative one's tokens gained (accepted length, bonus token included,
summed over rows), seconds, and the share of them the drafter spent building or catching up its
state (`Iteration.catchup_s`), which the control keeps out of the tuner's reward.

An engine with tools (real.engine.generate, tool calls): before each iteration the rows whose tools have answered
are resumed (a "prefill" call: the answers' tokens onto their kept KV); when every row left is waiting on a tool,
the loop waits for the first answer, a "tool_wait" call (the timeline's state for an engine whose rows all wait on
tools). A row in a tool call holds no slot, as an agent loop's next turn is a new request to its server: at most
`max_running` rows run, new prompts are admitted first, and answered rows resume as slots allow, in the order they
paused (the simulator's queue, tltsim.sim.agentic).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from real.engine.generate import Engine
from tltsim.control.control import EngineControl


@dataclass
class EngineCall:
    """One engine call (an admission's prefill or a decode iteration), on the run's clock."""

    mode: str  # "prefill", "decode", "spec_decode" or "tool_wait" (timeline state names)
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
    calls: list[EngineCall]
    admitted_at: dict[int, float]  # request id -> run clock at the end of its prefill
    finished_at: dict[int, float]  # request id -> run clock at the end of the call that finished it
    iteration_end: list[float] = field(default_factory=list)  # per engine Iteration (by index), the run clock at the
    # end of its call: when a turn (real.engine.records.Turn) began and ended


def rollout(engine: Engine, prompts: list[list[int]], clock, control: EngineControl | None = None, *,
            max_running: int | None = None, poll=None, start: float | None = None,
            answers: list[list[int]] | None = None, budgets: list[int] | None = None, stop=None) -> Rollout:
    """Generate every prompt to the end on `engine` (fresh: no running rows, nothing finished), or until `stop()`.

    `clock()` is the run's clock (seconds). `control` (its rollout begun by the caller, who owns the step) decides every iteration; without
    it, or without a drafter on the engine, every iteration decodes plainly. At most `max_running` rows run at
    once (all when None); finished rows make room for the next prompts. `poll()`, if given, is called after
    every engine call (the spot-training coordinator's hook). `start` (default: now) is where the first call's
    interval begins on the clock. `answers` (one per prompt): recorded responses the engine emits instead of
    its own draws (real.engine.generate, replayed answers). `budgets` (one per prompt): the tokens each row may
    generate (Engine.add's). `stop()`, if given, is asked before every engine call, and once more after the
    last: once it says True the rollout returns at once, its rows unfinished (`Engine.in_progress`; prompts not yet
    admitted have no request id).
    """
    control = control if engine.drafter is not None else None
    cap = max_running or len(prompts)
    out = Rollout([], [], {}, {})
    ids, calls = out.ids, out.calls
    t_prev = clock() if start is None else start
    stopped = False
    while len(ids) < len(prompts) or engine.running or engine.paused:
        if stop is not None and (stopped := stop()):
            break
        room = cap - engine.running  # a row in a tool call holds no slot (its next turn is a new request to a server)
        if room > 0 and len(ids) < len(prompts):
            admit = slice(len(ids), len(ids) + room)
            new = engine.add(prompts[admit], None if answers is None else answers[admit],
                             None if budgets is None else budgets[admit])
            ids += new
            it = engine.iterations[-1]
            t_prev = _log(calls, EngineCall("prefill", "", it.batch_size, math.nan, it.tokens, it.wall_s, t_prev,
                                            clock()))
            out.iteration_end.append(t_prev)
            out.admitted_at.update((i, t_prev) for i in new)
            if poll:
                poll()
        if engine.paused:
            if not engine.running:
                waited = engine.paused
                t_wait = clock()
                engine.wait_tools()
                t_prev = _log(calls, EngineCall("tool_wait", "", waited, math.nan, 0, clock() - t_wait, t_prev, clock()))
            it = engine.resume(cap - engine.running)  # the answered rows, as slots allow, after the new prompts
            if it is not None:
                t_prev = _log(calls, EngineCall("prefill", "", it.batch_size, math.nan, it.tokens, it.wall_s, t_prev,
                                                clock()))
                out.iteration_end.append(t_prev)
                if poll:
                    poll()
        if not engine.running:
            continue
        b = engine.running
        strategy = control.decide(b) if control is not None else None
        it = engine.step("spec_decode" if strategy is not None else "decode", strategy)
        if strategy is not None:
            gained = sum(a + 1 for a in it.accepted)
            control.observe_spec(strategy, b, gained, it.wall_s, it.catchup_s)
            call = EngineCall("spec_decode", str(strategy), b, gained / b, it.tokens, it.wall_s, t_prev, clock(),
                              it.reprefill)
        else:
            if control is not None:
                control.observe_plain(b, it.wall_s)
            call = EngineCall("decode", "", b, math.nan, it.tokens, it.wall_s, t_prev, clock())
        t_prev = _log(calls, call)
        out.iteration_end.append(t_prev)
        out.finished_at.update((i, t_prev) for i in engine.finished if i not in out.finished_at)
        if poll:
            poll()
    if stop is not None and not stopped:
        stop()  # once more after the last call: what it finished is told (a quota, a migration's count)
    return out


def _log(calls: list[EngineCall], call: EngineCall) -> float:
    calls.append(call)
    return call.t_end
