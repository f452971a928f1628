"""The trained drafter a run starts from: --drafter-checkpoint, the one shipped for a known model
(real.drafters.warmup), or one warmed up on the target's own answers before the run (a few AdamW steps: the run's
own training should matter)."""
from __future__ import annotations

import numpy as np
import torch

from real import drafters
from real.drafters.warmup import find_shipped_drafter
from real.engine.generate import generate
from real.run.config import WARM_SPOT_LR, RunConfig
from real.run.problems import mixed_seed
from real.settings import GenerateSettings, SamplingParams


def starting_checkpoint(config: RunConfig):
    """The checkpoint of the drafter a run starts from: --drafter-checkpoint, else the one shipped for a known
    --model; None where there is neither (the run warms one up)."""
    return config.drafter_checkpoint or find_shipped_drafter(config.model)


def given_drafter(config: RunConfig, target) -> drafters.Trainable | None:
    """starting_checkpoint's drafter, loaded for `target` (drafters.load reads a recorded path as packaged); None
    where there is none (warm one up)."""
    start = starting_checkpoint(config)
    return drafters.load(start, target) if start else None


def spot_lr(config: RunConfig) -> float:
    """Spot training's learning rate: --spot-lr, else WARM_SPOT_LR from a drafter warmed up before the run
    (starting_checkpoint's), else --drafter-lr after the run's own short warm-up (the same when the run resumes)."""
    if config.spot_lr is not None:
        return config.spot_lr
    return WARM_SPOT_LR if starting_checkpoint(config) else config.drafter_lr


def warmed_up_drafter(config: RunConfig, target, task, sampling: SamplingParams) -> tuple[drafters.Trainable, list]:
    """A fresh drafter fitted on `target`'s answers to `config.warmup_prompts` of the task's problems, and those
    answers as (tokens, target features) pairs; the same for every caller with this config."""
    drafter = drafters.kind("eagle").for_target(target, seed=config.seed)
    problems = task.sample(np.random.default_rng(mixed_seed(config.seed, 998)), config.warmup_prompts)
    gen = generate(target, [task.prompt_ids(p) for p in problems], settings=GenerateSettings(
        sampling=sampling, max_new_tokens=config.max_new_tokens, seed=config.seed, collect_features=True))
    pairs = [(torch.tensor(f.prompt + f.tokens), f.features) for f in gen.finished]
    drafter.fit(pairs, config.warmup_steps, config.drafter_batch, config.drafter_lr, seed=config.seed)
    return drafter, pairs
