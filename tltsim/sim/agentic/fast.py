"""The agentic rollout's fast executor: the reference's events (reference.py) in plain floats, with what comes
next kept in heaps, so that no event scans every row; the same numbers (within rounding where speculation's
fractional tokens are summed in another order)."""
from __future__ import annotations

import heapq
import math

import numpy as np

from tltsim.core.errors import TltsimError
from tltsim.core.padding import prefill_load
from tltsim.sim.agentic.turns import EPS, Turns
from tltsim.sim.engine import EngineRollout, Interval
from tltsim.sim.speculation import Speculation, Tally, speculate


class Timeline:
    """The log's entries merged as they come, as `merge_entries` merges a whole log (tltsim.core.records.merge_states):
    consecutive entries of one state make one interval."""

    __slots__ = ("rows", "counts", "last")

    def __init__(self):
        self.rows: list[list] = []  # [state, t_start, t_end, batch_size, tokens, accepted, strategy]
        self.counts: dict[int, dict] = {}  # row -> speculative iterations by strategy, where it has any
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
            i = len(self.rows) - 1
            c = self.counts.get(i)
            if c is None:
                c = self.counts[i] = {}
            total = sum(c.values())
            c[strategy] = c.get(strategy, 0) + weight
            last[5] = accepted if total == 0 else (last[5] * total + accepted * weight) / (total + weight)
            last[6] = max(c, key=c.__getitem__)  # Counter.most_common's first: the first of the largest

    def intervals(self) -> list[Interval]:
        return [Interval(*row) for row in self.rows]


def play(turns: Turns, cost, max_running: int, spec: Speculation | None, priority=None) -> EngineRollout:
    """`reference.Run`'s rollout event by event in plain floats: a running row's context and tokens left follow from the
    token clock at its admission (every running row gains the same tokens per iteration), the running rows' turn
    ends are a heap on the token clock, the rows whose cached KV may be evicted a heap by when they began to wait,
    and the KV in use and the running context are kept as they change, so no event scans every row. One loop,
    its events inline and its state in locals: a step's events are thousands, each a few operations."""
    n, nt = turns.rows, len(turns.gen)
    gen, tool_tokens = turns.gen.tolist(), turns.tool_tokens.tolist()
    kept = None if turns.kept is None else turns.kept.tolist()
    latency = [None if x != x else x for x in turns.tool_latency_s.tolist()]  # None: no call after the turn
    first = turns.first.tolist()
    last_turn = [k - 1 for k in first[1:]]
    cap = float(cost.kv_capacity_tokens)
    padded = cost.padded_prefill
    scalar = cost.scalar_times() if hasattr(cost, "scalar_times") else None
    if scalar is not None:
        stretch_time, prefill_time = scalar
    else:
        def stretch_time(b, c, k):
            return float(cost.segment_time(b, 1, c, b, k))

        def prefill_time(tokens, sq):
            return float(cost.prefill_time(tokens, sq))

    def within_plain(b, c, k, room):
        """tltsim.sim.speculation.within of `k` plain iterations, whole ones."""
        full = stretch_time(b, c, k)
        if full <= room:
            return k, full
        k = max(1, math.ceil(k * max(room, 0.0) / full)) if full > 0 else k
        return k, stretch_time(b, c, k)

    turn = first[:-1]  # each row's current turn (flat index)
    ctx = turns.prompt_len.astype(float).tolist()  # a row's context; a running row's at its admission
    held = [0.0] * n  # KV tokens the engine holds for a row out of the batch (cached while it waits)
    reserved = [0.0] * n  # a running row's KV: its context at admission and its turn's tokens
    tau_in = [0.0] * n  # a running row's token clock at its admission
    version = [0] * n  # bumped whenever a row's entry in `cached` goes stale
    cached: list = []  # heap of (waiting since, row, version): rows out of the batch whose KV the cache holds
    ends: list = []  # heap of (token clock at the turn's end, row): the running rows
    t_admit, t_fin, tau_a = [math.nan] * nt, [math.nan] * nt, [math.nan] * nt
    prompt_tokens, cached_tokens = [0.0] * nt, [0.0] * nt
    admitted_at, finished_at = [math.nan] * n, [math.nan] * n
    key = [0.0] * n if priority is None else (-np.asarray(priority, float)).tolist()
    pending = [0.0] * n if turns.pending_s is None else turns.pending_s.tolist()
    tools = [(float(pending[r]), r, False) for r in range(n) if pending[r] > 0]  # as Run's
    heapq.heapify(tools)
    queue = [(key[r], r, r) for r in range(n) if not pending[r] > 0]
    heapq.heapify(queue)
    arrivals = n
    control = spec.control if spec is not None else None
    drafted = control is not None and control.on
    behind = 0.0
    log = Timeline()
    log_rows = log.rows
    tally = Tally()
    tool_wait = 0.0
    switch_at = None
    t = tau = 0.0
    clock_t, clock_tau = [0.0], [0.0]
    tick, tock = clock_t.append, clock_tau.append
    done = nrun = 0
    used = 0.0  # KV in use: running rows' reservations and the cached KV of rows out of the batch
    c_run = 0.0  # the running rows' context tokens
    heappush, heappop = heapq.heappush, heapq.heappop
    inf, nan, ceil = math.inf, math.nan, math.ceil

    while done < n:
        admitted = False
        # admission: FIFO (or by priority) while a slot and the cache allow, evicting cached KV oldest first
        if queue and nrun < max_running:
            chosen: list[int] = []
            slots = max_running - nrun
            while queue and len(chosen) < slots:
                r = queue[0][2]
                size = ctx[r] + gen[turn[r]]
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
                admitted = True
                chosen.sort()
                fresh = sq = 0.0
                widths = [] if padded else None
                for r in chosen:
                    k = turn[r]
                    c, h = ctx[r], held[r]
                    fresh += c - h
                    sq += c * c - h * h
                    if padded:
                        widths.append((c - h, h, k == first[r]))
                    prompt_tokens[k], cached_tokens[k], t_admit[k], tau_a[k] = c, h, t, tau
                    if admitted_at[r] != admitted_at[r]:
                        admitted_at[r] = t
                    held[r] = c
                    g = gen[k]
                    reserved[r] = c + g
                    version[r] += 1
                    tau_in[r] = tau
                    heappush(ends, (tau + g, r))
                    c_run += c
                nrun += len(chosen)
                if padded:  # real/'s engine: new trajectories in one padded forward (its add), returning ones in another
                    dt = 0.0
                    for new in (True, False):
                        part = [(w, h) for w, h, n in widths if n is new]
                        if part:
                            dt += prefill_time(*prefill_load(*zip(*part), padded=True))
                else:
                    dt = prefill_time(fresh, sq)
                last = log.last
                if last[0] == "prefill":  # log.add's merge, inline
                    last[2] = t + dt
                else:
                    log.last = last = ["prefill", t, t + dt, nrun, 0.0, nan, ""]
                    log_rows.append(last)
                t += dt
                tick(t)
                tock(tau)
                if drafted:  # the drafter has not read the prefilled tokens either
                    behind += fresh / nrun
        # after an admission, turns of no tokens (aborted requests) end at once, below; tools answer after a stretch
        if admitted:
            pass
        elif not nrun:
            if not tools:  # nothing runs, queued or waits: cannot happen while rows are not done
                raise AssertionError("agentic rollout stalled")
            t_next = tools[0][0]
            if t_next > t:
                log.add("tool_wait", t, t_next, 0)
                tool_wait += t_next - t
                t = t_next
                tick(t)
                tock(tau)
        else:
            # a stretch at the running batch: to the first turn's end, a tool's return, or the next decision
            b, c = nrun, c_run
            room = (tools[0][0] if tools else inf) - t
            to_end = ends[0][0] - tau
            if control is None:  # plain decoding: most events are these
                k = ceil(to_end - EPS)
                if k < 1:
                    k = 1
                dt = stretch_time(b, c, k)
                if dt > room:
                    k = max(1, ceil(k * max(room, 0.0) / dt)) if dt > 0 else k
                    dt = stretch_time(b, c, k)
            else:
                k = None
                if not control.on:  # count plain iterations towards the switch
                    k, dt = within_plain(b, c, max(1, ceil(to_end - EPS)), room)
                    k_plain = control.advance(b, k)
                    if k_plain or not control.on:
                        if k_plain != k:
                            k, dt = k_plain, stretch_time(b, c, k_plain)
                    else:
                        k = None
                if k is None:
                    s = control.decide(b)
                    if s is None:
                        k = max(1, int(min(max(1, ceil(to_end - EPS)), control.plain_left(b))))
                        k, dt = within_plain(b, c, k, room)
                    else:
                        if not drafted:  # the switch: the drafter's state for every running row
                            rows = sorted(r for _, r in ends)
                            sq = float(np.sum(np.array([ctx[r] + (tau - tau_in[r]) for r in rows]) ** 2))
                            dt = float(cost.switch_time(b, c, sq))
                            log.add("prefill", t, t + dt, b)
                            switch_at, drafted, behind = t, True, 0.0
                            t += dt
                            tick(t)
                            tock(tau)
                            room -= dt
                        chunk = speculate(spec, cost, s, b, c, to_end, behind, room)
                        behind = 0.0
                        gain = chunk.accepted * chunk.iterations
                        log.add("spec_decode", t, t + chunk.seconds, b, b * gain, chunk.accepted, str(s),
                                chunk.iterations)
                        tally.add(chunk)
                        c_run += b * gain
                        t += chunk.seconds
                        tau += gain
                        tick(t)
                        tock(tau)
                if k is not None:
                    control.observe_plain(b, dt / k, int(k))
            if k is not None:  # `k` plain iterations, `dt` seconds in all
                t1 = t + dt
                last = log.last
                if last[0] == "decode":  # log.add's, inline
                    last[2] = t1
                    last[4] = last[4] + float(b * k)
                else:
                    log.last = last = ["decode", t, t1, b, float(b * k), nan, ""]
                    log_rows.append(last)
                c_run += b * k
                t = t1
                tau += k
                tick(t)
                tock(tau)
                if drafted:
                    behind += k
        # rows whose turn has ended leave the batch: to their tool call (KV cached), or done
        if ends and ends[0][0] - tau <= EPS:
            while ends and ends[0][0] - tau <= EPS:
                r = heappop(ends)[1]
                k = turn[r]
                t_fin[k] = t
                c_run -= ctx[r] + (tau - tau_in[r])
                ctx[r] = h = reserved[r]  # at its turn's length (a speculative stretch may overshoot it)
                nrun -= 1
                version[r] += 1
                lat = latency[k]
                if lat is None:
                    used -= h
                    held[r] = 0.0
                    finished_at[r] = t
                    done += 1
                else:
                    if kept is not None and kept[k] != gen[k]:  # re-templated: cached up to the turn's start
                        h -= gen[k]
                        used -= gen[k]
                        ctx[r] = h + kept[k]
                    held[r] = h
                    if h > 0:
                        heappush(cached, (t, r, version[r]))
                    heappush(tools, (t + lat, r, True))
            if not nrun:
                c_run = 0.0
        # tools that answered by now: the answer joins the row's context and the row queues for its next turn
        if not admitted and tools and tools[0][0] <= t + EPS:
            due = t + EPS
            while tools and tools[0][0] <= due:
                _, r, ends_turn = heappop(tools)
                if ends_turn:
                    k = turn[r]
                    ctx[r] += tool_tokens[k]
                    if k == last_turn[r]:
                        used -= held[r]
                        held[r] = 0.0
                        version[r] += 1
                        finished_at[r] = t
                        done += 1
                        continue
                    turn[r] = k + 1
                heappush(queue, (key[r], arrivals, r))
                arrivals += 1
    record = {"admitted_at": np.array(t_admit), "finished_at": np.array(t_fin),
              "prompt_tokens": np.array(prompt_tokens), "cached_tokens": np.array(cached_tokens),
              "tau_a": np.array(tau_a), "first": turns.first, "gen": turns.gen}
    return EngineRollout(t, np.array(admitted_at), np.array(finished_at), log.intervals(), tally.iterations,
                         tally.accepted, tally.strategies, switch_at, clock_t=np.array(clock_t),
                         clock_tau=np.array(clock_tau), turns=record, tool_wait_s=tool_wait)
