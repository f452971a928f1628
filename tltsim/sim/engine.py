"""One rollout engine (a TP group) generating its share of one RL step.

Two executors of the same model of an engine:

- `fast_rollout`: events at batch changes. Admission is scheduled on the token
  clock (schedule.py); the wall time of each segment of constant batch is a
  closed-form sum (cost.segment_time). Speculative segments advance the token
  clock by the mean accepted length per iteration, with the strategy chosen by
  the tuner once per chunk of at most `chunk_iters` iterations.
- `exact_rollout`: a simpy process that runs every iteration, samples accepted
  lengths per row (each at its request's own quality where one is given), asks for a decision every iteration, and records every
  iteration (as a real run's iterations frame: batch, mode, strategy, accepted length, seconds, end, tokens
  gained). The reference the fast path is tested against, and what `tltsim validate` replays with.

Both drive the engine's `tltsim.control.EngineControl` and never its switch, tuner
or guard directly; neither begins its rollout (the owner of the step does, once per step:
the policy's `begin_step`), so an engine run twice in a step (a migrated tail) goes on
with the same rollout.

Both return an `EngineRollout` with times relative to the rollout's start. A request of response_len 0
(aborted: the trace's `aborted` rows) is admitted, prefilled and leaves at once, with no tokens.
Prefill of requests admitted mid-rollout is folded into the decode interval
(chunked prefill mixes it into decode iterations); the first admission and the
drafter's build at the SD switch (cost.switch_time: a target re-prefill in the
roofline model, the drafter's own pass where a profile measured it) are
`prefill` intervals of their own.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from tltsim.core.records import TimelineRow, merge_states
from tltsim.cost import prefill_seconds
from tltsim.sim.schedule import admit_fifo, admits, check_footprints, segments
from tltsim.sim.speculation import Speculation, Tally, speculate


class Entry(NamedTuple):
    """What an executor logs as it goes (merged into Intervals by `merge_entries`)."""

    state: str
    t_start: float
    t_end: float
    batch_size: float  # at the entry's start
    tokens: float = 0.0
    accepted: float = np.nan  # mean accepted length of its speculative iterations
    strategy: str = ""
    weight: float = 0.0  # speculative iterations


@dataclass
class Interval:
    state: str
    t_start: float
    t_end: float
    batch_size: float = np.nan
    tokens: float = 0.0
    accepted: float = np.nan
    strategy: str = ""


@dataclass
class EngineRollout:
    duration: float
    admitted_at: np.ndarray
    finished_at: np.ndarray
    intervals: list[Interval]
    sd_iterations: float = 0.0
    sd_accepted: float = 0.0  # sum over SD iterations of the mean accepted length
    strategies: Counter = field(default_factory=Counter)  # strategy -> iterations
    switch_at: float | None = None  # when SD switched on, relative to rollout start
    iterations: list[dict] | None = None  # exact mode only
    # the token clock against wall time: tau(t) = interp(t, clock_t, clock_tau); request i has generated
    # min(tau(t) - tau_a[i], response_len[i]) tokens at t (exact for plain decoding; in speculative
    # stretches tau advances by the mean accepted length). Used to stop a rollout early (sim/rollout.py).
    clock_t: np.ndarray | None = None
    clock_tau: np.ndarray | None = None
    tau_a: np.ndarray | None = None
    # multi-turn trajectories (tltsim.sim.agentic): per turn, flat in the rows' order, admitted_at, finished_at,
    # prompt_tokens, cached_tokens, tau_a (the token clock at its admission) and gen (its tokens); first (per row:
    # its first turn's index, and the number of turns at the end); and the seconds the engine had only
    # trajectories waiting on tools
    turns: dict | None = None
    tool_wait_s: float = 0.0


def fast_rollout(prompt_len, response_len, cost, max_running, spec: Speculation | None = None) -> EngineRollout:
    """Generate one engine's share (arrays in admission order) in closed form between batch changes."""
    prompt_len = np.asarray(prompt_len, dtype=np.int64)
    response_len = np.asarray(response_len, dtype=np.int64)
    tau_a = admit_fifo(prompt_len, response_len, max_running, cost.kv_capacity_tokens)
    seg = segments(tau_a, prompt_len, response_len, cost.padded_prefill)
    pre = cost.prefill_time(seg.admitted_tokens, seg.admitted_sq)
    sd_on_from_start = spec is not None and spec.control.on
    split = None if spec is None or sd_on_from_start else _find_switch(seg, spec.control)
    if spec is None or (split is None and not sd_on_from_start):
        dec = cost.segment_time(seg.batch, 1, seg.ctx, seg.batch, seg.length)
        if spec is not None:  # the switch never fired: the guard is told of every plain iteration all the same
            _observe_plain(spec.control, seg.batch, dec, seg.length)
        seg_times = pre + dec
        t_event = np.concatenate([[0.0], np.cumsum(seg_times)])
        end = t_event[-1]
        intervals = [Interval("prefill", 0.0, pre[0], seg.batch[0], 0.0)]
        intervals.append(Interval("decode", pre[0], end, seg.batch[0], float(np.sum(seg.batch * seg.length))))
        bounds = np.concatenate([seg.start, [seg.start[-1] + seg.length[-1]]])
        return _timed(end, t_event, bounds, pre, tau_a, response_len, intervals)
    return _fast_speculative(seg, pre, prompt_len, tau_a, response_len, cost, spec, split)


def _timed(end, t_event, bounds, pre, tau_a, response_len, intervals, **spec_fields) -> EngineRollout:
    """An EngineRollout from the wall time at each segment boundary on the token clock.

    The token clock stands still during a segment's admission prefill (pre[j] after t_event[j])."""
    ia = np.searchsorted(bounds, tau_a)
    iff = np.searchsorted(bounds, tau_a + response_len)
    n = len(pre)
    clock_t = np.empty(2 * n + 1)
    clock_t[0:-1:2], clock_t[1:-1:2], clock_t[-1] = t_event[:-1], t_event[:-1] + pre, t_event[-1]
    clock_tau = np.empty(2 * n + 1)
    clock_tau[0:-1:2], clock_tau[1:-1:2], clock_tau[-1] = bounds[:-1], bounds[:-1], bounds[-1]
    return EngineRollout(float(end), t_event[ia], t_event[iff], intervals, **spec_fields,
                         clock_t=clock_t, clock_tau=clock_tau.astype(float), tau_a=np.asarray(tau_a, dtype=float))


def _find_switch(seg, control) -> tuple[int, int] | None:
    """(segment, iterations into it) at which the switch turns on, or None."""
    for j in range(len(seg.start)):
        k = control.advance(int(seg.batch[j]), int(seg.length[j]))
        if control.on:
            return j, k
    return None


def _fast_speculative(seg, pre, prompt_len, tau_a, response_len, cost, spec, split):
    """Plain decode up to the switch, a re-prefill of every running request, then speculative chunks
    (tltsim.sim.speculation.speculate; plain again at any batch where speculation does not pay, see
    `SpeculationGuard`)."""
    start, length, batch, ctx, pre, sd_from = _split(seg, pre, split)
    n = len(start)
    seg_times = pre.astype(float)
    plain = slice(0, sd_from)
    plain_times = cost.segment_time(batch[plain], 1, ctx[plain], batch[plain], length[plain])
    seg_times[plain] += plain_times
    control = spec.control
    _observe_plain(control, batch[plain], plain_times, length[plain])
    t = float(np.sum(seg_times[plain]))
    log = [Entry("prefill", 0.0, float(pre[0]), batch[0])]
    if sd_from > 0:
        log.append(Entry("decode", float(pre[0]), t, batch[0], float(np.sum(batch[plain] * length[plain]))))
    drafted = split is None  # SD on from the start: the drafter is prefilled with the target, no re-prefill
    behind = 0.0  # tokens per row emitted by plain iterations since the drafter last ran
    switch_at = None
    tally = Tally()
    for j in range(sd_from, n):
        b, c, remaining = int(batch[j]), ctx[j], length[j]
        if b == 0:
            continue
        t_seg = t + float(pre[j])  # after this segment's admission prefill
        t_log = t_seg if j == 0 else t  # segment 0's prefill is the first log entry; later ones fold in
        while remaining > 1e-9:  # chunks of speculation, a decision before each
            s = control.decide(b)
            if s is None:  # speculating does not pay here: plain decoding, until the guard would try again
                k = min(remaining, control.plain_left(b))
                dt = float(cost.segment_time(b, 1, c, b, k))
                control.observe_plain(b, dt / k, int(round(k)))
                log.append(Entry("decode", t_log, t_seg + dt, b, b * k))
                t_seg += dt
                t_log = t_seg
                behind += k if drafted else 0.0
                c += b * k
                remaining -= k
                continue
            if not drafted:  # the switch: the drafter's state for every running request (cost.switch_time)
                rows = _contexts(prompt_len, tau_a, response_len, start[j] + length[j] - remaining)
                dt = float(cost.switch_time(b, c, float(np.sum(rows ** 2))))
                log.append(Entry("prefill", t_log, t_seg + dt, b))
                switch_at, drafted = t_seg, True
                t_seg += dt
                t_log = t_seg
            chunk = speculate(spec, cost, s, b, c, remaining, behind)
            behind = 0.0
            tokens = b * chunk.accepted * chunk.iterations
            log.append(Entry("spec_decode", t_log, t_seg + chunk.seconds, b, tokens, chunk.accepted, str(s),
                             chunk.iterations))
            tally.add(chunk)
            c += tokens
            remaining -= chunk.accepted * chunk.iterations
            t_seg += chunk.seconds
            t_log = t_seg
        seg_times[j] = t_seg - t
        t = t_seg
    t_event = np.concatenate([[0.0], np.cumsum(seg_times)])
    bounds = np.concatenate([start, [start[-1] + length[-1]]])
    return _timed(t_event[-1], t_event, bounds, pre, tau_a, response_len, merge_entries(log), sd_iterations=tally.iterations,
                  sd_accepted=tally.accepted, strategies=tally.strategies, switch_at=switch_at)


def _contexts(prompt_len, tau_a, response_len, tau: float) -> np.ndarray:
    """The context (prompt and tokens so far) of each request running at `tau` on the token clock."""
    running = (tau_a <= tau + 1e-9) & (tau_a + response_len > tau + 1e-9)
    return prompt_len[running] + (tau - tau_a[running])


def _observe_plain(control, batch, times, length) -> None:
    """Tell `control` of plain segments: `length[j]` iterations at `batch[j]` took `times[j]` seconds in all."""
    for b, dt, k in zip(np.atleast_1d(batch), np.atleast_1d(times), np.atleast_1d(length)):
        if b > 0 and k > 0:
            control.observe_plain(int(b), float(dt) / k, int(round(k)))


def _split(seg, pre, split):
    """Segment arrays with the switch segment cut at the switch point; returns them and the first SD segment."""
    start, length, batch, ctx = seg.start.astype(float), seg.length.astype(float), seg.batch, seg.ctx.astype(float)
    pre = np.asarray(pre, dtype=float)
    if split is None:
        return start, length, batch, ctx, pre, 0
    j, k = split
    if not 0 < k < length[j]:
        return start, length, batch, ctx, pre, (j + 1 if k >= length[j] else j)
    cut = lambda a, v: np.insert(a, j + 1, v)  # noqa: E731
    new_len = cut(length, length[j] - k)
    new_len[j] = k
    return (cut(start, start[j] + k), new_len, cut(batch, batch[j]), cut(ctx, ctx[j] + batch[j] * k), cut(pre, 0.0), j + 1)


def exact_rollout(env, prompt_len, response_len, cost, max_running, spec: Speculation | None, out: dict):
    """simpy process: run every iteration. Stores its EngineRollout in out["rollout"]."""
    prompt_len = np.asarray(prompt_len, dtype=np.int64)
    response_len = np.asarray(response_len, dtype=np.int64)
    n = len(prompt_len)
    t0 = env.now
    admitted_at = np.full(n, np.nan)
    finished_at = np.full(n, np.nan)
    generated = np.zeros(n)  # tokens so far (fractional never: exact rows gain whole tokens)
    tau, tau_a = 0.0, np.full(n, np.nan)  # token clock: mean tokens gained per running row
    clock = [(0.0, 0.0)]  # (t, tau) after every admission, re-prefill and iteration
    running: list[int] = []
    nxt, used = 0, 0
    cap = cost.kv_capacity_tokens
    footprint = check_footprints(prompt_len, response_len, cap)
    records: list[dict] = []
    state_log: list[Entry] = []
    strategies: Counter = Counter()
    sd_iters = sd_acc = 0.0
    switch_at = None
    control = spec.control if spec is not None else None
    drafted = control is not None and control.on  # the drafter holds every running request (from the start, or
    # after the re-prefill)
    mode = "prefill"
    behind = 0  # tokens per row emitted by plain iterations since the drafter last ran
    while nxt < n or running:
        # admit FIFO while a slot and the KV cache allow (an aborted request, of no tokens, needs a free slot and
        # gives it back at once: the fast path's admission on the token clock does the same)
        new, live = [], 0
        while nxt < n and admits(len(running) + live, used, int(footprint[nxt]), max_running, cap):
            new.append(nxt)
            if response_len[nxt] > 0:
                live += 1
                used += int(footprint[nxt])
            nxt += 1
        if new:
            dt = prefill_seconds(cost, prompt_len[new])
            admitted_at[new] = env.now - t0
            tau_a[new] = tau
            running.extend(new)
            yield env.timeout(dt)
            clock.append((env.now - t0, tau))
            # the first admission is a prefill interval; later ones fold into the current mode
            state_log.append(Entry(mode, env.now - t0 - dt, env.now - t0, len(running)))
            for r in new:
                if response_len[r] == 0:  # admitted, then aborted: no tokens
                    finished_at[r] = env.now - t0
            running = [r for r in running if response_len[r] > 0]
            if not running:
                continue
        b = len(running)
        rows = np.array(running)
        ctx = float(np.sum(prompt_len[rows] + generated[rows]))
        s = control.decide(b) if control is not None else None
        if s is not None and not drafted:  # the switch: the drafter's state for every running request
            drafted = True  # (cost.switch_time)
            switch_at = env.now - t0
            dt = float(cost.switch_time(b, ctx, float(np.sum((prompt_len[rows] + generated[rows]) ** 2))))
            yield env.timeout(dt)
            clock.append((env.now - t0, tau))
            state_log.append(Entry("prefill", env.now - t0 - dt, env.now - t0, b))
        if s is not None:
            q = spec.quality if spec.row_quality is None else spec.row_quality[rows]
            acc_rows = np.asarray(spec.acceptance.sample(s, q, spec.rng, b), dtype=float)
            remaining = response_len[rows] - generated[rows]
            gain = np.minimum(acc_rows, remaining)
            catchup = spec.catchup_time(cost, b, behind, ctx)
            dt = spec.iteration_time(cost, b, s, ctx) + catchup
            control.observe_spec(s, b, float(acc_rows.sum()), dt, catchup)
            behind = 0
            strategies[str(s)] += 1
            sd_iters += 1
            sd_acc += float(acc_rows.mean())
            mode, strat, acc, w = "spec_decode", str(s), float(acc_rows.mean()), 1.0
        else:
            gain = np.ones(b)
            dt = float(cost.decode_time(b, ctx))
            if control is not None:
                control.observe_plain(b, dt)
            behind += 1 if drafted else 0
            mode, strat, acc, w = "decode", "", np.nan, 0.0
        generated[rows] += gain
        tau += float(gain.mean())
        yield env.timeout(dt)
        now = env.now - t0
        clock.append((now, tau))
        records.append({"batch_size": b, "mode": mode, "strategy": strat, "accepted": acc, "wall_s": dt, "t_end": now,
                        "tokens": float(gain.sum())})
        state_log.append(Entry(mode, now - dt, now, b, float(gain.sum()), acc, strat, w))
        done = [r for r in running if generated[r] >= response_len[r]]
        for r in done:
            finished_at[r] = now
            used -= int(footprint[r])
        running = [r for r in running if generated[r] < response_len[r]]
    clock_t, clock_tau = np.array(clock).T
    out["rollout"] = EngineRollout(
        env.now - t0, admitted_at, finished_at, merge_entries(state_log), sd_iters, sd_acc, strategies, switch_at, records,
        clock_t, clock_tau, tau_a,
    )


def merge_entries(log: list[Entry]) -> list[Interval]:
    """The log's entries as intervals, merged as timeline rows are (tltsim.core.records.merge_states)."""
    rows = merge_states([TimelineRow(0, 0, e.state, e.t_start, e.t_end, e.batch_size, e.tokens, e.accepted, e.strategy)
                         for e in log], [e.weight for e in log])
    return [Interval(r.state, r.t_start, r.t_end, r.batch_size, r.tokens, r.accepted, r.strategy) for r in rows]
