"""One rollout engine (a TP group) generating its share of one RL step.

Two executors of the same model of an engine:

- `fast_rollout`: events at batch changes. Admission is scheduled on the token
  clock (schedule.py); the wall time of each segment of constant batch is a
  closed-form sum (cost.segment_time). Speculative segments advance the token
  clock by the mean accepted length per iteration, with the strategy chosen by
  the tuner once per chunk of at most `chunk_iters` iterations.
- `exact_rollout`: a simpy process that runs every iteration, samples accepted
  lengths per row, asks the switch and the tuner every iteration, and records
  every iteration. The reference the fast path is tested against.

Both return an `EngineRollout` with times relative to the rollout's start.
Prefill of requests admitted mid-rollout is folded into the decode interval
(chunked prefill mixes it into decode iterations); the first admission and the
re-prefill at the SD switch are `prefill` intervals of their own.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from tltsim.sim.schedule import admit_fifo, check_footprints, segments


@dataclass
class Speculation:
    """What an engine needs to speculate in one rollout. `switch`, `tuner`, `acceptance` are policy objects."""

    switch: object  # tltsim.policy.SDSwitch (reset by the caller)
    tuner: object  # choose(batch) -> Strategy; update(strategy, batch, reward, n)
    acceptance: object  # mean(strategy, q), sample(strategy, q, rng, size)
    quality: float  # drafter quality this step
    chunk_iters: int = 32  # fast path: iterations per tuner decision
    rng: np.random.Generator | None = None  # exact path: acceptance sampling
    model_free: bool = False  # n-gram drafter: no drafter forwards to pay for

    def draft_time(self, cost, batch: int, strategy) -> float:
        """Drafting cost of one speculative iteration: `depth` drafter forwards (none when model-free)."""
        return 0.0 if self.model_free else strategy.depth * float(cost.draft_time(batch, strategy.topk))


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


def fast_rollout(prompt_len, response_len, cost, max_running, spec: Speculation | None = None) -> EngineRollout:
    """Generate one engine's share (arrays in admission order) in closed form between batch changes."""
    prompt_len = np.asarray(prompt_len, dtype=np.int64)
    response_len = np.asarray(response_len, dtype=np.int64)
    tau_a = admit_fifo(prompt_len, response_len, max_running, cost.kv_capacity_tokens)
    seg = segments(tau_a, prompt_len, response_len)
    pre = cost.prefill_time(seg.admitted_tokens, seg.admitted_sq)
    sd_on_from_start = spec is not None and spec.switch.on
    split = None if spec is None or sd_on_from_start else _find_switch(seg, spec.switch)
    if spec is None or (split is None and not sd_on_from_start):
        dec = cost.segment_time(seg.batch, 1, seg.ctx, seg.batch, seg.length)
        seg_times = pre + dec
        t_event = np.concatenate([[0.0], np.cumsum(seg_times)])
        end = t_event[-1]
        intervals = [Interval("prefill", 0.0, pre[0], seg.batch[0], 0.0)]
        intervals.append(Interval("decode", pre[0], end, seg.batch[0], float(np.sum(seg.batch * seg.length))))
        out = EngineRollout(end, *_request_times(seg, t_event, tau_a, response_len), intervals)
        return out
    return _fast_speculative(seg, pre, tau_a, response_len, cost, spec, split)


def _find_switch(seg, switch) -> tuple[int, int] | None:
    """(segment, iterations into it) at which the switch turns on, or None."""
    for j in range(len(seg.start)):
        k = switch.advance(int(seg.batch[j]), int(seg.length[j]))
        if switch.on:
            return j, k
    return None


def _request_times(seg, t_at_start, tau_a, response_len):
    """Admission and finish wall times from the wall time at each segment boundary on the token clock."""
    bounds = np.concatenate([seg.start, [seg.start[-1] + seg.length[-1]]])
    ia = np.searchsorted(bounds, tau_a)
    iff = np.searchsorted(bounds, tau_a + response_len)
    return t_at_start[ia], t_at_start[iff]


def _fast_speculative(seg, pre, tau_a, response_len, cost, spec, split):
    """Plain decode up to the switch, a re-prefill of every running request, then speculative segments."""
    n = len(seg.start)
    # Split the switch segment at the switch point so that every segment is all-plain or all-SD.
    start, length, batch, ctx = seg.start.astype(float), seg.length.astype(float), seg.batch, seg.ctx.astype(float)
    adm, adm_sq = seg.admitted_tokens, seg.admitted_sq
    sd_from = 0
    if split is not None:
        j, k = split
        if 0 < k < length[j]:
            start = np.insert(start, j + 1, start[j] + k)
            length = np.insert(length, j + 1, length[j] - k)
            length[j] = k
            batch = np.insert(batch, j + 1, batch[j])
            ctx = np.insert(ctx, j + 1, ctx[j] + batch[j] * k)
            adm = np.insert(adm, j + 1, 0.0)
            adm_sq = np.insert(adm_sq, j + 1, 0.0)
            pre = np.insert(pre, j + 1, 0.0)
            sd_from = j + 1
        else:
            sd_from = j + 1 if k >= length[j] else j
        n = len(start)
    seg_times = np.array(pre, dtype=float)
    plain = slice(0, sd_from)
    seg_times[plain] += cost.segment_time(batch[plain], 1, ctx[plain], batch[plain], length[plain])
    intervals = [Interval("prefill", 0.0, float(pre[0]), batch[0], 0.0)]
    t = float(np.sum(seg_times[plain]))
    if sd_from > 0:
        intervals.append(Interval("decode", float(pre[0]), t, batch[0], float(np.sum(batch[plain] * length[plain]))))
    switch_at = None
    reprefill = 0.0
    if split is not None and sd_from < n:
        # re-prefill every running request (prompt + generated so far) for the drafter
        running_tokens = ctx[sd_from]
        reprefill = float(cost.prefill_time(running_tokens, running_tokens**2 / max(batch[sd_from], 1)))
        switch_at = t
        intervals.append(Interval("prefill", t, t + reprefill, batch[sd_from], 0.0))
    seg_times[sd_from] += reprefill
    t_sd0 = t + reprefill + (float(pre[0]) if sd_from == 0 else 0.0)
    sd_iters = sd_acc = 0.0
    strategies: Counter = Counter()
    for j in range(sd_from, n):
        b, c, remaining, tj = int(batch[j]), ctx[j], length[j], 0.0
        if b == 0:
            continue
        while remaining > 1e-9:
            s = spec.tuner.choose(b)
            acc = float(spec.acceptance.mean(s, spec.quality))
            iters = min(spec.chunk_iters, remaining / acc)
            # verify forward: the last accepted token plus `verify` drafted nodes per request
            dt = iters * spec.draft_time(cost, b, s) + float(
                cost.segment_time(b * (s.verify + 1), s.verify + 1, c, b * acc, iters)
            )
            spec.tuner.update(s, b, acc * b * iters / dt, max(1, int(round(iters))))
            strategies[str(s)] += iters
            sd_iters += iters
            sd_acc += iters * acc
            c += b * acc * iters
            remaining -= acc * iters
            tj += dt
        seg_times[j] += tj
    t_event = np.concatenate([[0.0], np.cumsum(seg_times)])
    end = float(t_event[-1])
    if sd_from < n:
        sd_tokens = float(np.sum(batch[sd_from:] * length[sd_from:]))
        top = strategies.most_common(1)[0][0] if strategies else ""
        intervals.append(Interval("spec_decode", t_sd0, end, batch[sd_from], sd_tokens, sd_acc / max(sd_iters, 1e-12), top))
    # request times: boundaries on the token clock of the (possibly split) segments
    bounds = np.concatenate([start, [start[-1] + length[-1]]])
    ia = np.searchsorted(bounds, tau_a)
    iff = np.searchsorted(bounds, tau_a + response_len)
    # a request admitted at the switch point starts after the re-prefill
    return EngineRollout(end, t_event[ia], t_event[iff], intervals, sd_iters, sd_acc, strategies, switch_at)


def exact_rollout(env, prompt_len, response_len, cost, max_running, spec: Speculation | None, out: dict):
    """simpy process: run every iteration. Stores its EngineRollout in out["rollout"]."""
    prompt_len = np.asarray(prompt_len, dtype=np.int64)
    response_len = np.asarray(response_len, dtype=np.int64)
    n = len(prompt_len)
    t0 = env.now
    admitted_at = np.full(n, np.nan)
    finished_at = np.full(n, np.nan)
    generated = np.zeros(n)  # tokens so far (fractional never: exact rows gain whole tokens)
    running: list[int] = []
    nxt, used = 0, 0
    cap = cost.kv_capacity_tokens
    footprint = check_footprints(prompt_len, response_len, cap)
    records: list[dict] = []
    state_log: list[tuple[str, float, float, float, float, float, str]] = []  # state, t0, t1, batch, tokens, acc, strat
    strategies: Counter = Counter()
    sd_iters = sd_acc = 0.0
    switch_at = None
    sd = spec is not None and spec.switch.on
    first = True
    while nxt < n or running:
        # admit FIFO while a slot and the KV cache allow
        new = []
        while nxt < n and len(running) + len(new) < max_running and used + footprint[nxt] <= cap:
            new.append(nxt)
            used += int(footprint[nxt])
            nxt += 1
        if new:
            p = prompt_len[new].astype(float)
            dt = float(cost.prefill_time(p.sum(), (p * p).sum()))
            admitted_at[new] = env.now - t0
            running.extend(new)
            yield env.timeout(dt)
            state_log.append(("prefill" if first else ("spec_decode" if sd else "decode"), env.now - t0 - dt, env.now - t0, len(running), 0.0, np.nan, ""))
        first = False
        b = len(running)
        rows = np.array(running)
        ctx = float(np.sum(prompt_len[rows] + generated[rows]))
        if not sd and spec is not None:
            k = spec.switch.advance(b, 1)
            if k == 0 and spec.switch.on:
                sd = True
                switch_at = env.now - t0
                dt = float(cost.prefill_time(ctx, float(np.sum((prompt_len[rows] + generated[rows]) ** 2))))
                yield env.timeout(dt)
                state_log.append(("prefill", env.now - t0 - dt, env.now - t0, b, 0.0, np.nan, ""))
        if sd:
            s = spec.tuner.choose(b)
            acc_rows = np.asarray(spec.acceptance.sample(s, spec.quality, spec.rng, b), dtype=float)
            remaining = response_len[rows] - generated[rows]
            gain = np.minimum(acc_rows, remaining)
            dt = spec.draft_time(cost, b, s) + float(cost.verify_time(b, s.verify + 1, ctx))
            spec.tuner.update(s, b, float(acc_rows.sum()) / dt, 1)
            strategies[str(s)] += 1
            sd_iters += 1
            sd_acc += float(acc_rows.mean())
            mode, strat, acc = "spec_decode", str(s), float(acc_rows.mean())
        else:
            gain = np.ones(b)
            dt = float(cost.decode_time(b, ctx))
            mode, strat, acc = "decode", "", np.nan
        generated[rows] += gain
        yield env.timeout(dt)
        now = env.now - t0
        records.append({"batch_size": b, "mode": mode, "strategy": strat, "accepted": acc, "wall_s": dt, "t_end": now})
        state_log.append((mode, now - dt, now, b, float(gain.sum()), acc, strat))
        done = [r for r in running if generated[r] >= response_len[r]]
        for r in done:
            finished_at[r] = now
            used -= int(footprint[r])
        running = [r for r in running if generated[r] < response_len[r]]
    out["rollout"] = EngineRollout(
        env.now - t0, admitted_at, finished_at, _merge(state_log), sd_iters, sd_acc, strategies, switch_at, records
    )


def _merge(log) -> list[Interval]:
    """Merge consecutive iterations of one state into intervals (batch = at interval start)."""
    out: list[Interval] = []
    acc_w = 0.0
    for state, a, b, batch, tokens, acc, strat in log:
        if out and out[-1].state == state:
            last = out[-1]
            last.t_end = b
            last.tokens += tokens
            if not np.isnan(acc):
                acc_w += 1
                last.accepted = acc if np.isnan(last.accepted) else last.accepted + (acc - last.accepted) / acc_w
                last.strategy = last.strategy or strat
            continue
        acc_w = 0.0 if np.isnan(acc) else 1.0
        out.append(Interval(state, a, b, batch, tokens, acc, strat))
    return out
