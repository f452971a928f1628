"""`tltsim real run`: an RL run of a policy for real, on N worker processes, recorded in the simulator's schema.

    launch(config, RUN_DIR) --spawn / torchrun--> N workers (torch.distributed: gloo on CPU, NCCL on GPU)

Every step, on every worker (worker = rank = one rollout engine):
1. rollout: the step's seeded prompts (P prompts x G samples, the same on every rank) are split
   into contiguous chunks of prompt groups, as verl does; each worker generates its chunk on an
   `Engine` driven by the simulator's `SDSwitch` and strategy tuner (real/adaptive.py).
2. spot training (policies with an adaptive drafter): a worker that finishes reports "done"
   through the process group's store; the simulator's `SpotTrainer`, on rank 0, answers with
   "train" and, when every worker is done, "stop". A training worker trains its drafter copy
   between checks, on what its `DataBuffer` selects from the (tokens, target features) its own
   rollouts kept, and saves the trainable part atomically when stopped (RUN_DIR/spot/rank<r>.pt).
3. reward (rewards + the old log-prob forward), train (GRPO, gradients all-reduced:
   real/grpo.py), weight sync (the drafters that trained are averaged, weighted by their
   batches, so every engine starts the next step with the same drafter).
Between steps rank 0 writes the records (real/record.py) and a checkpoint; `resume` continues
from it. Randomness: each step's prompts, sampling and drafter batches come from generators
seeded by (seed, step, rank); the tuners carry their own generators in the checkpoint.

Policies: verl (no speculation), tlt, static-sd, sd-always, with the simulator's knobs
(tltsim/policies/tlt.py). tlt-base is not offered: the engine has no model-free drafter.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers

from real.adaptive import rollout
from real.drafter import Drafter
from real.evaluate import accepted_tokens
from real.generate import Engine, generate
from real.grpo import GRPO, GRPOConfig, all_reduce_tensors, group_advantages
from real.grpo import free_port as _free_port
from real.models import SHIPPED_TARGET, load_target
from real.profile import speed_probe
from real.record import Recorder, WorkerStep
from real.sampling import SamplingParams
from real.task import GcdTask
from tltsim.errors import TltsimError
from tltsim.io import write_json
from tltsim.policies.tlt import VARIANTS, TLTKnobs
from tltsim.policy import DataBuffer, SDSwitch, SpeculationGuard, SpotTrainer, make_tuner
from tltsim.policy.strategy import parse_arms
from tltsim.trace import TraceMeta

POLICIES = ("verl", "tlt", "static-sd", "sd-always")
# TLTKnobs fields that only the simulator's models use; setting one for a real run is an error
SIM_ONLY_KNOBS = ("dedicated_gpus", "drift", "tau_samples", "q_start", "q_max", "chunk_iters", "drafter_batch",
                  "load_s")
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
CHECKPOINT = "checkpoint"


@dataclass(frozen=True)
class RunConfig:
    policy: str = "tlt"  # one of POLICIES
    workers: int = 2  # worker processes (one rollout engine each)
    steps: int = 3  # RL steps in all (a resumed run may raise it)
    model: str = str(SHIPPED_TARGET)  # save_pretrained directory (with the task file) or a preset (random weights)
    drafter: str | None = None  # drafter checkpoint to start from; None: warm one up on the target's own outputs
    device: str = "cpu"  # cpu or cuda (rank r uses cuda:r mod device count; NCCL when every rank has its own GPU)
    dtype: str = "float32"  # target and drafter dtype (float64 makes greedy ties impossible in tests)
    prompts: int = 8  # prompts per step
    group: int = 4  # samples per prompt (GRPO group size)
    seed: int = 0  # prompts, sampling, tuners, drafter init and batches
    greedy: bool = False  # argmax decoding (every sample of a group is then the same)
    temperature: float = 1.0  # sampling temperature when not greedy
    max_new_tokens: int = 128  # response cap
    max_running: int | None = None  # rows an engine runs at once (None: its whole share)
    knobs: dict = field(default_factory=dict)  # TLTKnobs overrides (see tltsim/policies/tlt.py)
    grpo: GRPOConfig = GRPOConfig()  # the target's update
    warmup_prompts: int = 32  # drafter warm-up (no --drafter): responses of the initial target to train on
    warmup_steps: int = 40  # ... and AdamW steps on them (short: the run's own training should matter)
    drafter_batch: int = 8  # sequences per drafter training batch (warm-up and spot training)
    drafter_lr: float = 1e-3  # drafter AdamW learning rate
    probe: int = 8  # held-out prompts the drafter's accepted length is measured on before each step (0: off)
    speed_probe: int = 8  # plain decode iterations that time the machine before each step (0: off; validate --speed)

    def validate(self) -> "RunConfig":
        if self.policy not in POLICIES:
            extra = " (tlt-base needs a model-free drafter, which the real engine does not have)" \
                if self.policy == "tlt-base" else ""
            raise TltsimError(f"policy {self.policy!r}: real runs offer {', '.join(POLICIES)}{extra}")
        for name in ("workers", "steps", "prompts", "group", "max_new_tokens", "drafter_batch"):
            if getattr(self, name) < 1:
                raise TltsimError(f"{name}={getattr(self, name)}: must be >= 1")
        for name in ("probe", "speed_probe"):
            if getattr(self, name) < 0:
                raise TltsimError(f"{name}={getattr(self, name)}: must be >= 0 (0 turns it off)")
        if self.prompts < self.workers:
            raise TltsimError(f"prompts={self.prompts} < workers={self.workers}: every worker needs a prompt group")
        if self.device not in ("cpu", "cuda"):
            raise TltsimError(f"device {self.device!r}: use cpu or cuda")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise TltsimError("device cuda: no CUDA device is visible; use --device cpu")
        if self.dtype not in DTYPES:
            raise TltsimError(f"dtype {self.dtype!r}: use one of {', '.join(DTYPES)}")
        if self.max_running is not None and self.max_running < 1:
            raise TltsimError(f"max_running={self.max_running}: must be >= 1")
        SamplingParams(self.greedy, self.temperature)
        self.tlt_knobs()
        return self

    def tlt_knobs(self) -> TLTKnobs | None:
        """The policy's knobs (None for verl); TltsimError for unknown or simulator-only ones."""
        if self.policy == "verl":
            if self.knobs:
                raise TltsimError(f"policy 'verl' has no knobs; drop {', '.join(sorted(self.knobs))}")
            return None
        names = {f.name for f in fields(TLTKnobs)}
        unknown = sorted(set(self.knobs) - names)
        if unknown:
            raise TltsimError(f"policy {self.policy!r}: unknown knob(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(names - set(SIM_ONLY_KNOBS)))}")
        sim_only = sorted(set(self.knobs) & set(SIM_ONLY_KNOBS))
        if sim_only:
            raise TltsimError(f"knob(s) {', '.join(sim_only)} only shape the simulator's models; a real run "
                              "measures them instead (drafter_batch: RunConfig.drafter_batch): drop them")
        k = TLTKnobs(**{**VARIANTS[self.policy], **self.knobs}).validate(self.policy)
        if k.drafter == "ngram":
            raise TltsimError(f"policy {self.policy!r}: drafter 'ngram' is not available in the real engine")
        if k.tuner == "oracle":
            raise TltsimError("tuner 'oracle' needs the simulator's models; use beg, egreedy, ucb or fixed")
        return replace(k, arms=tuple(str(a) for a in parse_arms(k.arms)))

    def to_dict(self) -> dict:
        """What config.json holds (knobs resolved in full)."""
        d = asdict(self)
        k = self.tlt_knobs()
        d["knobs"] = {n: v for n, v in asdict(k).items() if n not in SIM_ONLY_KNOBS} if k else {}
        return d


def launch(config: RunConfig, out: str | Path, resume: bool = False, command: str = "") -> Path:
    """Run `config` into RUN_DIR `out` on `config.workers` processes; returns `out`.

    Under torchrun (RANK and WORLD_SIZE set) this process is one of the workers; otherwise the
    workers are spawned here. Raises TltsimError for bad input, before any worker starts.
    """
    config = config.validate()
    out = Path(out)
    _check_run_dir(config, out, resume)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        if int(os.environ["WORLD_SIZE"]) != config.workers:
            raise TltsimError(f"--workers {config.workers} but torchrun started {os.environ['WORLD_SIZE']} processes")
        _worker(int(os.environ["RANK"]), config, out, resume, command)
        return out
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(_free_port())
    try:
        mp.spawn(_worker, args=(config, out, resume, command), nprocs=config.workers, join=True)
    except mp.ProcessRaisedException as e:
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        raise TltsimError(f"a worker failed: {lines[-1] if lines else e}") from None
    except mp.ProcessExitedException as e:
        raise TltsimError(f"a worker exited: {e}") from None
    return out


def _check_run_dir(config: RunConfig, out: Path, resume: bool) -> None:
    aside = out / f".{CHECKPOINT}.old"  # a kill inside _replace_dir leaves the last checkpoint here
    if aside.exists() and not (out / CHECKPOINT).exists():
        os.replace(aside, out / CHECKPOINT)
    has_run = (out / "summary.json").exists() or (out / CHECKPOINT).exists()
    if not resume and has_run:
        raise TltsimError(f"{out}: holds a run already; pass --resume to continue it or choose another -o")
    if resume:
        if not (out / CHECKPOINT / "state.json").exists():
            raise TltsimError(f"{out}: no checkpoint to resume from; run without --resume")
        old = json.loads((out / "config.json").read_text())
        new = json.loads(json.dumps(config.to_dict(), default=str))
        differ = sorted(k for k in set(old) | set(new) if k not in ("steps", "command") and old.get(k) != new.get(k))
        if differ:
            raise TltsimError(f"{out}: --resume with a different config ({', '.join(differ)}); "
                              "repeat the original command's options (only --steps may change)")


def _worker(rank: int, config: RunConfig, out: Path, resume: bool, command: str) -> None:
    transformers.utils.logging.disable_progress_bar()  # a bar per checkpoint load and save, every step
    backend = "gloo"
    if config.device == "cpu":
        torch.set_num_threads(1)
    else:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        if torch.cuda.device_count() >= config.workers:
            backend = "nccl"  # NCCL needs one GPU per rank; several workers sharing a GPU talk through gloo
    dist.init_process_group(backend, rank=rank, world_size=config.workers)
    try:
        Worker(rank, config, out, resume, command).run()
    finally:
        dist.destroy_process_group()


def all_gather_pairs(pairs: list[tuple[torch.Tensor, torch.Tensor]], hidden: int, dtype, device) -> list[list]:
    """Every rank's (tokens [n], features [n - 1, hidden]) pairs, on the CPU, rank by rank, through two tensor
    all-gathers: the sizes, then one flat buffer a rank (lengths, tokens and features, in float: token ids and
    lengths below 2**24 are exact there, which every vocabulary is), padded to the largest. A pickled
    all_gather_object of the pairs took 4x as long (benchmarks/results/bench_share.txt)."""
    world = dist.get_world_size()
    wire = torch.float64 if dtype == torch.float64 else torch.float32  # what every backend all-gathers

    def gather(t: torch.Tensor) -> list[torch.Tensor]:
        out = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(out, t)
        return [o.cpu() for o in out]

    lengths = torch.tensor([len(t) for t, _ in pairs], dtype=wire)
    flat = torch.cat([lengths] + [t.to(wire) for t, _ in pairs] + [f.to(wire).reshape(-1) for _, f in pairs])
    sizes = [sz.tolist() for sz in gather(torch.tensor([len(pairs), len(flat)], device=device))]
    most = max(1, *(n for _, n in sizes))  # every rank's buffer padded to this (never empty)
    everyone = []
    for (n, _), buf in zip(sizes, gather(torch.cat([flat, flat.new_zeros(most - len(flat))]).to(device))):
        lens = buf[:n].long().tolist()
        toks = buf[n: n + sum(lens)].long().split(lens)
        feats = buf[n + sum(lens):][: (sum(lens) - n) * hidden].view(-1, hidden).to(dtype)
        feats = feats.split([m - 1 for m in lens])
        everyone.append(list(zip(toks, feats)))
    return everyone


def _seed(*parts: int) -> int:
    """A 63-bit seed mixed from integers."""
    return int(np.random.SeedSequence(list(parts)).generate_state(2, np.uint64)[0] >> np.uint64(1))


class Coordinator:
    """Rank 0's side of spot training: feeds workers' "done" reports to the SpotTrainer, answers through the store."""

    poll_s = 0.01  # during a rollout, look at the store at most this often (2 workers: 0.12 ms a look on
    # the 2-core CI machine, 4-5% of a decode iteration of the default target)

    def __init__(self, trainer: SpotTrainer, store, clock):
        self.trainer = trainer
        self.store = store
        self.clock = clock
        self.t = -np.inf  # latest time fed to the trainer (it must not go backwards)
        self._next_poll = -np.inf  # clock time before which a throttled poll returns at once

    def start(self, step: int, t: float) -> None:
        self.step, self.pending, self.t = step, set(range(self.trainer.num_workers)), max(self.t, t)
        self._next_poll = -np.inf
        self.trainer.start_rollout(step, self.t)

    def poll(self, throttled: bool = False) -> None:
        """Take in every new "done" (in time order); start the trainers the SpotTrainer names; stop when all are
        done. `throttled` (the rollout loop's calls): at most once every `poll_s`."""
        now = self.clock()
        if not self.pending or (throttled and now < self._next_poll):
            return
        self._next_poll = now + self.poll_s
        keys = {w: f"{self.step}/done/{w}" for w in sorted(self.pending)}
        reports = [(float(self.store.get(k)), w) for w, k in keys.items() if self.store.check([k])]
        for t, w in sorted(reports):
            self.pending.discard(w)
            self.t = max(self.t, t)
            started = self.trainer.worker_done(w, self.t)
            for s in started if self.pending else []:
                self.store.set(f"{self.step}/train/{s}", "1")
        if not self.pending:
            self.t = max(self.t, self.clock())
            self.trainer.preempt(self.t)
            self.store.set(f"{self.step}/stop", "1")


class SampleBuffer:
    """A worker's drafter training data: (tokens, features) pairs by step (its own at once, the other workers'
    at the end of the step), selected as its DataBuffer says."""

    def __init__(self, last_n_steps: int, keep_long_prev: float):
        self.index = DataBuffer(last_n_steps, keep_long_prev)
        self.pairs: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def add(self, step: int, pairs) -> None:
        self.index.add(step, [len(t) for t, _ in pairs])
        self.pairs.setdefault(step, []).extend(pairs)
        for old in [s for s in self.pairs if s < step - self.index.last_n_steps]:
            del self.pairs[old]

    def select(self, step: int) -> list:
        """All pairs of the window's steps, plus the longest of the step before, as many as the DataBuffer keeps."""
        n = self.index.last_n_steps
        window = [p for s in range(step - n + 1, step + 1) for p in self.pairs.get(s, [])]
        keep = self.index.samples(step).num_samples - len(window)
        before = sorted(self.pairs.get(step - n, []), key=lambda p: len(p[0]))
        return window + (before[len(before) - keep:] if keep > 0 else [])


class Worker:
    """One rank's state across the run (model, drafter, policy objects) and its step loop."""

    def __init__(self, rank: int, config: RunConfig, out: Path, resume: bool, command: str):
        self.rank, self.world, self.config, self.out, self.command = rank, config.workers, config, out, command
        self.device = torch.device("cpu" if config.device == "cpu" else f"cuda:{torch.cuda.current_device()}")
        self.dtype = DTYPES[config.dtype]
        self.store = dist.distributed_c10d._get_default_store()
        self.knobs = config.tlt_knobs()
        self.ckpt = out / CHECKPOINT if resume else None
        model_dir = Path(config.model)
        self.task = GcdTask.load(model_dir) if (model_dir / "config.json").is_file() else GcdTask()
        self.target = self._load(self.ckpt / "target" if self.ckpt else config.model)
        reference = self._load(config.model) if config.grpo.kl > 0 else None
        self.grpo = GRPO(self.target, config.grpo, reference)
        self.sampling = SamplingParams(config.greedy, config.temperature)
        k = self.knobs
        self.trains = k is not None and k.spot
        self.switch = SDSwitch(k.sd, k.threshold, k.patience) if k else None
        self.tuner = make_tuner(k.tuner, k.arms, seed=config.seed * 1000 + rank,
                                **({"eps": k.eps} if k.tuner in ("beg", "egreedy") else {})) if k else None
        self.buffer = SampleBuffer(k.buffer_steps, k.keep_long_prev) if self.trains else None
        self.guard = SpeculationGuard() if k and k.guard else None
        self.drafter = None
        self.drafter_opt, self.drafter_opt_state = None, None  # spot training's optimizer, made when first needed
        self.first_step = 0
        if self.ckpt:
            state = torch.load(self.ckpt / f"rank{rank}.pt", map_location=self.device, weights_only=False)
            self.tuner, self.buffer, self.drafter_opt_state = state["tuner"], state["buffer"], state["drafter_opt"]
            self.guard = state.get("guard", self.guard)  # checkpoints from before the guard have none
            self.grpo.optimizer.load_state_dict(torch.load(self.ckpt / "optimizer.pt", map_location=self.device))
            self.first_step = json.loads((self.ckpt / "state.json").read_text())["step"] + 1
        # one clock for every worker: rank 0's time.time() origin, continuing after a resumed run's last step
        self.recorder = self._recorder() if rank == 0 else None
        origin = [time.time() - (self.recorder.clock_end if self.recorder else 0.0)]
        dist.broadcast_object_list(origin, src=0)
        self.origin = origin[0]
        self.coordinator = Coordinator(self._trainer(), self.store, self.clock) if rank == 0 else None

    def clock(self) -> float:
        return time.time() - self.origin

    def _load(self, where):
        return load_target(where, self.device, seed=self.config.seed).to(self.dtype)

    def _recorder(self) -> Recorder:
        cfg = self.config
        meta = TraceMeta(source="real", model=cfg.model, max_response_len=cfg.max_new_tokens, group_size=cfg.group,
                         provenance=f"tltsim real run ({cfg.policy}, {cfg.workers} workers, {cfg.device}): "
                                    f"{self.command}")
        config = {**cfg.to_dict(), "command": self.command}
        if self.ckpt:
            return Recorder.resume(self.out, config, meta, self.first_step - 1)
        return Recorder(config, meta)

    def _trainer(self) -> SpotTrainer:
        if self.ckpt:
            with open(self.ckpt / "trainer.pkl", "rb") as f:
                return pickle.load(f)
        k = self.knobs
        return SpotTrainer(self.world, min_idle=min(k.min_idle, self.world) if k else 1,
                           cadence=k.cadence if k else 1, enabled=self.trains)

    # --- the run ---------------------------------------------------------------------------------
    def run(self) -> None:
        if self.knobs is not None:
            self.drafter = self._initial_drafter()
        for step in range(self.first_step, self.config.steps):
            self.step(step)

    def _initial_drafter(self) -> Drafter:
        """The resumed run's drafter, --drafter, or one warmed up by rank 0; the same on every rank."""
        cfg = self.config
        if self.ckpt:
            return Drafter.load(self.ckpt / "drafter.pt", self.target)
        if cfg.drafter:
            return Drafter.load(cfg.drafter, self.target)
        drafter = Drafter.for_target(self.target, seed=cfg.seed)
        pairs = None
        if self.rank == 0:
            t = time.perf_counter()
            problems = self.task.sample(np.random.default_rng(_seed(cfg.seed, 998)), cfg.warmup_prompts)
            gen = generate(self.target, [self.task.prompt_ids(p) for p in problems], greedy=cfg.greedy,
                           temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
                           collect_features=True)
            pairs = [(torch.tensor(f.prompt + f.tokens), f.features) for f in gen.finished]
            drafter.fit(pairs, cfg.warmup_steps, cfg.drafter_batch, cfg.drafter_lr, seed=cfg.seed)
            drafter.save(self.out / "drafter_init.pt")
            self.recorder.extra_summary["drafter_warmup_s"] = time.perf_counter() - t
        for p in drafter.parameters():
            dist.broadcast(p.data, src=0)
        if self.trains:  # the warm-up responses are the buffer's first data (step -1), so early spot training
            # on a worker that served few responses does not fit just those
            shared = [[(t, f.cpu()) for t, f in pairs] if self.rank == 0 else None]
            dist.broadcast_object_list(shared, src=0)
            self.buffer.add(-1, shared[0])
        return drafter.eval()

    def step(self, step: int) -> None:
        cfg = self.config
        speed = self._speed()
        probe = self._probe()
        dist.barrier()
        t0 = [self.clock()]
        dist.broadcast_object_list(t0, src=0)
        t0 = t0[0]
        if self.coordinator:
            self.coordinator.start(step, t0)
        problems = self.task.sample(np.random.default_rng(_seed(cfg.seed, step)), cfg.prompts)
        mine = np.array_split(np.arange(cfg.prompts), self.world)[self.rank].tolist()
        rows = [(pid, j) for pid in mine for j in range(cfg.group)]
        prompts = [self.task.prompt_ids(problems[pid]) for pid, _ in rows]
        engine = Engine(self.target, self.drafter, sampling=self.sampling, max_new_tokens=cfg.max_new_tokens,
                        seed=_seed(cfg.seed, step, self.rank), collect_features=self.trains)
        ro = rollout(engine, prompts, self.clock, self.switch, self.tuner, self.guard, max_running=cfg.max_running, start=t0,
                     poll=(lambda: self.coordinator.poll(throttled=True)) if self.coordinator and self.trains else None)
        done = ro.steps[-1].t_end if ro.steps else t0
        self.store.set(f"{step}/done/{self.rank}", repr(done))
        finished = [engine.finished[i] for i in ro.ids]
        samples = [(torch.tensor(f.prompt + f.tokens), f.features.cpu()) for f in finished] if self.trains else []
        if self.trains:
            self.buffer.add(step, samples)
        phases, batches = self._idle_or_train(step, done)

        t = phases[-1][2]
        rewards = [self.task.reward(problems[pid], f.tokens) for (pid, _), f in zip(rows, finished)]
        responses = [f.tokens for f in finished]
        old, ref = self.grpo.old_logprobs(prompts, responses)
        phases.append(("reward", t, t := self.clock()))
        adv = group_advantages(np.reshape(rewards, (len(mine), cfg.group))).ravel() if rows else np.zeros(0)
        stats = self.grpo.update(prompts, responses, adv, old, ref)
        phases.append(("train", t, t := self.clock()))
        self._sync_drafter(batches)
        self._share_samples(step, samples)
        dist.barrier()
        phases.append(("weight_sync", t, self.clock()))

        report = WorkerStep(self.rank, ro.steps, phases, [
            {"prompt_id": pid, "sample": j, "prompt_len": len(f.prompt), "response_len": len(f.tokens),
             "reward": r, "finished": bool(f.tokens[-1] in engine.eos), "admitted_at": ro.admitted_at[i],
             "finished_at": ro.finished_at[i]}
            for (pid, j), f, r, i in zip(rows, finished, rewards, ro.ids)], done, batches)
        reports = [None] * self.world if self.rank == 0 else None
        dist.gather_object(report, reports, dst=0)
        if self.rank == 0:
            self.recorder.add(step, t0, reports, {"drafter_accepted": probe, "speed_probe_s": speed,
                                                  "grpo_loss": stats["loss"], "grpo_clip_frac": stats["clip_frac"]})
            self.recorder.save(self.out)
        self._checkpoint(step)

    def _idle_or_train(self, step: int, done: float) -> tuple[list[tuple[str, float, float]], int]:
        """From `done` until the coordinator says stop: idle, or training the drafter once told to."""
        cfg = self.config
        stop, go = f"{step}/stop", f"{step}/train/{self.rank}"
        phases, t, batches, pairs = [], done, 0, None
        while True:
            if self.coordinator:
                self.coordinator.poll()
            if self.store.check([stop]):
                break
            if pairs is None and self.store.check([go]):
                phases.append(("idle", t, t := self.clock()))
                pairs = self.buffer.select(step)
                pairs = [p for p in pairs if len(p[0]) >= 2]
                rng = np.random.default_rng(_seed(cfg.seed, step, self.rank, 7))
                optimizer = self._drafter_optimizer()
            if pairs:
                batch = rng.choice(len(pairs), size=min(cfg.drafter_batch, len(pairs)), replace=False)
                self.drafter.train_step([pairs[i] for i in batch], optimizer)
                batches += 1
            else:
                time.sleep(0.002)
        if pairs is None:
            phases.append(("idle", t, self.clock()))
        else:
            self.drafter.eval()
            if batches:
                self.drafter.save(self.out / "spot" / f"rank{self.rank}.pt")
            phases.append(("drafter_train", t, self.clock()))
        return [p for p in phases if p[2] > p[1]] or [("idle", done, done)], batches

    def _drafter_optimizer(self) -> torch.optim.Optimizer:
        """This worker's AdamW over its drafter copy, kept across steps (the weights it steps are
        averaged in place at every weight sync; its moments stay its own)."""
        if self.drafter_opt is None:
            self.drafter_opt = torch.optim.AdamW(self.drafter.parameters(), lr=self.config.drafter_lr)
            if self.drafter_opt_state is not None:
                self.drafter_opt.load_state_dict(self.drafter_opt_state)
        return self.drafter_opt

    def _share_samples(self, step: int, samples: list) -> None:
        """Add every other worker's (tokens, features) of this step to this worker's buffer: the drafter's
        data buffer holds the whole step's responses, as TLT's does (so the next steps' spot training
        on a worker that served few responses does not fit just those)."""
        if not self.trains or self.world == 1:
            return
        for rank, pairs in enumerate(all_gather_pairs(samples, self.target.config.hidden_size, self.dtype,
                                                      self.device)):
            if rank != self.rank and pairs:
                self.buffer.add(step, pairs)

    def _sync_drafter(self, batches: int) -> None:
        """Average the drafters that trained (weighted by their batches) into every rank's copy."""
        if not self.trains:
            return
        weight = torch.tensor([float(batches)], dtype=torch.float64, device=self.device)
        dist.all_reduce(weight)
        if weight.item() == 0:
            return
        params = [p.data for p in self.drafter.parameters()]
        for p in params:
            p.mul_(batches)
        all_reduce_tensors(params)
        for p in params:
            p.div_(weight.item())

    def _speed(self) -> float:
        """Seconds of the speed probe's plain decode iteration (real.profile.speed_probe), every rank at once as
        they roll out, averaged over the ranks; NaN when off."""
        n = self.config.speed_probe
        if n == 0:
            return float("nan")
        seconds = speed_probe(self.target, n, _seed(self.config.seed, 998), self.sampling)
        total = torch.tensor([seconds], dtype=torch.float64, device=self.device)
        all_reduce_tensors([total])
        return float(total[0]) / self.world

    def _probe(self) -> float:
        """Mean accepted length (bonus included) of the current drafter with the current target, greedy,
        on fixed held-out prompts with a chain of DEFAULT_STRATEGY; NaN without a drafter. Every rank
        decodes its share of the prompts at once (none waits at the barrier while another probes, and more
        workers probe faster) and the counts are summed: a greedy row's tokens do not depend on its batch
        mates (but for floating-point near-ties), so the mean is the one a single process would measure."""
        cfg = self.config
        if self.drafter is None or cfg.probe == 0:
            return float("nan")
        problems = self.task.sample(np.random.default_rng(_seed(cfg.seed, 999)), cfg.probe, split="test")
        mine = [problems[i] for i in np.array_split(np.arange(len(problems)), self.world)[self.rank]]
        tokens = accepted_tokens(self.target, self.drafter, self.task, mine, max_new_tokens=cfg.max_new_tokens)
        total = torch.tensor([tokens.sum(), len(tokens)], dtype=torch.float64, device=self.device)
        all_reduce_tensors([total])
        return float(total[0] / total[1])

    def _checkpoint(self, step: int) -> None:
        """Write RUN_DIR/checkpoint for `step`: every rank's state into a temp dir, which then replaces it."""
        tmp = self.out / f".{CHECKPOINT}.tmp"
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        dist.barrier()
        torch.save({"tuner": self.tuner, "guard": self.guard, "buffer": self.buffer,
                    "drafter_opt": self.drafter_opt.state_dict() if self.drafter_opt else self.drafter_opt_state},
                   tmp / f"rank{self.rank}.pt")
        dist.barrier()
        if self.rank == 0:
            self.target.save_pretrained(tmp / "target")
            self.task.save(tmp / "target")
            if self.drafter is not None:
                self.drafter.save(tmp / "drafter.pt")
            torch.save(self.grpo.optimizer.state_dict(), tmp / "optimizer.pt")
            with open(tmp / "trainer.pkl", "wb") as f:
                pickle.dump(self.coordinator.trainer, f)
            write_json(tmp / "state.json", {"step": step})
            _replace_dir(tmp, self.out / CHECKPOINT)
        dist.barrier()


def _replace_dir(new: Path, dest: Path) -> None:
    """Put directory `new` at `dest`: readers see the old directory or the new one (the old one is moved
    aside first, then the new one renamed in)."""
    old = dest.with_name(f".{dest.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        os.replace(dest, old)
    os.replace(new, dest)
    shutil.rmtree(old, ignore_errors=True)

