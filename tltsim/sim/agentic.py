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

import heapq
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from tltsim.core.errors import TltsimError
from tltsim.sim.engine import EngineRollout, Entry, Interval, _merge
from tltsim.sim.speculation import Speculation, Tally, speculate, within
from tltsim.trace.schema import flat_turns

_EPS = 1e-9


@dataclass
class Turns:
    """An engine's share of a step's trajectories, turn by turn (flat arrays, the rows' turns in order)."""

    prompt_len: np.ndarray  # per row
    first: np.ndarray  # per row: index of its first turn in the flat arrays; its turns are first[i]..first[i+1]-1
    gen: np.ndarray  # per turn: tokens generated
    tool_latency_s: np.ndarray  # per turn: the tool call after it (NaN: none)
    tool_tokens: np.ndarray  # per turn: tokens the tool's answer appends
    pending_s: np.ndarray | None = None  # per row: seconds its tool call in flight still takes when the rollout
    # starts (a trajectory partial rollout carried on while it waited on a tool); None: none waits

    @classmethod
    def of(cls, prompt_len, turn_response_len, tool_latency_s, tool_tokens, pending_s=None) -> "Turns":
        """From per-row sequences (the trace's list columns)."""
        counts = np.fromiter((len(t) for t in turn_response_len), np.int64, len(turn_response_len))
        return cls(np.asarray(prompt_len, np.int64), np.concatenate([[0], np.cumsum(counts)]),
                   flat_turns(turn_response_len, float), flat_turns(tool_latency_s, float),
                   flat_turns(tool_tokens, float),
                   None if pending_s is None else np.asarray(pending_s, float))

    @property
    def rows(self) -> int:
        return len(self.prompt_len)


def agentic_rollout(turns: Turns, cost, max_running: int, spec: Speculation | None = None,
                    priority: np.ndarray | None = None, reference: bool = False) -> EngineRollout:
    """Generate one engine's trajectories (in admission order) to their ends; see the module docstring.

    The EngineRollout's `turns` holds, per turn (flat, as `turns`'s arrays), admitted_at, finished_at,
    prompt_tokens and cached_tokens; `tool_wait_s` the seconds the engine had only trajectories waiting on tools.

    Played by `_fast` (plain floats, the running rows on the token clock, heaps for what comes next); `reference`:
    by `_Run`, the same events over arrays of every row, which the fast one is tested against (the same numbers;
    within rounding where speculation's fractional tokens are summed in another order)."""
    if reference:
        return _Run(turns, cost, max_running, spec, priority).run()
    return _fast(turns, cost, max_running, spec, priority)


class _Run:
    """The state of one agentic rollout (see the module docstring); `run` plays it to the end."""

    def __init__(self, turns: Turns, cost, max_running: int, spec: Speculation | None, priority=None):
        n, nt = turns.rows, len(turns.gen)
        self.turns, self.cost, self.max_running, self.spec = turns, cost, max_running, spec
        self.cap = float(cost.kv_capacity_tokens)
        self.turn = turns.first[:-1].copy()  # each row's current turn (flat index)
        self.left = np.zeros(n)  # tokens left in the row's current turn
        self.ctx = turns.prompt_len.astype(float)  # tokens of the row's context (its sequence so far)
        self.held = np.zeros(n)  # KV tokens the engine holds for the row (running, or cached while it waits)
        self.running = np.zeros(n, bool)
        self.reserved = np.zeros(n)  # running rows: KV reserved for their turn (context + the turn's tokens)
        self.waiting_since = np.full(n, np.inf)  # rows with cached KV out of the batch: since when (eviction order)
        self.t_admit, self.t_fin = np.full(nt, np.nan), np.full(nt, np.nan)
        self.prompt_tokens, self.cached_tokens = np.zeros(nt), np.zeros(nt)
        self.admitted_at, self.finished_at = np.full(n, np.nan), np.full(n, np.nan)
        self.key = np.zeros(n) if priority is None else -np.asarray(priority, float)
        pending = np.zeros(n) if turns.pending_s is None else turns.pending_s
        # heap of (return time, row, whether the answer ends a turn): tool calls in flight; a row that starts in
        # one (pending) has its answer in its context already and queues for the turn it is at
        self.tools: list[tuple[float, int, bool]] = [(float(pending[r]), r, False) for r in range(n) if pending[r] > 0]
        heapq.heapify(self.tools)
        self.queue = [(float(self.key[r]), r, r) for r in range(n) if not pending[r] > 0]  # heap of (key, arrival,
        heapq.heapify(self.queue)  # row): rows ready for a turn, the highest priority first, then in arrival order
        self.arrivals = n
        self.control = spec.control if spec is not None else None
        self.drafted = self.control is not None and self.control.on
        self.behind = 0.0  # tokens per row the drafter has not read (plain iterations' and prefills' since it ran)
        self.log: list[Entry] = []
        self.tally = Tally()
        self.tool_wait = 0.0
        self.switch_at = None
        self.t = 0.0
        self.done = 0
        # the token clock (tltsim.sim.engine.EngineRollout): every running row gains the same tokens per iteration,
        # so a turn admitted at tau_a has min(tau(t) - tau_a, its tokens) at t (tltsim.sim.rollout.tokens_at)
        self.tau = 0.0
        self.clock = [(0.0, 0.0)]
        self.tau_a = np.full(nt, np.nan)

    def run(self) -> EngineRollout:
        n = self.turns.rows
        while self.done < n:
            if self._admit():
                continue
            if not self.running.any():
                if not self.tools:  # nothing runs, queued or waits: cannot happen while rows are not done
                    raise AssertionError("agentic rollout stalled")
                t_next = self.tools[0][0]
                if t_next > self.t:
                    self.log.append(Entry("tool_wait", self.t, t_next, 0))
                    self.tool_wait += t_next - self.t
                    self.t = t_next
                    self.clock.append((self.t, self.tau))
                self._returns()
                continue
            self._stretch()
            self._end_turns()
            self._returns()
        turns = {"admitted_at": self.t_admit, "finished_at": self.t_fin, "prompt_tokens": self.prompt_tokens,
                 "cached_tokens": self.cached_tokens, "tau_a": self.tau_a, "first": self.turns.first,
                 "gen": self.turns.gen}
        clock_t, clock_tau = np.array(self.clock).T
        return EngineRollout(self.t, self.admitted_at, self.finished_at, _merge(self.log), self.tally.iterations,
                             self.tally.accepted, self.tally.strategies, self.switch_at, clock_t=clock_t,
                             clock_tau=clock_tau, turns=turns, tool_wait_s=self.tool_wait)

    def _admit(self) -> bool:
        """Admit FIFO while a slot and the cache allow, evicting waiting rows' cached KV (oldest first) for room;
        prefill what the admitted rows' caches lack. Returns whether any row was admitted."""
        held, turns = self.held, self.turns
        chosen = np.zeros(turns.rows, bool)
        used = float(self.reserved[self.running].sum() + held[~self.running].sum())
        slots = self.max_running - int(self.running.sum())
        while self.queue and int(chosen.sum()) < slots:
            r = self.queue[0][2]
            size = self.ctx[r] + turns.gen[self.turn[r]]
            extra = size - held[r]
            if used + extra > self.cap:
                victims = np.flatnonzero((held > 0) & ~self.running & ~chosen)
                victims = victims[victims != r]
                for v in victims[np.argsort(self.waiting_since[victims], kind="stable")]:
                    if used + extra <= self.cap:
                        break
                    used -= held[v]
                    held[v] = 0.0
                    self.waiting_since[v] = np.inf
                if used + extra > self.cap:
                    if not self.running.any() and not chosen.any():
                        raise TltsimError(f"a trajectory's turn needs {int(size)} tokens of KV, more than the engine's "
                                          f"cache of {int(self.cap)}; raise --tp, use a GPU with more memory, or cap "
                                          f"the trace")
                    break
            chosen[r] = True
            used += extra
            heapq.heappop(self.queue)
        if not chosen.any():
            return False
        rows = np.flatnonzero(chosen)
        k = self.turn[rows]
        cached, ctx = held[rows], self.ctx[rows]
        fresh = ctx - cached  # tokens to prefill: the whole context, or what follows the cached prefix
        self.prompt_tokens[k], self.cached_tokens[k], self.t_admit[k], self.tau_a[k] = ctx, cached, self.t, self.tau
        dt = float(self.cost.prefill_time(fresh.sum(), float(np.sum(ctx ** 2 - cached ** 2))))
        self.admitted_at[rows] = np.where(np.isnan(self.admitted_at[rows]), self.t, self.admitted_at[rows])
        held[rows] = ctx
        self.reserved[rows] = ctx + turns.gen[k]
        self.waiting_since[rows] = np.inf
        self.running[rows] = True
        self.left[rows] = turns.gen[k]
        b = int(self.running.sum())
        self.log.append(Entry("prefill", self.t, self.t + dt, b))
        self.t += dt
        self.clock.append((self.t, self.tau))
        if self.drafted:  # the drafter has not read the prefilled tokens either
            self.behind += float(fresh.sum()) / b
        self._end_turns()  # turns of no tokens (aborted requests) end at once
        return True

    def _stretch(self) -> None:
        """Iterations at the running batch: to the first turn's end, a tool's return, or the next decision."""
        control, spec, cost = self.control, self.spec, self.cost
        rows = np.flatnonzero(self.running)
        b, c = len(rows), float(self.ctx[rows].sum())
        room = (self.tools[0][0] if self.tools else np.inf) - self.t
        to_end = float(self.left[rows].min())

        def plain(k):
            return cost.segment_time(b, 1, c, b, k)

        s = None
        if control is not None and not control.on:  # count plain iterations towards the switch
            k, dt = within(max(1, int(np.ceil(to_end - _EPS))), room, plain, whole=True)
            k_plain = control.advance(b, k)
            if k_plain or not control.on:
                self._plain(rows, b, c, k_plain, dt if k_plain == k else None)
                return
        if control is not None:
            s = control.decide(b)
        if s is None:
            k = max(1, int(np.ceil(to_end - _EPS)))
            if control is not None:
                k = max(1, int(min(k, control.plain_left(b))))
            self._plain(rows, b, c, *within(k, room, plain, whole=True))
            return
        if not self.drafted:  # the switch: the drafter's state for every running row
            dt = float(cost.switch_time(b, c, float(np.sum(self.ctx[rows] ** 2))))
            self.log.append(Entry("prefill", self.t, self.t + dt, b))
            self.switch_at, self.drafted, self.behind = self.t, True, 0.0
            self.t += dt
            self.clock.append((self.t, self.tau))
            room -= dt
        chunk = speculate(spec, cost, s, b, c, to_end, self.behind, room)
        self.behind = 0.0
        gain = chunk.accepted * chunk.iterations  # tokens every running row gained
        self.log.append(Entry("spec_decode", self.t, self.t + chunk.seconds, b, b * gain, chunk.accepted, str(s),
                              chunk.iterations))
        self.tally.add(chunk)
        self.left[rows] -= gain
        self.ctx[rows] += gain
        self.t += chunk.seconds
        self.tau += gain
        self.clock.append((self.t, self.tau))

    def _plain(self, rows, b: int, c: float, k: int, dt: float | None = None) -> None:
        """`k` plain iterations at batch `b` from now, `dt` seconds in all where the caller timed them."""
        dt = float(self.cost.segment_time(b, 1, c, b, k)) if dt is None else dt
        if self.control is not None:
            self.control.observe_plain(b, dt / k, int(k))
        self.log.append(Entry("decode", self.t, self.t + dt, b, float(b * k)))
        self.left[rows] -= k
        self.ctx[rows] += k
        self.t += dt
        self.tau += k
        self.clock.append((self.t, self.tau))
        if self.drafted:
            self.behind += k

    def _end_turns(self) -> None:
        """Rows whose turn has ended leave the batch: to their tool call (KV cached), or done."""
        for r in np.flatnonzero(self.running & (self.left <= _EPS)):
            k = self.turn[r]
            self.t_fin[k] = self.t
            self.ctx[r] += self.left[r]  # a speculative stretch's gain may overshoot: the turn ends at its length
            self.left[r] = 0.0
            self.running[r] = False
            self.reserved[r] = 0.0
            self.held[r] = self.ctx[r]
            lat = self.turns.tool_latency_s[k]
            if np.isnan(lat):
                self._finish(r)
            else:
                self.waiting_since[r] = self.t
                heapq.heappush(self.tools, (self.t + float(lat), int(r), True))

    def _returns(self) -> None:
        """Tools that answered by now: the answer joins the row's context and the row queues for its next turn;
        the call after a row's last turn ends the trajectory when its answer is in."""
        while self.tools and self.tools[0][0] <= self.t + _EPS:
            _, r, ends_turn = heapq.heappop(self.tools)
            if not ends_turn:
                heapq.heappush(self.queue, (float(self.key[r]), self.arrivals, int(r)))
                self.arrivals += 1
                continue
            k = self.turn[r]
            self.ctx[r] += self.turns.tool_tokens[k]
            if k + 1 == self.turns.first[r + 1]:
                self._finish(r)
                continue
            self.turn[r] = k + 1
            heapq.heappush(self.queue, (float(self.key[r]), self.arrivals, int(r)))
            self.arrivals += 1

    def _finish(self, r: int) -> None:
        self.held[r] = 0.0
        self.waiting_since[r] = np.inf
        self.finished_at[r] = self.t
        self.done += 1


class _Timeline:
    """The log's entries merged as they come, as `_merge` merges a whole log (tltsim.core.records.merge_states):
    consecutive entries of one state make one interval."""

    __slots__ = ("rows", "counts", "last")

    def __init__(self):
        self.rows: list[list] = []  # [state, t_start, t_end, batch_size, tokens, accepted, strategy]
        self.counts: dict[int, Counter] = {}  # row -> speculative iterations by strategy, where it has any
        self.last = [None]

    def add(self, state: str, t0: float, t1: float, b, tokens: float = 0.0, accepted: float = math.nan,
            strategy: str = "", weight: float = 0.0) -> None:
        last = self.last
        if state == last[0]:
            last[2] = t1
            last[4] = last[4] + tokens
        else:
            last = self.last = [state, t0, t1, b, tokens, math.nan, ""]
            self.rows.append(last)
        if weight > 0:
            c = self.counts.setdefault(len(self.rows) - 1, Counter())
            total = sum(c.values())
            c[strategy] += weight
            last[5] = accepted if total == 0 else (last[5] * total + accepted * weight) / (total + weight)
            last[6] = c.most_common(1)[0][0]

    def intervals(self) -> list[Interval]:
        return [Interval(*row) for row in self.rows]


def _fast(turns: Turns, cost, max_running: int, spec: Speculation | None, priority=None) -> EngineRollout:
    """`_Run`'s rollout event by event in plain floats: a running row's context and tokens left follow from the
    token clock at its admission (every running row gains the same tokens per iteration), the running rows' turn
    ends are a heap on the token clock, the rows whose cached KV may be evicted a heap by when they began to wait,
    and the KV in use and the running context are kept as they change, so no event scans every row."""
    n, nt = turns.rows, len(turns.gen)
    gen, tool_tokens = turns.gen.tolist(), turns.tool_tokens.tolist()
    latency = [None if x != x else x for x in turns.tool_latency_s.tolist()]  # None: no call after the turn
    first = turns.first.tolist()
    cap = float(cost.kv_capacity_tokens)
    scalar = cost.scalar_times() if hasattr(cost, "scalar_times") else None
    if scalar is not None:
        stretch_time, prefill_time = scalar
    else:
        def stretch_time(b, c, k):
            return float(cost.segment_time(b, 1, c, b, k))

        def prefill_time(tokens, sq):
            return float(cost.prefill_time(tokens, sq))

    turn = first[:-1]  # each row's current turn (flat index)
    ctx = turns.prompt_len.astype(float).tolist()  # a row's context; a running row's at its admission
    held = [0.0] * n  # KV tokens the engine holds for a row out of the batch (cached while it waits)
    reserved = [0.0] * n  # a running row's KV: its context at admission and its turn's tokens
    tau_in = [0.0] * n  # a running row's token clock at its admission
    running = [False] * n
    version = [0] * n  # bumped whenever a row's entry in `cached` goes stale
    cached: list = []  # heap of (waiting since, row, version): rows out of the batch whose KV the cache holds
    ends: list = []  # heap of (token clock at the turn's end, row): the running rows
    t_admit, t_fin, tau_a = [math.nan] * nt, [math.nan] * nt, [math.nan] * nt
    prompt_tokens, cached_tokens = [0.0] * nt, [0.0] * nt
    admitted_at, finished_at = [math.nan] * n, [math.nan] * n
    key = [0.0] * n if priority is None else (-np.asarray(priority, float)).tolist()
    pending = [0.0] * n if turns.pending_s is None else turns.pending_s.tolist()
    tools = [(float(pending[r]), r, False) for r in range(n) if pending[r] > 0]  # as _Run's
    heapq.heapify(tools)
    queue = [(key[r], r, r) for r in range(n) if not pending[r] > 0]
    heapq.heapify(queue)
    arrivals = n
    control = spec.control if spec is not None else None
    drafted = control is not None and control.on
    behind = 0.0
    log = _Timeline()
    tally = Tally()
    tool_wait = 0.0
    switch_at = None
    t = tau = 0.0
    clock_t, clock_tau = [0.0], [0.0]
    done = nrun = 0
    used = 0.0  # KV in use: running rows' reservations and the cached KV of rows out of the batch
    c_run = 0.0  # the running rows' context tokens
    heappush, heappop = heapq.heappush, heapq.heappop
    inf = math.inf

    def finish(r):
        nonlocal done, used
        used -= held[r]
        held[r] = 0.0
        version[r] += 1
        finished_at[r] = t
        done += 1

    def end_turns():
        """Rows whose turn has ended leave the batch: to their tool call (KV cached), or done."""
        nonlocal nrun, c_run
        while ends and ends[0][0] - tau <= _EPS:
            _, r = heappop(ends)
            k = turn[r]
            t_fin[k] = t
            c_run -= ctx[r] + (tau - tau_in[r])
            ctx[r] = held[r] = reserved[r]  # at its turn's length (a speculative stretch may overshoot it)
            running[r] = False
            nrun -= 1
            lat = latency[k]
            if lat is None:
                finish(r)
            else:
                version[r] += 1
                if held[r] > 0:
                    heappush(cached, (t, r, version[r]))
                heappush(tools, (t + lat, r, True))
        if not nrun:
            c_run = 0.0

    def returns():
        """Tools that answered by now: the answer joins the row's context and the row queues for its next turn."""
        nonlocal arrivals
        while tools and tools[0][0] <= t + _EPS:
            _, r, ends_turn = heappop(tools)
            if ends_turn:
                k = turn[r]
                ctx[r] += tool_tokens[k]
                if k + 1 == first[r + 1]:
                    finish(r)
                    continue
                turn[r] = k + 1
            heappush(queue, (key[r], arrivals, r))
            arrivals += 1

    def plain(b, k, dt):
        """`k` plain iterations at batch `b`, `dt` seconds in all."""
        nonlocal t, tau, c_run, behind
        if control is not None:
            control.observe_plain(b, dt / k, int(k))
        log.add("decode", t, t + dt, b, float(b * k))
        c_run += b * k
        t += dt
        tau += k
        clock_t.append(t)
        clock_tau.append(tau)
        if drafted:
            behind += k

    def within_plain(b, c, k, room):
        """tltsim.sim.speculation.within of `k` plain iterations, whole ones."""
        full = stretch_time(b, c, k)
        if full <= room:
            return k, full
        k = max(1, math.ceil(k * max(room, 0.0) / full)) if full > 0 else k
        return k, stretch_time(b, c, k)

    def speculative(b, c, s, to_end, room):
        nonlocal t, tau, c_run, behind, drafted, switch_at
        if not drafted:  # the switch: the drafter's state for every running row
            rows = sorted(r for _, r in ends)
            sq = float(np.sum(np.array([ctx[r] + (tau - tau_in[r]) for r in rows]) ** 2))
            dt = float(cost.switch_time(b, c, sq))
            log.add("prefill", t, t + dt, b)
            switch_at, drafted, behind = t, True, 0.0
            t += dt
            clock_t.append(t)
            clock_tau.append(tau)
            room -= dt
        chunk = speculate(spec, cost, s, b, c, to_end, behind, room)
        behind = 0.0
        gain = chunk.accepted * chunk.iterations
        log.add("spec_decode", t, t + chunk.seconds, b, b * gain, chunk.accepted, str(s), chunk.iterations)
        tally.add(chunk)
        c_run += b * gain
        t += chunk.seconds
        tau += gain
        clock_t.append(t)
        clock_tau.append(tau)

    while done < n:
        # admission: FIFO (or by priority) while a slot and the cache allow, evicting cached KV oldest first
        if queue and nrun < max_running:
            chosen: list[int] = []
            slots = max_running - nrun
            while queue and len(chosen) < slots:
                r = queue[0][2]
                k = turn[r]
                size = ctx[r] + gen[k]
                extra = size - held[r]
                if used + extra > cap:
                    aside = None
                    while cached and used + extra > cap:
                        entry = heappop(cached)
                        v = entry[1]
                        if entry[2] != version[v]:
                            continue
                        if v == r:
                            aside = entry
                            continue
                        if v in chosen:  # admitted now: its entry goes stale
                            continue
                        used -= held[v]
                        held[v] = 0.0
                        version[v] += 1
                    if aside is not None:
                        heappush(cached, aside)
                    if used + extra > cap:
                        if not nrun and not chosen:
                            raise TltsimError(f"a trajectory's turn needs {int(size)} tokens of KV, more than the "
                                              f"engine's cache of {int(cap)}; raise --tp, use a GPU with more "
                                              f"memory, or cap the trace")
                        break
                chosen.append(r)
                used += extra
                heappop(queue)
            if chosen:
                chosen.sort()
                fresh = sq = 0.0
                for r in chosen:
                    k = turn[r]
                    c, h = ctx[r], held[r]
                    fresh += c - h
                    sq += c * c - h * h
                    prompt_tokens[k], cached_tokens[k], t_admit[k], tau_a[k] = c, h, t, tau
                    if admitted_at[r] != admitted_at[r]:
                        admitted_at[r] = t
                    held[r] = c
                    reserved[r] = c + gen[k]
                    version[r] += 1
                    running[r] = True
                    tau_in[r] = tau
                    heappush(ends, (tau + gen[k], r))
                    c_run += c
                nrun += len(chosen)
                dt = prefill_time(fresh, sq)
                log.add("prefill", t, t + dt, nrun)
                t += dt
                clock_t.append(t)
                clock_tau.append(tau)
                if drafted:  # the drafter has not read the prefilled tokens either
                    behind += fresh / nrun
                end_turns()  # turns of no tokens (aborted requests) end at once
                continue
        if not nrun:
            if not tools:  # nothing runs, queued or waits: cannot happen while rows are not done
                raise AssertionError("agentic rollout stalled")
            t_next = tools[0][0]
            if t_next > t:
                log.add("tool_wait", t, t_next, 0)
                tool_wait += t_next - t
                t = t_next
                clock_t.append(t)
                clock_tau.append(tau)
            returns()
            continue
        # a stretch at the running batch: to the first turn's end, a tool's return, or the next decision
        b, c = nrun, c_run
        room = (tools[0][0] if tools else inf) - t
        to_end = ends[0][0] - tau
        if control is None:  # plain decoding (as `plain` and `within_plain`, inline: most events are these)
            k = max(1, math.ceil(to_end - _EPS))
            dt = stretch_time(b, c, k)
            if dt > room:
                k = max(1, math.ceil(k * max(room, 0.0) / dt)) if dt > 0 else k
                dt = stretch_time(b, c, k)
            t1 = t + dt
            last = log.last
            if last[0] == "decode":  # log.add's merge
                last[2] = t1
                last[4] = last[4] + float(b * k)
            else:
                log.add("decode", t, t1, b, float(b * k))
            c_run += b * k
            t = t1
            tau += k
            clock_t.append(t)
            clock_tau.append(tau)
        else:
            s = None
            if not control.on:  # count plain iterations towards the switch
                k, dt = within_plain(b, c, max(1, math.ceil(to_end - _EPS)), room)
                k_plain = control.advance(b, k)
                if k_plain or not control.on:
                    plain(b, k_plain, dt if k_plain == k else stretch_time(b, c, k_plain))
                    end_turns()
                    returns()
                    continue
            s = control.decide(b)
            if s is None:
                k = max(1, int(min(max(1, math.ceil(to_end - _EPS)), control.plain_left(b))))
                plain(b, *within_plain(b, c, k, room))
            else:
                speculative(b, c, s, to_end, room)
        if ends and ends[0][0] - tau <= _EPS:
            end_turns()
        if tools and tools[0][0] <= t + _EPS:
            returns()
    record = {"admitted_at": np.array(t_admit), "finished_at": np.array(t_fin),
              "prompt_tokens": np.array(prompt_tokens), "cached_tokens": np.array(cached_tokens),
              "tau_a": np.array(tau_a), "first": turns.first, "gen": turns.gen}
    return EngineRollout(t, np.array(admitted_at), np.array(finished_at), log.intervals(), tally.iterations,
                         tally.accepted, tally.strategies, switch_at, clock_t=np.array(clock_t),
                         clock_tau=np.array(clock_tau), turns=record, tool_wait_s=tool_wait)


def rest_of_trajectories(df: dict, mask: np.ndarray, turn_records: list) -> dict:
    """What is left of the trajectories `mask` picks among a step's rows (`df`, its turn list columns) when their
    rollout stopped (a StepRollout's `turn_records`, cut): per row the turn lists from the turn it was in (less the
    tokens it generated of it); `tool_done`, the tokens of the tool answers it had called for by then (they join
    its context: a tool does not depend on the policy's weights); and `tool_pending_s`, the seconds its call in
    flight still had to run (the next rollout waits for them). A trajectory whose turns were all generated is
    left one turn of no tokens."""
    seen = {}  # row -> (per-turn tokens at the stop, admitted_at, finished_at, the stop)
    for rows, rec, _ in turn_records:
        per_turn = rec.get("got", rec["gen"]).astype(np.int64)
        for i, r in enumerate(rows):
            a, b = rec["first"][i], rec["first"][i + 1]
            seen[int(r)] = (per_turn[a:b], rec["admitted_at"][a:b], rec["finished_at"][a:b], rec.get("stop", np.inf))
    out = {c: [] for c in ("turn_response_len", "tool_latency_s", "tool_tokens")}
    done, pending = [], []
    for r in np.flatnonzero(mask):
        gen, lat, tok = (list(df[c][r]) for c in ("turn_response_len", "tool_latency_s", "tool_tokens"))
        none = np.full(len(gen), np.nan)
        g, admitted, finished, stop = seen.get(int(r), (np.zeros(len(gen), np.int64), none, none, np.inf))
        j = int(np.sum(np.cumprod(g >= np.asarray(gen))))  # turns generated whole, from the first
        if j == len(gen):
            rest = ([0], [None], [0])
        else:
            rest = ([gen[j] - int(g[j])] + gen[j + 1:], lat[j:], tok[j:])
        waits = 0 < j < len(gen) and np.isnan(admitted[j])  # its turn j waits on the call after turn j - 1
        pending.append(max(0.0, finished[j - 1] + lat[j - 1] - stop) if waits else 0.0)
        for c, v in zip(out, rest):
            out[c].append(v)
        done.append(int(sum(tok[:j])))
    as_column = lambda lists: np.array(lists + [None], dtype=object)[:-1]  # noqa: E731 (an object array of lists)
    return {**{c: as_column(v) for c, v in out.items()}, "tool_done": np.array(done, np.int64),
            "tool_pending_s": np.array(pending, float)}
