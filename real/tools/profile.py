"""Measure what the simulator's cost model needs, on this device, with the real engine.

Rows of the profile (a CSV that `tltsim.cost.profiled.Profiled.fit` reads):

    kind            what was timed                                   keys
    prefill         Engine.add of `batch` prompts                     batch, tokens, sq_tokens
    decode          one plain iteration                               batch, context
    spec            one speculative iteration (drafting + verify)     batch, context, depth, topk, verify
    catchup         the drafter ingesting tokens it has not seen         batch, context, tokens (ingested)
                    (Iteration.catchup_s of the first speculative iteration after prefill: every token, the
                    SD switch; after 1, 4 and 16 plain iterations: those tokens)
    train           GRPO.update (fwd + bwd + AdamW) on a batch         tokens, sq_tokens (padded, see below)
    logprob         GRPO.old_logprobs (the reward stage's forward)    tokens, sq_tokens (padded)
    drafter_train   Drafter.train_step on (tokens, features) pairs    tokens

Training is timed on batches of sequences as long as a run's: the task's reference solutions
(GcdTask: long-tailed, as a run's responses are), or, for a task without them (word problems on a
chat model), the target's own answers to ANSWERS problems, sampled as the engine samples, up to the
run's response cap. GRPO's forwards run on padded micro-batches (tltsim.core.padding), so
train and logprob rows give the tokens and the sum of squared lengths those forwards process,
padding included: the simulator counts a run's sequences the same way (rl.micro_batch_tokens).

Engine calls are timed as a run records them: through the rollout loop (real.engine.adaptive.rollout),
from the end of one call to the end of the next, so the loop's own work between calls is in the
time as it is in a run's timeline. `context` is the KV tokens of the whole batch when the
iteration starts; every row's time is `seconds` (one measurement; repeats are separate rows).
The engine runs with no end-of-sequence token, so the batch stays whole while it is timed. It picks tokens
as `sampling` says: by default as `tltsim real run` does by default (at random at temperature 1; drawing a
token costs ~4% of a plain iteration of the default target on a CPU, and sampled verification walks the
draft tree); profile with the sampling of the runs you will validate.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from real import drafters
from real.engine.adaptive import rollout
from real.engine.generate import Engine, generate
from real.run.grpo import GRPO, barrier, free_port
from real.drafters.master_weights import MasterWeightAdamW
from real.models.targets import load_target, load_task
from real.run.processes import start_workers
from real.settings import PROFILE_COLUMNS, RUN_SAMPLING, GenerateSettings, ProfileSettings, SamplingParams, task_grpo
from real.tasks.gcd import GcdTask
from tltsim.core.errors import TltsimError
from tltsim.core.padding import padded_tokens
from tltsim.control import EngineControl, FixedTuner, SDSwitch
from tltsim.control.strategy import DEFAULT_ARMS, DEFAULT_STRATEGY, Strategy
from tltsim.core.records import SPEED_BATCH, SPEED_CONTEXT

ANSWERS = 32  # problems the target answers for the training rows' lengths when its task has no reference solutions
COLUMNS = PROFILE_COLUMNS


def profile(target, drafter: drafters.Trainable | None = None, settings: ProfileSettings = ProfileSettings(),
            task=None, progress=None) -> pd.DataFrame:
    """Time the engine's iterations over the settings' grid with `drafter` (default: a fresh trained-kind one),
    and training on batches of `settings.train_rows` sequences as long as `task`'s (default: the default GcdTask;
    see `train_lengths`), drawn with `settings.train_seed` (default `settings.seed`); returns COLUMNS.
    `progress(i, n)` after each of the n (batch, context) cells."""
    cfg = settings
    seed, sampling, repeats = cfg.seed, cfg.sampling, cfg.repeats
    strategies = cfg.strategies or tuple(str(a) for a in DEFAULT_ARMS) + (str(DEFAULT_STRATEGY),)
    rng = np.random.default_rng(seed)
    trainer = GRPO(target, cfg.grpo, seed=seed)  # a LoRA update's adapters are on the target, merged, from the start
    drafter = drafter or drafters.kind("eagle").for_target(target, seed=seed)
    if not isinstance(drafter, drafters.Trainable):
        raise TltsimError(f"profile: a {drafter.kind} drafter does not train; profile a trained drafter's checkpoint")
    vocab = target.get_output_embeddings().weight.shape[0]
    rows: list[dict] = []
    grid = [(b, c) for b in cfg.batches for c in cfg.contexts]
    for i, (b, c) in enumerate(grid):
        prompts = rng.integers(3, vocab, size=(b, c)).tolist()
        barrier()  # with several processes: each cell timed while the others time theirs, as a run's workers decode
        # plain: a warm-up iteration, then `repeats` timed ones
        calls = _rollout(target, drafter, prompts, repeats + 1, None, seed, sampling)
        rows.append(_row("prefill", b, tokens=b * (c - 1), sq_tokens=b * (c - 1) ** 2, seconds=calls[0][1]))
        rows += [_row("decode", b, context=ctx, seconds=sec) for ctx, sec in calls[2:]]
        for name in strategies:
            s = Strategy.parse(name)
            # the first speculative iteration builds the drafter's state (the switch), not a steady-state step
            calls = _rollout(target, drafter, prompts, repeats + 1, name, seed, sampling)
            rows += [_row("spec", b, context=ctx, depth=s.depth, topk=s.topk, verify=s.verify, seconds=sec)
                     for ctx, sec in calls[2:]]
        rows += _catchups(target, drafter, prompts, repeats, seed, sampling)
        if progress:
            progress(i + 1, len(grid))
    train_rng = np.random.default_rng(seed if cfg.train_seed is None else cfg.train_seed)
    sequences = train_lengths(target, task or GcdTask(), train_rng, sampling, cfg.max_new_tokens, seed)
    rows += _time_training(trainer, drafter, sequences, cfg.train_rows, repeats, train_rng)
    return pd.DataFrame(rows, columns=COLUMNS)


def train_lengths(target, task, rng, sampling: SamplingParams = RUN_SAMPLING, max_new_tokens: int = 128,
                  seed: int = 0) -> list[tuple[int, int]]:
    """(prompt, response) token lengths of sequences like a run's: the reference solutions of 256 of `task`'s
    problems when it has them (GcdTask), else `target`'s own answers to ANSWERS problems (word problems), as
    `sampling` says and up to `max_new_tokens`, end of turn included."""
    if hasattr(task, "solution_ids"):
        return [(len(task.prompt_ids(p)), len(task.solution_ids(p))) for p in task.sample(rng, 256)]
    prompts = [task.prompt_ids(p) for p in task.sample(rng, ANSWERS)]
    gen = generate(target, prompts, settings=GenerateSettings(sampling=sampling, max_new_tokens=max_new_tokens,
                                                              seed=seed))
    return [(len(p), len(r)) for p, r in zip(prompts, gen.tokens)]


def speed_probe(target, iterations: int = 8, seed: int = 0, sampling: SamplingParams = RUN_SAMPLING) -> float:
    """How fast this machine runs `target` now: median seconds of `iterations` plain decode iterations (after a
    warm-up one) at batch SPEED_BATCH after prompts of SPEED_CONTEXT random tokens, through the rollout loop as
    the profile times them. A run measures it before every step; `tltsim validate --speed` divides it by the
    cost model's time for the same iteration (tltsim.analysis.validation.validate.speed_reference) to follow the machine's drift."""
    vocab = target.get_output_embeddings().weight.shape[0]
    prompts = np.random.default_rng(seed).integers(3, vocab, size=(SPEED_BATCH, SPEED_CONTEXT)).tolist()
    calls = _rollout(target, None, prompts, iterations + 1, None, seed, sampling)
    return float(np.median([sec for _, sec in calls[2:]]))


def profile_processes(processes: int, model: str, device: str = "cpu", threads: int = 1,
                      drafter: str | None = None, settings: ProfileSettings = ProfileSettings(),
                      task: str | None = None, dtype: str = "float32") -> pd.DataFrame:
    """`profile` (with `settings`) of target `model` (a preset, a save_pretrained directory or a known model) on
    `task` (by name, with its GRPO update, real.settings.task_grpo; default: the model's own, real.models.targets.load_task)
    in `dtype` (a torch dtype's name, as a run's --dtype) with `drafter` (a checkpoint; default: the one shipped for a known model, as a run
    starts from, else a fresh one) in `processes`
    processes at once, each with `threads` torch threads and seed `settings.seed + rank`, as a run's workers share the
    machine: in a gloo process group, so each grid cell and each training measurement starts on every process
    together (on a CPU they contend for cores and memory bandwidth as a run's workers do) and GRPO's update
    all-reduces its gradients as a run's does. Every process trains on batches of the same sizes (drawn with
    `settings.seed`), so none waits in the all-reduce for a larger one and each row's time is its own size's.
    Every process's rows, rank 0's first; rank 0 prints its progress."""
    if processes == 1:
        return _profile_rank(0, model, device, threads, drafter, settings, task, dtype=dtype)
    with tempfile.TemporaryDirectory(prefix="tltsim-profile-") as tmp:
        start_workers(_profile_rank, (model, device, threads, drafter, settings, task, tmp, processes, free_port(), dtype),
                      processes)
        return pd.concat([pd.read_csv(Path(tmp) / f"rank{r}.csv") for r in range(processes)], ignore_index=True)


def _profile_rank(rank, model, device, threads, drafter, settings, task=None, out_dir=None, world=1,
                  port=0, dtype="float32") -> pd.DataFrame:
    torch.set_num_threads(threads)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    try:
        progress = (lambda i, n: print(f"profiled {i}/{n} (batch, context) cells", flush=True)) if rank == 0 else None
        target = load_target(model, device, dtype=dtype)
        start = drafter or drafters.find_shipped_drafter(model)
        ranked = replace(settings, seed=settings.seed + rank, train_seed=settings.seed, grpo=task_grpo(task))
        df = profile(target, drafters.load(start, target, model) if start else None, ranked, task=load_task(model, task),
                     progress=progress)
        if out_dir is not None:
            df.to_csv(Path(out_dir) / f"rank{rank}.csv", index=False)
        if world > 1:
            dist.barrier()  # no rank leaves while another still talks (not after a failure: it would wait forever)
    finally:
        if world > 1:
            dist.destroy_process_group()
    return df


def _rollout(target, drafter, prompts, iterations: int, strategy: str | None, seed: int,
             sampling: SamplingParams = RUN_SAMPLING) -> list[tuple[int, float]]:
    """Prefill `prompts` and run `iterations` decode iterations (speculative with `strategy`) through the
    rollout loop; returns (batch context tokens at the call's start, seconds) per call, the prefill first."""
    per_row = iterations * (Strategy.parse(strategy).depth + 1 if strategy else 1)
    engine = Engine(target, drafter, sampling=sampling, max_new_tokens=per_row, eos_token_id=[], seed=seed)
    control = EngineControl(SDSwitch("always"), FixedTuner(strategy)) if strategy else None
    calls = rollout(engine, prompts, time.perf_counter, control).calls
    ctx = sum(len(p) for p in prompts)  # every row's tokens, the pending last one included
    out = []
    for call in calls[: iterations + 1]:
        out.append((ctx, call.t_end - call.t_start))
        ctx += call.tokens if call.mode != "prefill" else 0
    return out


def _catchups(target, drafter, prompts, repeats: int, seed: int, sampling, behind=(1, 4, 16)) -> list[dict]:
    """Catch-up rows: the drafter's state built over every token (the first speculative iteration after the
    prefill, as at the SD switch), then `repeats` times, after each k in `behind` plain iterations, its catch-up
    over the k tokens a row those emitted. Each is the engine's own `catchup_s` of that iteration."""
    strategy = DEFAULT_STRATEGY
    per_row = (strategy.depth + 1) * (1 + repeats * len(behind)) + repeats * sum(behind)
    engine = Engine(target, drafter, sampling=sampling, max_new_tokens=per_row, eos_token_id=[], seed=seed)
    engine.add(prompts)
    b, ctx = len(prompts), sum(len(p) for p in prompts)
    it = engine.step("spec_decode", strategy)
    out = [_row("catchup", b, context=ctx, tokens=ctx, seconds=it.catchup_s)]
    ctx += it.tokens
    for _ in range(repeats):
        for k in behind:
            for _ in range(k):
                ctx += engine.step("decode").tokens
            it = engine.step("spec_decode", strategy)
            out.append(_row("catchup", b, context=ctx, tokens=b * k, seconds=it.catchup_s))
            ctx += it.tokens
    return out


def _row(kind, batch=0, context=0, tokens=0, sq_tokens=0, depth=0, topk=0, verify=0, seconds=0.0) -> dict:
    return {"kind": kind, "batch": batch, "context": context, "tokens": tokens, "sq_tokens": sq_tokens,
            "depth": depth, "topk": topk, "verify": verify, "seconds": float(seconds)}


def _time_training(grpo: GRPO, drafter, sequences, rows_per_batch, repeats, rng) -> list[dict]:
    """GRPO's reward-stage forward (old log-probs) and update, and a drafter train step, as a run calls them,
    on batches of `rows` sequences whose (prompt, response) lengths are drawn from `sequences`."""
    out = []
    target = grpo.model
    vocab = target.get_output_embeddings().weight.shape[0]
    dtype, device = next(target.parameters()).dtype, next(target.parameters()).device
    dopt = MasterWeightAdamW(drafter.parameters(), lr=0.0)  # as spot training steps the drafter
    for opt in (grpo.optimizer, dopt.optimizer):  # time the steps, leave the weights alone
        for group in opt.param_groups:
            group["lr"], group["weight_decay"] = 0.0, 0.0
    for rows in rows_per_batch:
        for _ in range(repeats):
            pick = rng.integers(len(sequences), size=rows)
            prompts = [rng.integers(3, vocab, size=sequences[i][0]).tolist() for i in pick]
            responses = [rng.integers(3, vocab, size=sequences[i][1]).tolist() for i in pick]
            lengths = [len(a) + len(b) for a, b in zip(prompts, responses)]
            tokens = sum(lengths)
            padded, padded_sq = padded_tokens(lengths, grpo.config.micro_batch_tokens)  # what GRPO's forwards process
            barrier()  # every process times the same stage at once, as a run's workers run it
            start = time.perf_counter()
            old, ref = grpo.old_logprobs(prompts, responses)
            out.append(_row("logprob", tokens=padded, sq_tokens=padded_sq, seconds=time.perf_counter() - start))
            barrier()
            start = time.perf_counter()
            grpo.update(prompts, responses, rng.choice([-1.0, 1.0], size=rows), old, ref)
            out.append(_row("train", tokens=padded, sq_tokens=padded_sq, seconds=time.perf_counter() - start))
            pairs = [(torch.tensor(a + b), torch.randn(len(a) + len(b) - 1, target.config.hidden_size, dtype=dtype,
                                                       device=device)) for a, b in zip(prompts, responses)]
            barrier()
            start = time.perf_counter()
            drafter.train_step(pairs, dopt)
            out.append(_row("drafter_train", tokens=tokens, seconds=time.perf_counter() - start))
    drafter.eval()
    return out
