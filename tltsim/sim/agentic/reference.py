"""The agentic rollout's reference executor: the events of the package's model (tltsim.sim.agentic) played over
arrays of every row, one batch change at a time. The fast executor (fast.py) is held to it."""
from __future__ import annotations

import heapq

import numpy as np

from tltsim.core.errors import TltsimError
from tltsim.cost import prefill_seconds
from tltsim.sim.agentic.turns import EPS, Turns
from tltsim.sim.engine import EngineRollout, Entry, merge_entries
from tltsim.sim.speculation import Speculation, Tally, speculate, within


class Run:
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
        return EngineRollout(self.t, self.admitted_at, self.finished_at, merge_entries(self.log), self.tally.iterations,
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
        if self.cost.padded_prefill:  # real/'s engine: new trajectories in one padded forward (add), returning ones in another
            new = k == turns.first[rows]
            dt = sum(prefill_seconds(self.cost, fresh[m], cached[m]) for m in (new, ~new) if m.any())
        else:
            dt = prefill_seconds(self.cost, fresh, cached)
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
            k, dt = within(max(1, int(np.ceil(to_end - EPS))), room, plain, whole=True)
            k_plain = control.advance(b, k)
            if k_plain or not control.on:
                self._plain(rows, b, c, k_plain, dt if k_plain == k else None)
                return
        if control is not None:
            s = control.decide(b)
        if s is None:
            k = max(1, int(np.ceil(to_end - EPS)))
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
        for r in np.flatnonzero(self.running & (self.left <= EPS)):
            k = self.turn[r]
            self.t_fin[k] = self.t
            self.ctx[r] += self.left[r]  # a speculative stretch's gain may overshoot: the turn ends at its length
            self.left[r] = 0.0
            self.running[r] = False
            self.reserved[r] = 0.0
            self.held[r] = self.ctx[r]
            kept = self.turns.kept
            if kept is not None and kept[k] != self.turns.gen[k]:  # re-templated: cached up to the turn's start
                self.held[r] = self.ctx[r] - self.turns.gen[k]
                self.ctx[r] = self.held[r] + kept[k]
            lat = self.turns.tool_latency_s[k]
            if np.isnan(lat):
                self._finish(r)
            else:
                self.waiting_since[r] = self.t
                heapq.heappush(self.tools, (self.t + float(lat), int(r), True))

    def _returns(self) -> None:
        """Tools that answered by now: the answer joins the row's context and the row queues for its next turn;
        the call after a row's last turn ends the trajectory when its answer is in."""
        while self.tools and self.tools[0][0] <= self.t + EPS:
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
