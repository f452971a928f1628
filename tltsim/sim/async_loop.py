"""Bounded-staleness asynchronous RL as simpy processes: rollout engines and a trainer on separate GPUs.

    rollout engines (workers 0..R-1)          trainer (workers R..W-1)
    take prompt groups from the stream,       waits for a batch of finished groups,
    decode continuously; pause on updates     reward + log-prob + train, weight sync -> version + 1

Rollout never waits for the trainer except at the staleness gate (AReaL): a new
prompt group may start only while groups started < (version + max_staleness + 1)
x the batch, so a sample starts at most `max_staleness` versions ahead of the
trainer. The trainer takes the oldest finished groups first; a group whose first
tokens are more than `max_staleness` versions old when it would be trained is
dropped (it started under a policy too old; counted in `dropped`). A weight update
interrupts generation on every engine: the engine loads the weights
(`update_s`) and re-prefills every running request (prompt + tokens so far) with the
new weights; the requests then continue (they are `resumed`). An engine takes new
weights between its calls: decode iterations end often, but a prefill (an admission,
the switch's, an update's) runs to its end, so the trainer's weight sync waits for
every prefill in progress to end (as a rollout worker joins the broadcast only then).

Records: a step is a training step; its `rollout_s` is the time the trainer waited
for a batch (0 when rollout keeps ahead), `tail_s` 0. Rollout workers' timeline rows
carry the trainer's step at the time; an update's pause is `weight_sync`.

Between events an engine's batch is constant: it decodes until its next request
finishes, in closed form (cost.segment_time), or until an update interrupts it, in
which case the iterations done are the elapsed share of the stretch, rounded down.

Speculation (`async+tlt`, `async+sd-always`, `async+tlt-auto`, `async+static-sd`, `async+tlt-base`): the policy that
speculates gives each engine's decisions (`speculation(engine)`: its switch, tuner and guard on the engine's running
batch), and the engine speculates in chunks (tltsim.sim.speculation.speculate, the routine the synchronous executors
use) once its switch is on and wherever the guard finds speculation paying at the batch it runs. Each policy version
is a rollout to the switch: it starts over at every weight update (the engine re-prefills its requests then, and the
drafter reads them again when it switches on). The drafter trains where an engine has nothing to decode (the gate
closed, or every request in a tool call), the wait long enough to load and save it (the policy's `idle_training`),
and drifts with every weight update (`end_version`): it follows the policy versions it serves.
"""
from __future__ import annotations

import heapq
import math

import numpy as np

from tltsim.control.async_rl import AsyncControl
from tltsim.control.groups import rewards_disagree
from tltsim.core.padding import padded_tokens
from tltsim.core.records import TimelineRow
from tltsim.cost import prefill_seconds
from tltsim.sim.prompts import PromptStream
from tltsim.sim.schedule import admits, check_footprints
from tltsim.sim.async_records import record_step
from tltsim.sim.speculation import Chunk, Tally, speculate

NAN = np.nan
EPS = 1e-9  # tokens: a request whose turn has fewer left has ended it (speculation gains fractions of tokens)


class AsyncRun:
    """One asynchronous training run; `process()` is the simpy process the simulator runs."""

    def __init__(self, sim, env, bar, rollout_engines: int, max_staleness: int, update_s: float,
                 stream: PromptStream | None = None):
        self.sim, self.env, self.bar = sim, env, bar
        self.cost, self.cfg = sim.cost, sim.cfg
        self.R, self.update_s = rollout_engines, update_s
        self.policy = sim.policy  # asked for each engine's speculation (None: plain decoding) and its drafter
        self.stream = stream or PromptStream(sim.trace.df)  # the groups in the order they start
        trace_steps = sim.step_columns()
        # the gate and the trainer's choice; each step trains on the groups its trace step holds
        self.control = AsyncControl(max_staleness, [len(np.unique(cols["prompt_id"])) for _, cols in trace_steps])
        self.steps = [s for s, _ in trace_steps]
        self.tally = Tally()  # the speculation of the policy version in progress, every engine's
        self.spec_s = 0.0  # ... its seconds of speculative decoding
        self.version = 0
        self.updated = env.event()  # triggered (and replaced) at every weight update and at the end
        self.finished_group = env.event()
        self.started_groups = 0
        self.pending: list[int] = []  # sample ids of started groups waiting for a slot
        self.done_groups: list[int] = []  # finished groups not yet trained
        self.over = False  # the last step has trained: engines stop
        self.closed = False  # the run's timeline is complete
        # per sample: filled as groups start
        self.s_group: list[int] = []
        self.s_prompt: list[int] = []
        self.s_sample: list[int] = []
        self.s_plen: list[int] = []
        self.s_rlen: list[int] = []
        self.s_reward: list[float] = []  # the trace's reward (rl.skip_zero_advantage trains only groups that differ)
        self.s_version: list[int] = []  # version at admission (its first tokens)
        self.s_engine: list[int] = []
        self.s_admit: list[float] = []
        self.s_finish: list[float] = []
        self.s_resumed: list[bool] = []
        self.s_turns: list[tuple] = []  # (tokens a turn, tool latency after it or None, tool tokens) lists
        self.s_tool: list[int] = []  # tokens the tools' answers add to the sample's sequence
        self.group_rows: dict[int, list[int]] = {}
        self.group_left: dict[int, int] = {}
        self.group_version: dict[int, int] = {}  # finished group -> version of its oldest first token
        self.cap = self.cost.kv_capacity_tokens
        self._last: dict[int, int] = {}  # worker -> index of its last timeline row
        self._doing: dict[int, str] = {}  # engine -> state of what it is waiting on
        self._calls: dict[int, float] = {}  # engine -> when its call in progress that nothing interrupts ends

    # --- shared queue ------------------------------------------------------------------------
    def _refill(self) -> None:
        """Start new groups while the staleness gate allows and nothing is waiting."""
        while not self.pending and self.control.may_start(self.started_groups, self.version):
            g = self.stream.take(1, self.version)
            gid = int(g["group"][0])
            ids = list(range(len(self.s_group), len(self.s_group) + len(g["group"])))
            check_footprints(g["prompt_len"], g["response_len"], self.cap)
            for c, v in (("group", self.s_group), ("prompt_id", self.s_prompt), ("sample", self.s_sample),
                         ("prompt_len", self.s_plen), ("response_len", self.s_rlen)):
                v.extend(g[c].tolist())
            self.s_reward.extend(g["reward"].tolist() if "reward" in g else [0.0] * len(ids))
            n = len(ids)
            if "turn_response_len" in g:  # a multi-turn trace: each sample's turns and the tools between them
                self.s_turns += list(zip(g["turn_response_len"], g["tool_latency_s"], g["tool_tokens"]))
                self.s_tool += [int(sum(t)) for t in g["tool_tokens"]]
            else:
                self.s_turns += [([r], [None], [0]) for r in g["response_len"].tolist()]
                self.s_tool += [0] * n
            self.s_version += [-1] * n
            self.s_engine += [-1] * n
            self.s_admit += [NAN] * n
            self.s_finish += [NAN] * n
            self.s_resumed += [False] * n
            self.group_rows[gid] = ids
            self.group_left[gid] = n
            self.pending.extend(ids)
            self.started_groups += 1

    def _admit(self, e: int, running: int, used: int, turn: dict) -> tuple[list[int], int]:
        """The pending samples engine `e`, running `running` rows in `used` tokens of KV, starts now (FIFO, while a
        slot and the cache allow; each a new sample at its first turn), and the KV then in use."""
        new = []
        while self.pending and admits(running + len(new), used, self._footprint(self.pending[0]),
                                      self.cfg.cluster.max_running, self.cap):
            i = self.pending.pop(0)
            new.append(i)
            used += self._footprint(i)
            self.s_version[i], self.s_engine[i], self.s_admit[i] = self.version, e, self.env.now
            turn[i] = 0
            self._refill()
        return new, used

    def _footprint(self, i: int) -> int:
        """Sample i's final KV footprint (prompt + response tokens, and tool answers between turns)."""
        return self.s_plen[i] + self.s_rlen[i] + self.s_tool[i]

    # --- processes ---------------------------------------------------------------------------
    def process(self):
        self.policy.begin_version(0, 0.0)
        for e in range(self.R):
            self.env.process(self._engine(e))
        yield self.env.process(self._trainer())
        for e in range(self.R):  # engines still in a prefill or an update when the last step ends
            self._log(e, self._doing.get(e, "idle"), self._end_of(e), self.env.now)
        self.closed = True  # events left at this instant record nothing

    def _step_now(self) -> int:
        return self.steps[min(self.version, len(self.steps) - 1)]

    def _log(self, worker, state, a, b, batch=NAN, tokens=0.0):
        if b <= a or self.closed:
            return
        rec = self.sim.recorder
        last = self._last.get(worker)
        if last is not None:
            row = rec.timeline[last]
            if row.state == state and row.step == self._step_now() and row.t_end == a:
                rec.stretch(last, b, tokens)
                return
        self._last[worker] = rec.interval(TimelineRow(self._step_now(), worker, state, a, b, batch, tokens))

    def _engine(self, e: int):
        env, cost = self.env, self.cost
        rows = np.zeros(0, dtype=np.int64)  # running sample ids
        rem = np.zeros(0)  # tokens left per running row, of its turn
        ctx = np.zeros(0)  # context per running row (prompt, generated, tool answers)
        used = 0
        max_running = self.cfg.cluster.max_running
        turn: dict[int, int] = {}  # sample -> its current turn (multi-turn samples)
        context: dict[int, float] = {}  # sample in a tool call -> its context
        tools: list[tuple[float, int]] = []  # heap of (return time, sample): samples in a tool call (their KV kept)
        ready: list[int] = []  # samples whose tool answered, waiting for a slot
        stale: set[int] = set()  # samples whose weights changed during their tool call: prefilled whole again
        drafted, behind = False, 0.0  # the drafter holds the running rows' state; tokens a row it has not read
        while not self.over:
            while tools and tools[0][0] <= env.now:
                _, i = heapq.heappop(tools)
                if turn[i] == len(self.s_turns[i][0]):  # the call after its last turn: the sample is done
                    self._finish(i, env.now)
                    used -= self._footprint(i)
                else:
                    ready.append(i)
            self._refill()
            new, back = [], []
            while ready and len(rows) + len(new) + len(back) < max_running:
                back.append(ready.pop(0))  # its KV is reserved already: a slot is all it needs
            new, used = self._admit(e, len(rows) + len(back), used, turn)
            if new or back:
                p = np.array([self.s_plen[i] for i in new] + [context.pop(i) for i in back], dtype=float)
                # prefill: the prompts, and each answer (or, after new weights, a returning sample's whole context)
                answer = np.array([float(self.s_plen[i]) for i in new]
                                  + [p[len(new) + j] if i in stale else self.s_turns[i][2][turn[i] - 1]
                                     for j, i in enumerate(back)])
                stale -= set(back)
                t, state = env.now, "prefill" if not len(rows) else "decode"
                self._doing[e] = state
                # real/'s engine (one that pads) admits new rows and resumes returning ones in two forwards
                parts = [slice(0, len(new)), slice(len(new), None)] if cost.padded_prefill else [slice(None)]
                yield from self._call(e, sum(prefill_seconds(cost, answer[s], p[s] - answer[s]) for s in parts
                                             if len(answer[s])))
                self._log(e, state, t, env.now, len(rows) + len(new) + len(back))
                admitted = new + back
                if drafted:  # the drafter has not read the prefilled tokens either
                    behind += float(answer.sum()) / (len(rows) + len(admitted))
                rows = np.concatenate([rows, admitted]).astype(np.int64)
                rem = np.concatenate([rem, [self.s_turns[i][0][turn[i]] for i in admitted]])
                ctx = np.concatenate([ctx, p])
            if not len(rows):  # nothing to run: idle, or every sample of this engine in a tool call
                state, update = "tool_wait" if tools else "idle", self.updated
                t, self._doing[e] = env.now, state
                yield env.any_of([update] + ([env.timeout(max(0.0, tools[0][0] - env.now))] if tools else []))
                trains = self.policy.idle_training(env.now - t) > 0  # the drafter trained in the wait
                self._log(e, "drafter_train" if trains else state, t, env.now)
                if update.triggered:  # new weights while they waited: their context is prefilled whole again
                    stale |= {i for _, i in tools} | set(ready)
                    for i in stale:
                        self.s_resumed[i] = True
                    drafted = False
                continue
            b, update = len(rows), self.updated
            gain, drafted, behind = yield from self._decode(e, rows, rem, ctx, tools[0][0] if tools else np.inf,
                                                            drafted, behind)
            rem -= gain
            ctx += gain
            ended = rem <= EPS
            for j in np.flatnonzero(ended):
                i = int(rows[j])
                gen, lat, tok = self.s_turns[i]
                if lat[turn[i]] is None or lat[turn[i]] != lat[turn[i]]:  # no tool call after it: the sample is done
                    self._finish(i, env.now)
                    used -= self._footprint(i)
                    continue
                heapq.heappush(tools, (env.now + float(lat[turn[i]]), i))
                turn[i] += 1
                context[i] = float(ctx[j]) + float(tok[turn[i] - 1])
            rows = rows[~ended]
            rem, ctx = rem[~ended], ctx[~ended]
            if update.triggered and not self.over:
                stale |= {i for _, i in tools} | set(ready)
                for i in [*rows.tolist(), *stale]:
                    self.s_resumed[i] = True
                drafted = False  # a new rollout to the switch: the drafter reads the rows again when it is on
                if len(rows):  # new weights: load them, re-prefill the running
                    self._doing[e], t = "weight_sync", env.now
                    joining = []  # real/'s engine (one that pads) starts over: the prompts the gate lets start now
                    if cost.padded_prefill:  # join the running rows' forward
                        self._refill()
                        joining, used = self._admit(e, len(rows), used, turn)
                    p = np.array([float(self.s_plen[i]) for i in joining])
                    yield from self._call(e, self.update_s + prefill_seconds(cost, np.concatenate([ctx, p])))
                    self._log(e, "weight_sync", t, env.now, b + len(joining))
                    rows = np.concatenate([rows, joining]).astype(np.int64)
                    rem = np.concatenate([rem, [self.s_turns[i][0][0] for i in joining]])
                    ctx = np.concatenate([ctx, p])
        self._log(e, "idle", self._end_of(e), env.now)

    def _decode(self, e: int, rows, rem, ctx, tool_at: float, drafted: bool, behind: float):
        """Engine e's next stretch at its constant batch, until its first request ends its turn, a tool returns or
        an update interrupts it: plain iterations, or a speculative chunk where the engine's control decides so
        (the switch's one-off prefill first, when the drafter does not hold the rows yet). Returns the tokens every
        row gained, and after it whether the drafter holds the rows and the tokens a row it has not read."""
        env, cost = self.env, self.cost
        b, c, left = len(rows), float(ctx.sum()), float(rem.min())
        spec = self.policy.speculation(e)
        update = self.updated
        n = max(0, math.ceil(left - EPS))  # plain iterations until the first request ends its turn
        strategy = None
        if spec is not None and n:
            k = 0 if spec.control.on else spec.control.advance(b, n)
            if k:  # plain until the switch turns on (or all n while it stays off)
                n = k
            else:
                strategy = spec.control.decide(b)
                if strategy is None:
                    n = max(1, int(min(n, spec.control.plain_left(b))))
        t = env.now
        if strategy is None:
            dt = float(cost.segment_time(b, 1, c, b, n))
            self._doing[e] = "decode"
            yield env.any_of([env.timeout(dt), update] + ([env.timeout(max(0.0, tool_at - t))] if tool_at < np.inf
                                                          else []))
            k = n if env.now >= t + dt else np.floor(n * (env.now - t) / dt)
            if spec is not None and k:
                spec.control.observe_plain(b, dt / n, int(k))
            self._log(e, "decode", t, env.now, b, b * k)
            return float(k), drafted, behind + k if drafted else 0.0
        if not drafted:  # the switch: the drafter reads every running row (prompt and tokens so far)
            self._doing[e] = "prefill"
            yield from self._call(e, float(cost.switch_time(b, c, float((ctx * ctx).sum()))))
            self._log(e, "prefill", t, env.now, b)
            t, behind = env.now, 0.0
        chunk = speculate(spec, cost, strategy, b, c, left, behind, tool_at - t)
        self._doing[e] = "spec_decode"
        yield env.any_of([env.timeout(chunk.seconds), update])
        done = 1.0 if env.now >= t + chunk.seconds else (env.now - t) / chunk.seconds
        chunk = Chunk(chunk.strategy, chunk.iterations * done, env.now - t, chunk.accepted)
        self.tally.add(chunk)
        self.spec_s += chunk.seconds
        gain = chunk.accepted * chunk.iterations
        self._log(e, "spec_decode", t, env.now, b, b * gain)
        return gain, True, 0.0

    def _call(self, e: int, seconds: float):
        """Engine e's call that nothing interrupts (a prefill): a weight update waits for its end."""
        self._calls[e] = self.env.now + seconds
        yield self.env.timeout(seconds)
        del self._calls[e]

    def _finish(self, i: int, t: float) -> None:
        """Sample i is done at t; its group is done with its last sample."""
        self.s_finish[i] = t
        gid = self.s_group[i]
        self.group_left[gid] -= 1
        if self.group_left[gid] == 0:
            self.group_version[gid] = min(self.s_version[j] for j in self.group_rows[gid])
            self.done_groups.append(gid)
            self.finished_group.succeed()
            self.finished_group = self.env.event()

    def _end_of(self, worker) -> float:
        last = self._last.get(worker)
        return self.sim.recorder.timeline[last].t_end if last is not None else 0.0

    def _trainer(self):
        env, cost, sim = self.env, self.cost, self.sim
        tp = self.cfg.cluster.tp
        trainers = range(self.R, sim.workers)
        gpus = len(trainers) * tp
        for k, step in enumerate(self.steps):
            t0 = env.now
            dropped = 0
            while True:
                take, gone = self.control.select(k, {g: self.group_version[g] for g in self.done_groups})
                dropped += sum(len(self.group_rows[g]) for g in gone)
                out = set(gone) | set(take or ())
                self.done_groups = [g for g in self.done_groups if g not in out]
                if take is not None:
                    break
                yield self.finished_group
            ids = np.array([i for g in take for i in self.group_rows[g]])
            waited = env.now
            scored = ids  # the log-prob forward's and the update's rows: every one, or those with a gradient
            if self.cfg.rl.skip_zero_advantage:
                scored = ids[rewards_disagree({"group": np.asarray(self.s_group)[ids],
                                               "reward": np.asarray(self.s_reward)[ids]})]
            tokens, sq = padded_tokens([self.s_plen[i] + self.s_rlen[i] + self.s_tool[i] for i in scored],
                                       self.cfg.rl.micro_batch_tokens)
            phases = [("reward", self.cfg.rl.reward_s + float(cost.logprob_time(tokens, gpus, sq_tokens=sq))),
                      ("train", float(cost.train_time(tokens, gpus, sq_tokens=sq))),
                      ("weight_sync", float(cost.sync_time()))]
            for w in trainers:
                self._log(w, "idle", t0, waited)
            for j, (state, dt) in enumerate(phases):
                if state == "weight_sync":  # the weights reach an engine once its call in progress (a prefill) ends
                    dt += max([0.0] + [end - env.now for end in self._calls.values()])
                    phases[j] = (state, dt)
                t = env.now
                yield env.timeout(dt)
                for w in trainers:
                    self._log(w, state, t, env.now)
            record_step(self, k, step, t0, waited, phases, ids, dropped)
            self.version += 1
            self.over = k == len(self.steps) - 1
            self.policy.begin_version(self.version, env.now)
            self.updated.succeed()
            self.updated = env.event()
            self.bar.update(1)
