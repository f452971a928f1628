"""One worker process of an asynchronous `tltsim real run` (`--policy async`): rank 0 trains, every other rolls out,
as the simulator plays bounded-staleness asynchronous RL (tltsim/sim/async_loop.py) and with the same decisions
(tltsim.control.async_rl's `AsyncControl`: the staleness gate, the trainer's choice). The records number the
workers as the simulator does, the rollout workers first: rank r >= 1 is worker r - 1, the trainer worker W - 1
(rank 0 trains because it saves the target: transformers' save_pretrained writes on rank 0 alone).

    rollout worker r (ranks 1 .. W-1)                   trainer (rank 0)
    its groups of the prompt stream (k = r, r + R, ...)  waits for `prompts` finished groups fresh enough
    start as the gate lets them, on an engine with the    (the oldest first; a stale one is dropped), then
    weights of version v; each group told through the     rewards + old log-probs + GRPO update: version v + 1,
    store once its samples have all finished              announced in the store, its weights broadcast
    at the announcement: stop, receive the weights, go on (every worker's report gathered, the step recorded)
    with every unfinished row's prompt and tokens so far
    re-prefilled under them (the row is `resumed`)

A group starts when the gate lets it (it is given to the worker's engine, which admits it as a slot frees); groups
start in stream order (the gate's count of groups started is group k's number), so worker r's next group may start
once `AsyncControl.may_start(k, version)`. A sample's policy version (`origin`) is that of the engine that admitted
it, its first tokens'; a group's is its oldest sample's.
With speculation (`async+tlt` and the others of real.run.config.ASYNC_POLICIES) a rollout worker's engine speculates
as its own control decides, and spot-trains its drafter while the gate keeps it waiting (real/run/async_speculation.py).

Records (the trainer writes them, real/run/recorder.py, after each step): a step runs from the last update to this
one; the trainer's timeline is its wait for groups (`idle`: the step's `rollout_s`; it times the machine first, the
speed probe of `tltsim validate --speed`), `reward`, `train` and
`weight_sync` (the broadcast); a rollout worker's, its engine calls, an `idle` wait where the gate is closed and
every row it holds has finished, and its `weight_sync` (receiving the weights; the rows' re-prefill is the next
step's first prefill). The step's samples are the groups the trainer took, each recorded with the worker that
generated it, and the step's off-policy columns (tltsim.core.off_policy: staleness, `resumed`, `dropped`).
When a weight update lands depends on wall time, so two runs of one seed differ.

Checkpoint (real/run/checkpoint.py), after every step, when every worker is at the update: the trainer's target, its
optimizer and the finished groups it has not trained; each rollout worker's groups in progress (every row's tokens
so far, version, times) and its next group of the stream. `resume` goes on from there: the steps past it run again,
and a group told after the checkpoint is generated again from the state the checkpoint holds.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from real.engine.adaptive import rollout
from real.engine.generate import Engine
from real.models.targets import load_target
from real.run import checkpoint
from real.run.config import RunConfig
from real.run.grpo import GRPO, group_advantages
from real.run.problems import mixed_seed, stream_problem
from real.run.probes import machine_speed
from real.run.progress import StepProgress
from real.run.async_speculation import RolloutSpeculation
from real.run.recorder import Recorder, WorkerStep
from real.settings import SamplingParams
from tltsim.control.async_rl import AsyncControl
from tltsim.core.off_policy import off_policy_columns
from tltsim.trace import TraceMeta

FINISHED = "async/finished"  # groups finished so far (a counter); FINISHED/i: the i-th to finish, by number
GROUP = "async/group/{}"  # a finished group's samples (JSON)
UPDATE = "async/update/{}"  # version v's weights are on their way
POLL_S = 0.01  # a waiting worker looks at the store this often (each look is a round trip to it)
TRAINER = 0  # the rank that trains


@dataclass
class Row:
    """A sample of a rollout worker's group: its prompt, its tokens so far and when it ran."""

    k: int  # its group: the prompt stream's k-th
    j: int  # its sample in the group
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)  # generated so far (in every version that ran it)
    origin: int = -1  # policy version of its first tokens (-1: not admitted yet)
    admitted_at: float | None = None
    finished_at: float | None = None
    resumed: bool = False  # an update interrupted it


class AsyncWorker:
    """One rank of an asynchronous run: a rollout worker or the trainer (module docstring)."""

    def __init__(self, rank: int, config: RunConfig, out: Path, resume: bool, command: str, bar: bool = False):
        self.rank, self.world, self.config, self.out, self.command = rank, config.workers, config, out, command
        self.trainer = TRAINER
        self.rollout_workers = config.workers - 1
        self.worker = self.rollout_workers if rank == TRAINER else rank - 1  # its number in the records
        self.device = torch.device("cpu" if config.device == "cpu" else f"cuda:{torch.cuda.current_device()}")
        self.store = dist.distributed_c10d._get_default_store()
        self.task = config.make_task()
        self.control = AsyncControl(config.async_knobs().max_staleness, [config.prompts] * config.steps)
        ckpt = out / checkpoint.CHECKPOINT if resume else None
        self.target = load_target(ckpt / "target" if ckpt else config.model, self.device, seed=config.seed,
                                  dtype=config.dtype)
        self.first_step = checkpoint.last_step(out) + 1 if ckpt else 0
        state = checkpoint.read(out, f"rank{rank}.pt", self.device) if ckpt else {}
        self.groups: dict[int, list[Row]] = {k: [Row(**r) for r in rows] for k, rows in state.get("groups", {}).items()}
        self.next = state.get("next", self.worker)  # a rollout worker's next group of the stream
        self.finished: dict[int, dict] = state.get("finished", {})  # the trainer's finished groups not trained yet
        self.read = 0  # groups the trainer has read from the store (a resumed run's store starts empty)
        self.sampling = SamplingParams(config.greedy, config.temperature)
        knobs = config.tlt_knobs()  # the speculating variant's decisions (None: async alone)
        self.spec = RolloutSpeculation(config, knobs, self.target, self.task, self.sampling, rank, self.worker,
                                       self.store, out, ckpt, state.get("speculation") or {}) \
            if knobs is not None and rank != TRAINER else None
        # every rank makes it; the trainer's update and speed probe reduce over itself alone
        alone = self.alone = dist.new_group([self.trainer])
        self.clock_end = 0.0  # where the run's clock stands: 0, or a resumed run's last step's end
        if rank == self.trainer:
            reference = load_target(config.model, self.device, seed=config.seed, dtype=config.dtype) \
                if config.grpo.kl > 0 else None
            self.grpo = GRPO(self.target, config.grpo, reference, seed=config.seed, group=alone)
            meta = TraceMeta(source="real", model=config.model, max_response_len=config.max_new_tokens,
                             group_size=config.group,
                             provenance=f"tltsim real run ({config.policy}, {config.workers} workers, "
                                        f"{config.device}): {command}")
            records = {**config.to_dict(), "command": command}
            self.recorder = Recorder.resume(out, records, meta, self.first_step - 1) if ckpt else \
                Recorder(records, meta)
            self.clock_end = self.recorder.clock_end
            if ckpt:
                self.grpo.resume(ckpt / "target")
                self.grpo.optimizer.load_state_dict(checkpoint.read(out, "optimizer.pt", self.device))
            self.progress = StepProgress(self.first_step, config.steps, bar, f"real run {config.policy}")
        self.origin = 0.0  # the run clock's time.time() origin, set when every worker is ready (`_started`)

    def clock(self) -> float:
        return time.time() - self.origin

    def run(self) -> None:
        if self.rank == self.trainer:
            try:
                self._train()
            finally:
                self.progress.close()
        else:
            self._roll_out()

    # --- the weights ---------------------------------------------------------------------------------------------
    def _weights(self) -> list[torch.Tensor]:
        """The target's parameters as a plain model names them, in name order: a LoRA target's base weights (the
        adapters merged into them, as rollout decodes) under the names of the model without adapters."""
        model = self.grpo.model if self.rank == self.trainer else self.target
        named = {n.replace(".base_layer.", "."): p for n, p in model.named_parameters() if "lora_" not in n}
        return [named[n] for n in sorted(named)]

    @torch.no_grad()
    def _broadcast_weights(self) -> None:
        """The trainer's weights to every rollout worker (every rank calls it once per update)."""
        params = self._weights()
        flat = torch.cat([p.detach().reshape(-1) for p in params]) if self.rank == self.trainer else \
            torch.empty(sum(p.numel() for p in params), dtype=params[0].dtype, device=self.device)
        dist.broadcast(flat, src=self.trainer)
        if self.rank != self.trainer:
            for p, part in zip(params, flat.split([p.numel() for p in params])):
                p.copy_(part.view_as(p))

    # --- a rollout worker ----------------------------------------------------------------------------------------
    def _roll_out(self) -> None:
        cfg = self.config
        groups = self.groups  # the groups started and not yet told: k -> its samples
        t0 = self._started()
        spec = self.spec
        for version in range(self.first_step, cfg.steps):
            while self.control.may_start(self.next, version):  # groups start in stream order: k have started before k
                k = self.next
                prompt = self.task.prompt_ids(stream_problem(self.task, cfg.seed, cfg.prompts, k, cfg.repeat_prompts))
                groups[k] = [Row(k, j, prompt) for j in range(cfg.group)]
                self.next += self.rollout_workers
            rows = [r for g in groups.values() for r in g if r.finished_at is None]
            if spec:
                spec.begin()
            engine = Engine(self.target, spec and spec.drafter, sampling=self.sampling,
                            max_new_tokens=cfg.max_new_tokens, seed=mixed_seed(cfg.seed, version, self.rank),
                            collect_features=bool(spec and spec.collects_features))
            update = UPDATE.format(version + 1)
            ro = rollout(engine, [r.prompt + r.tokens for r in rows], self.clock, spec and spec.control,
                         max_running=cfg.max_running, start=t0,
                         budgets=[cfg.max_new_tokens - len(r.tokens) for r in rows],
                         stop=lambda: self.store.check([update]),
                         poll=lambda: self._after_call(engine, rows, groups, version))
            self._after_call(engine, rows, groups, version)
            for i, tokens in engine.in_progress().items():  # interrupted: its tokens so far join its prompt
                rows[i].tokens += tokens
                rows[i].resumed = True
            if spec:
                spec.finished(version, engine)
            phases, batches, t = [], 0, ro.calls[-1].t_end if ro.calls else t0
            if not self.store.check([update]):  # every row finished and the gate is closed: wait for the update
                trained = spec.wait(version, update, t, self.clock) if spec else None
                phases, batches = trained or (self._wait(update, t), 0)
                t = phases[-1][2]
            self._broadcast_weights()
            if spec:
                spec.updated()
            phases.append(("weight_sync", t, self.clock()))
            dist.gather_object(WorkerStep(self.worker, ro.calls, phases, [], t0, batches), None, dst=self.trainer)
            t0 = self._step_end()
            self._checkpoint(version, {"next": self.next, "groups": {k: [asdict(r) for r in g]
                                                                     for k, g in groups.items()},
                                       "speculation": spec.state_dict() if spec else None},
                             spec.save if spec else None)

    def _wait(self, update: str, since: float) -> list[tuple[str, float, float]]:
        """Nothing to decode from `since` until the store holds `update`: idle."""
        while not self.store.check([update]):
            time.sleep(POLL_S)
        return [("idle", since, self.clock())]

    def _after_call(self, engine: Engine, rows: list[Row], groups: dict[int, list[Row]], version: int) -> None:
        """After a call of the engine running `rows`: the rows it admitted get their version and time, those it
        finished their tokens; a group of `groups` whose samples have all finished is told to the trainer and leaves
        them (a fresh engine's request ids are its prompts' indices)."""
        now = self.clock()
        for i in engine.ids:
            if rows[i].origin < 0:
                rows[i].origin, rows[i].admitted_at = version, now
        done = set()
        for i, f in engine.finished.items():
            if rows[i].finished_at is None:
                if rows[i].origin < 0:  # admitted and finished in one call
                    rows[i].origin, rows[i].admitted_at = version, now
                rows[i].tokens += f.tokens
                rows[i].finished_at = now
                done.add(rows[i].k)
        for k in sorted(done):
            group = groups[k]
            if all(r.finished_at is not None for r in group):
                del groups[k]
                self.store.set(GROUP.format(k), json.dumps({"engine": self.worker, "samples": [
                    {"sample": r.j, "prompt_len": len(r.prompt), "tokens": r.tokens, "origin": r.origin,
                     "resumed": r.resumed, "admitted_at": r.admitted_at, "finished_at": r.finished_at,
                     "eos": bool(r.tokens and r.tokens[-1] in engine.eos)} for r in group]}))
                n = self.store.add(FINISHED, 1)
                self.store.set(f"{FINISHED}/{n - 1}", str(k))

    # --- the trainer ---------------------------------------------------------------------------------------------
    def _train(self) -> None:
        cfg = self.config
        finished = self.finished  # finished groups not trained yet: k -> its samples
        t0 = self._started()
        for step in range(self.first_step, cfg.steps):
            dropped = 0
            # how fast the machine runs now (real.tools.profile.speed_probe, for validate --speed): on the trainer,
            # which would wait for groups anyway, while the rollout workers decode
            probe = machine_speed(cfg, self.grpo.model, self.sampling, 1, self.alone)
            while True:
                self._read_told(finished)
                take, stale = self.control.select(step, {k: min(s["origin"] for s in g["samples"])
                                                         for k, g in finished.items()})
                for k in stale:
                    dropped += len(finished.pop(k)["samples"])
                if take is not None:
                    break
                time.sleep(POLL_S)
            waited = self.clock()
            groups = [(k, finished.pop(k)) for k in take]
            samples = [(k, g["engine"], s) for k, g in groups for s in sorted(g["samples"], key=lambda s: s["sample"])]
            problems = {k: stream_problem(self.task, cfg.seed, cfg.prompts, k, cfg.repeat_prompts) for k, _ in groups}
            prompts = [self.task.prompt_ids(problems[k]) for k, _, _ in samples]
            responses = [s["tokens"] for _, _, s in samples]
            rewards = np.array([self.task.reward(problems[k], s["tokens"]) for k, _, s in samples], float)
            adv = group_advantages(rewards.reshape(len(groups), cfg.group)).ravel()
            old, ref = self.grpo.old_logprobs(prompts, responses, adv)
            phases = [("idle", t0, waited), ("reward", waited, t := self.clock())]
            stats = self.grpo.update(prompts, responses, adv, old, ref)
            phases.append(("train", t, t := self.clock()))
            self.store.set(UPDATE.format(step + 1), "1")
            self._broadcast_weights()
            phases.append(("weight_sync", t, self.clock()))
            mine = WorkerStep(self.worker, [], phases, [
                {"prompt_id": k, "sample": s["sample"], "engine": e, "prompt_len": len(p),
                 "response_len": len(s["tokens"]), "reward": float(r), "finished": s["eos"],
                 "admitted_at": s["admitted_at"], "finished_at": s["finished_at"], "tokens": s["tokens"]}
                for (k, e, s), p, r in zip(samples, prompts, rewards)], waited)
            reports = [None] * self.world
            dist.gather_object(mine, reports, dst=self.trainer)
            self._read_told(finished)  # every group told before the update: the checkpoint holds them
            df = {"origin": np.array([s["origin"] for *_, s in samples]),
                  "resumed": np.array([s["resumed"] for *_, s in samples]),
                  "response_len": np.array([len(s["tokens"]) for *_, s in samples])}
            row = self.recorder.add(step, t0, reports, {
                "tail_s": 0.0, "drafter_accepted": float("nan"), "static_drafter_accepted": float("nan"),
                "speed_probe_s": probe, "grpo_loss": stats["loss"], "grpo_clip_frac": stats["clip_frac"],
                **off_policy_columns(step, df, np.ones(len(samples), bool), dropped)})
            spec_s = sum(c.t_end - c.t_start for r in reports for c in r.calls if c.mode == "spec_decode")
            row["sd_share"] = spec_s / (self.rollout_workers * row["total_s"])  # of the rollout workers' step
            t0 = self._step_end(t0 + row["total_s"])
            self.recorder.save(self.out)
            self._checkpoint(step, {"finished": finished})
            self.progress.step(step, row)

    def _read_told(self, finished: dict[int, dict]) -> None:
        """The groups told through the store since the last read, into `finished`."""
        for i in range(self.read, self.store.add(FINISHED, 0)):
            k = int(self.store.get(f"{FINISHED}/{i}"))
            finished[k] = json.loads(self.store.get(GROUP.format(k)))
            self.read = i + 1

    def _checkpoint(self, step: int, state: dict, own=None) -> None:
        """RUN_DIR/checkpoint for `step` (collective): each rank's `state` (and what `own(dir)` writes of its own);
        the trainer's target and optimizer."""
        def shared(tmp: Path) -> None:
            self.grpo.save_target(tmp / "target")
            self.task.save(tmp / "target")
            torch.save(self.grpo.optimizer.state_dict(), tmp / "optimizer.pt")

        checkpoint.write(self.out, self.rank, step, state, shared if self.rank == self.trainer else None, own)

    def _started(self) -> float:
        """The run's first step starts once every worker is ready, where the run's clock stands (0, or where a
        resumed run's last step ended): one origin for every worker, the trainer's."""
        dist.barrier()
        origin = [time.time() - self.clock_end]
        dist.broadcast_object_list(origin, src=self.trainer)
        self.origin = origin[0]
        return self._step_end(self.clock_end if self.rank == self.trainer else None)

    def _step_end(self, end: float | None = None) -> float:
        """Where the step that just ended ended, the next one's start: the trainer's `end`, told to every rank."""
        box = [end]
        dist.broadcast_object_list(box, src=self.trainer)
        return box[0]
