"""One worker process of `tltsim real run` (rank = one rollout engine): its models, its policy state and
its RL step loop (real/run/launch.py launches the workers; see its docstring for the step).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from real.run import checkpoint

from real import drafters
from real.engine.adaptive import rollout
from real.engine.generate import Engine
from real.engine.tools import Sandbox, runs_code
from real.run.grpo import GRPO
from real.run.migration import TailMove
from real.run.problems import mixed_seed, step_problems
from real.run.rows import Share, StepRows
from real.drafters.hybrid import HybridDrafter
from real.drafters.ngram import NgramDrafter
from real.models.targets import load_target
from real.run.progress import StepProgress
from real.run.recorder import Recorder, WorkerStep, recorded_answers, turn_records
from real.run.config import RunConfig
from real.run.drafting import given_drafter, spot_lr, starting_checkpoint, warmed_up_drafter
from real.run.probes import drafter_accepted, machine_speed
from real.settings import SamplingParams
from real.run.spot import SampleBuffer, SpotDispatcher, SpotTraining
from real.drafters.suffix import SuffixDrafter
from tltsim.control import SpotTrainer
from tltsim.control.learned import learned_summary
from tltsim.trace import TraceMeta


def _tail_stop(tail: TailMove, engine: Engine, rows: int):
    """migrate's rollout stop: this worker's unfinished rows told before every engine call (a fresh engine's request
    ids are its prompts' indices), and whether the tail moves now."""
    def stopped() -> bool:
        tail.finished(rows - len(engine.finished))
        return tail.stop()
    return stopped


class Worker:
    """One rank's state across the run (model, drafter, policy objects) and its step loop."""

    def __init__(self, rank: int, config: RunConfig, out: Path, resume: bool, command: str, bar: bool = False):
        self.rank, self.world, self.config, self.out, self.command = rank, config.workers, config, out, command
        self.device = torch.device("cpu" if config.device == "cpu" else f"cuda:{torch.cuda.current_device()}")
        self.dtype = getattr(torch, config.dtype)
        self.store = dist.distributed_c10d._get_default_store()
        self.knobs = config.tlt_knobs()
        self.ckpt = out / checkpoint.CHECKPOINT if resume else None
        self.task = config.make_task()  # --task, else gcd for a pretrained-here target, word problems for a chat model
        self.tools = getattr(self.task, "tools", None)  # a task whose model calls a tool (real/tasks/agentic.py)
        # where this worker's tool calls run
        self.sandbox = Sandbox(runs_code=runs_code(self.tools)) if self.tools is not None else None
        self.target = self._load(self.ckpt / "target" if self.ckpt else config.model)
        reference = self._load(config.model) if config.grpo.kl > 0 else None
        self.grpo = GRPO(self.target, config.grpo, reference, seed=config.seed)
        self.sampling = SamplingParams(config.greedy, config.temperature)
        self.answers = recorded_answers(config.answers) if config.answers else None  # (step, prompt, sample) -> ids
        k = self.knobs
        self.trains = k is not None and k.spot
        self.control = k.control(rank, config.seed) if k else None
        self.spot = self._spot(k) if self.trains else None  # this worker's spot training: its buffer, its optimizer
        self.drafter = None  # what the engines draft with: the trained drafter, the history's or the hybrid of both
        self.trained = None  # its trained part (real.drafters.eagle's, drafters.Trainable), what spot training trains
        self.history = None  # its history part (real.drafters.suffix), fed by the rollouts of every worker
        self.history_state = None  # ... as the checkpoint holds it
        self.static_drafter = None  # --probe-static: the starting drafter, never trained, probed beside the spot one
        self.rows = StepRows(config, self.task, rank, self.world, self.store)  # which rows it runs, trains on
        self.migration = config.migration()  # migrate's knobs: a step's tail moves onto fewer workers
        self.first_step = 0
        if self.ckpt:
            state = checkpoint.read(out, f"rank{rank}.pt", self.device)
            if self.control:
                self.control.load_state_dict(state["control"])
            if self.spot:
                self.spot.buffer.load_state_dict(state["buffer"])
                self.spot.opt_state = state["drafter_opt"]
            self.history_state = state.get("history")
            self.rows.load_state_dict(state)
            self.grpo.resume(self.ckpt / "target")
            self.grpo.optimizer.load_state_dict(checkpoint.read(out, "optimizer.pt", self.device))
            self.first_step = checkpoint.last_step(out) + 1
        # one clock for every worker: rank 0's time.time() origin, continuing after a resumed run's last step
        self.recorder = self._recorder() if rank == 0 else None
        origin = [time.time() - (self.recorder.clock_end if self.recorder else 0.0)]
        dist.broadcast_object_list(origin, src=0)
        self.origin = origin[0]
        self.dispatcher = SpotDispatcher(self._trainer(), self.store, self.clock) if rank == 0 else None
        self.progress = StepProgress(self.first_step, config.steps, bar, f"real run {config.policy}") \
            if rank == 0 else None

    def clock(self) -> float:
        return time.time() - self.origin

    def _load(self, where):
        return load_target(where, self.device, seed=self.config.seed, dtype=self.config.dtype)

    def _recorder(self) -> Recorder:
        cfg = self.config
        meta = TraceMeta(source="real", model=cfg.model, max_response_len=cfg.max_new_tokens, group_size=cfg.group,
                         provenance=f"tltsim real run ({cfg.policy}, {cfg.workers} workers, {cfg.device}): "
                                    f"{self.command}")
        config = {**cfg.to_dict(), "command": self.command}
        if self.ckpt:
            return Recorder.resume(self.out, config, meta, self.first_step - 1)
        return Recorder(config, meta)

    def _spot(self, knobs) -> SpotTraining:
        cfg = self.config
        return SpotTraining(self.rank, self.world, self.store, SampleBuffer(knobs.buffer_steps, knobs.keep_long_prev),
                            spot_lr(cfg), cfg.drafter_batch, self.out, self.device, self.dtype,
                            self.target.config.hidden_size)

    def _trainer(self) -> SpotTrainer:
        trainer = self.knobs.trainer(self.world) if self.knobs else SpotTrainer(self.world, enabled=False)
        if self.ckpt:
            trainer.load_state_dict(checkpoint.read(self.out, "trainer.pt"))
        return trainer

    # --- the run ---------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            if self.knobs is not None:
                self._build_drafter()
                if self.recorder:
                    self.recorder.extra_summary["drafter"] = self.drafter.kind
                if self.trains and self.config.probe_static:
                    self.static_drafter = self._starting_drafter()
            for step in range(self.first_step, self.config.steps):
                self.step(step)
        finally:
            if self.progress:
                self.progress.close()
            if self.sandbox is not None:
                self.sandbox.close()

    def _build_drafter(self) -> None:
        """The policy's drafter (its `drafter` knob, tltsim.drafter.methods): eagle, the trained drafter; ngram,
        real.drafters.ngram's and suffix, real.drafters.suffix's (no model: nothing to warm up or train); hybrid,
        real.drafters.hybrid's over the trained drafter, which spot training trains as tlt's. A history starts empty,
        or is rebuilt from the checkpoint's (real.drafters.suffix.load_state_dict)."""
        kind = self.knobs.drafter
        if kind == "ngram":  # each row's own text: nothing kept across rows, steps or a checkpoint
            self.drafter = NgramDrafter()
            return
        if kind in ("suffix", "hybrid"):
            self.history = SuffixDrafter()
            if self.history_state is not None:
                self.history.load_state_dict(self.history_state)
        if kind != "suffix":
            self.trained = self._initial_drafter()
            if self.spot:
                self.spot.drafter = self.trained
        self.drafter = self._policy_drafter(self.trained, self.history)

    def _policy_drafter(self, trained: drafters.Trainable | None, history: SuffixDrafter | None) -> drafters.Drafting:
        """The policy's drafter over these parts."""
        if trained is None:
            return history
        return trained if history is None else HybridDrafter(trained, history)

    def _probed(self, trained: drafters.Trainable | None) -> drafters.Drafting | None:
        """What the probe measures: the policy's drafter over `trained` (None: none to probe) with a history of its
        own, empty (the live one would index the probe's prompts, and the next probe find its own answers there):
        a held-out prompt decoded alone has its prompt and its own tokens to draft from, no siblings."""
        if self.knobs is not None and self.knobs.drafter == "ngram":
            return self.drafter
        if self.history is None:
            return trained
        return self._policy_drafter(trained, SuffixDrafter(self.history.max_tokens))

    def _initial_drafter(self) -> drafters.Trainable:
        """The resumed run's drafter, real.run.drafting.starting_checkpoint's, or one warmed up by rank 0; the same
        on every rank."""
        if self.ckpt:
            return drafters.load(self.ckpt / "drafter.pt", self.target)
        given = given_drafter(self.config, self.target)
        if given is not None:
            return given
        if self.rank == 0:
            t = time.perf_counter()
            drafter, pairs = warmed_up_drafter(self.config, self.target, self.task, self.sampling)
            drafter.save(self.out / "drafter_init.pt")
            self.recorder.extra_summary["drafter_warmup_s"] = time.perf_counter() - t
            self.progress.note(f"drafter warmed up in {time.perf_counter() - t:.1f} s")
        else:  # rank 0's, once broadcast
            drafter, pairs = drafters.kind("eagle").for_target(self.target, seed=self.config.seed), None
        for p in drafter.parameters():
            dist.broadcast(p.data, src=0)
        if self.trains:  # the warm-up responses are the buffer's first data (step -1), so early spot training
            # on a worker that served few responses does not fit just those
            shared = [[(t, f.cpu()) for t, f in pairs] if self.rank == 0 else None]
            dist.broadcast_object_list(shared, src=0)
            self.spot.buffer.add(-1, shared[0])
        return drafter.eval()

    def _starting_drafter(self) -> drafters.Trainable:
        """The drafter the run started from, as it was then (a resumed run's own start)."""
        start = starting_checkpoint(self.config) or self.out / "drafter_init.pt"
        if not self.ckpt and start == self.out / "drafter_init.pt":  # warmed up just now: the current one
            copy = drafters.kind("eagle").for_target(self.target, draft_vocab=self.trained.draft_vocab)
            copy.load_state_dict(self.trained.state_dict())
            return copy.eval()
        return drafters.load(start, self.target)

    def step(self, step: int) -> None:
        cfg = self.config
        speed = machine_speed(cfg, self.target, self.sampling, self.world)
        probe = drafter_accepted(cfg, self.target, self.task, self._probed(self.trained), self.rank, self.world)
        static = drafter_accepted(cfg, self.target, self.task, self._probed(self.static_drafter)
                                  if self.static_drafter is not None else None, self.rank, self.world)
        dist.barrier()
        t0 = [self.clock()]
        dist.broadcast_object_list(t0, src=0)
        t0 = t0[0]
        if self.dispatcher:
            self.dispatcher.start(step, t0)
        share = self.rows.share(step)
        engine = self._engine(step)
        drafted = self._drafted_rows()
        if self.control is not None:
            self.control.begin_rollout()  # the step's owner begins the rollout, as the simulator's policy does
        answers = [self.answers[(step, pid, j)] for pid, j in share.rows] if self.answers is not None else None
        poll = (lambda: self.dispatcher.poll(throttled=True)) if self.dispatcher and self.trains else None
        tail = TailMove(self.migration, self.store, step, self.rank, self.world, cfg.prompts * cfg.group,
                        lambda: self.clock() - t0) if self.migration else None
        stop = share.stop(engine) if share.stop else _tail_stop(tail, engine, len(share.prompts)) if tail else None
        ro = rollout(engine, share.prompts, self.clock, self.control, max_running=cfg.max_running, start=t0,
                     answers=answers, budgets=share.budgets, stop=stop, poll=poll)
        parts = [(share, engine, ro)]  # each rollout this worker ran: (its Share, its engine, its Rollout)
        if tail is not None:
            parts += self._move_tail(step, tail, share, engine, ro, poll)
        done = max((r.calls[-1].t_end for _, _, r in parts if r.calls), default=t0)
        phases, early, mine = [], None, None
        if tail is not None and tail.gone_early and tail.outcome():  # idle until the move releases it
            phases.append(("idle", done, done := max(done, t0 + tail.move["at"])))
        if tail is not None and tail.released and self.migration.release == "next-stage":
            # the reward stage's log-prob forwards of the responses this worker finished, before the barrier
            mine = self.rows.samples(parts)
            early = self.grpo.old_logprobs([x.prompt for x in mine], [x.tokens for x in mine])
            phases.append(("reward", done, done := self.clock()))
        self.store.set(f"{step}/done/{self.rank}", repr(done))
        finished = [e.finished[i] for _, e, r in parts for i in r.ids if i in e.finished]
        samples = [(torch.tensor(f.prompt + f.tokens), f.features.cpu()) for f in finished] if self.trains else []
        if self.spot:
            self.spot.buffer.add(step, samples)
        idle, batches = self._idle_or_train(step, done)
        phases += idle

        t = phases[-1][2]
        trained, adv, columns = self.rows.trained(step, parts, t0, mine)
        if tail is not None:
            columns = {**columns, **tail.columns()}
        prompts, responses = [x.prompt for x in trained], [x.tokens for x in trained]
        old, ref = early if early is not None else self.grpo.old_logprobs(prompts, responses, adv)
        phases.append(("reward", t, t := self.clock()))
        stats = self.grpo.update(prompts, responses, adv, old, ref,
                                 [x.generated for x in trained] if self.tools is not None else None)
        for drafter in (self.drafter, self.static_drafter):
            if drafter is not None:
                drafter.target_updated()  # e.g. a reduced head copies rows of the lm_head the update just moved
        phases.append(("train", t, t := self.clock()))
        if self.spot:
            self.spot.sync(batches)
            self.spot.share(step, samples)
        self._share_history(finished)
        dist.barrier()
        phases.append(("weight_sync", t, self.clock()))

        report = WorkerStep(self.rank, [c for _, _, r in parts for c in r.calls], phases, [
            {"prompt_id": x.prompt_id, "sample": x.sample, "prompt_len": len(x.prompt),
             "response_len": sum(x.generated), "reward": x.reward,
             "finished": bool(x.tokens[-1] in engine.eos), "admitted_at": x.admitted_at,
             "finished_at": x.finished_at, "tokens": x.tokens,
             **({"turns": turn_records(x.turns, ro.iteration_end)} if self.tools is not None else {})}
            for x in trained], done, batches,
            dict(zip(("history_rows", "trained_rows"), np.subtract(self._drafted_rows(), drafted).tolist()))
            if drafted else {})
        reports = [None] * self.world if self.rank == 0 else None
        dist.gather_object(report, reports, dst=0)
        self._summarise_switches()
        if self.rank == 0:
            row = self.recorder.add(step, t0, reports, {"drafter_accepted": probe, "static_drafter_accepted": static,
                                                        "speed_probe_s": speed,
                                                        "grpo_loss": stats["loss"], "grpo_clip_frac": stats["clip_frac"],
                                                        **columns})
            self.recorder.save(self.out)
        self._checkpoint(step)
        if self.progress:
            self.progress.step(step, row)

    def _engine(self, step: int) -> Engine:
        cfg = self.config
        return Engine(self.target, self.drafter, sampling=self.sampling, max_new_tokens=cfg.max_new_tokens,
                      seed=mixed_seed(cfg.seed, step, self.rank), collect_features=self.trains, tools=self.tools,
                      sandbox=self.sandbox, max_tool_calls=getattr(self.task, "max_tool_calls", 0))

    def _move_tail(self, step: int, tail: TailMove, share: Share, engine: Engine, ro, poll) -> list:
        """migrate, after this worker's rollout stopped for the move or ran out of rows (real/run/migration.py): hand
        its unfinished rows over, and run anew, on a fresh engine, those it is given as a target: [(Share, engine,
        Rollout)] of that rollout, or none."""
        target = tail.target or (tail.move is None and tail.leave())
        left = engine.in_progress()
        tail.publish([[pid, j, list(left.get(r, [])), ro.admitted_at.get(r)]
                      for r, (pid, j) in enumerate(share.rows) if r not in engine.finished])
        if not target:
            return []
        rows = tail.assigned()
        problems = step_problems(self.task, self.config.seed, step, self.config.prompts, self.config.repeat_prompts)
        prompts = [self.task.prompt_ids(problems[pid]) + tokens for pid, _, tokens, _ in rows]
        moved = Share([(pid, j) for pid, j, _, _ in rows], [problems[pid] for pid, *_ in rows], prompts,
                      [self.config.max_new_tokens - len(tokens) for _, _, tokens, _ in rows],
                      carried=[tokens for _, _, tokens, _ in rows],
                      admitted=[at for *_, at in rows])
        again = self._engine(step)
        start = ro.calls[-1].t_end if ro.calls else self.clock()
        return [(moved, again, rollout(again, moved.prompts, self.clock, self.control, start=start,
                                       max_running=self.config.max_running, budgets=moved.budgets, poll=poll))]

    def _idle_or_train(self, step: int, done: float) -> tuple[list[tuple[str, float, float]], int]:
        """From `done` until the coordinator says stop: idle, or training the drafter once told to."""
        stop = f"{step}/stop"
        poll = self.dispatcher.poll if self.dispatcher else (lambda: None)
        if self.spot:
            rng = np.random.default_rng(mixed_seed(self.config.seed, step, self.rank, 7))
            began, batches = self.spot.train(step, f"{step}/train/{self.rank}", stop, poll, self.clock, rng)
        else:
            began, batches = None, 0
            while not (poll() or self.store.check([stop])):
                time.sleep(0.002)
        end = self.clock()
        phases = [("idle", done, end)] if began is None else [("idle", done, began), ("drafter_train", began, end)]
        return [p for p in phases if p[2] > p[1]] or [("idle", done, done)], batches

    def _summarise_switches(self) -> None:
        """sd "learned" (tlt-auto): what every engine's switch has learned so far, into the run's summary."""
        if self.knobs is None or self.knobs.sd != "learned":
            return
        switches = [None] * self.world if self.rank == 0 else None
        dist.gather_object(self.control.switch, switches, dst=0)
        if self.rank == 0:
            self.recorder.extra_summary.update(learned_summary(switches))

    def _drafted_rows(self) -> tuple[int, int] | None:
        """A hybrid's rows drafted so far from the history and by the trained drafter (None: not a hybrid)."""
        d = self.drafter
        return (d.history_rows, d.trained_rows) if isinstance(d, HybridDrafter) else None

    def _share_history(self, finished: list) -> None:
        """Add every other worker's responses of this step to this worker's history (a prompt that comes back in
        a later step may land on another worker: the history is the whole rollout's, as DAS's is)."""
        if self.history is None or self.world == 1:
            return
        everyone = [None] * self.world
        dist.all_gather_object(everyone, [(f.prompt, f.tokens) for f in finished])
        for rank, responses in enumerate(everyone):
            if rank != self.rank:
                for prompt, tokens in responses:
                    self.history.remember(prompt, tokens)

    def _checkpoint(self, step: int) -> None:
        """Write RUN_DIR/checkpoint for `step` (real.run.checkpoint): every rank's policy state as plain data."""
        state = {"control": self.control.state_dict() if self.control else None,
                 "buffer": self.spot.buffer.state_dict() if self.spot else None,
                 "drafter_opt": (self.spot.opt.state_dict() if self.spot.opt else self.spot.opt_state)
                 if self.spot else None,
                 "history": self.history.state_dict() if self.history else None,
                 **self.rows.state_dict()}
        checkpoint.write(self.out, self.rank, step, state, self._save_shared if self.rank == 0 else None)

    def _save_shared(self, tmp: Path) -> None:
        """Rank 0's part of the checkpoint: the target, the task, the drafter, the GRPO optimizer, the trainer."""
        self.grpo.save_target(tmp / "target")
        self.task.save(tmp / "target")
        if self.trained is not None:
            self.trained.save(tmp / "drafter.pt")
        torch.save(self.grpo.optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(self.dispatcher.trainer.state_dict(), tmp / "trainer.pt")
