"""Supervised pretraining of a target from scratch on the task's reference solutions.

`pretrain(config, out)` trains a preset on freshly drawn training problems (loss on
response tokens only), writes the checkpoint with `save_pretrained` plus the task
file, and returns the loss curve. Deterministic by seed when bounded by steps; a
`seconds` budget stops earlier on a slow machine and then depends on its speed.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from real.checks import replaceable_checkpoint
from real.models.targets import build_target
from real.tasks.gcd import GcdTask
from real.settings import PretrainConfig
from tltsim.core.io import atomic_dir, write_json

PRETRAIN_FILE = "tltsim_pretrain.json"  # the run's config and loss curve, beside the checkpoint


@dataclass
class PretrainResult:
    losses: list[float]  # mean response-token cross-entropy of each step
    steps: int  # steps run (fewer than config.steps when the seconds budget ran out)
    seconds: float  # wall time of the training loop


def batches(task: GcdTask, rng: np.random.Generator, batch_tokens: int, pool: int = 512):
    """Endless (input_ids, labels) batches: right-padded, labels -100 on prompt and padding.

    A pool of problems is sorted by length and cut into batches of at most
    `batch_tokens` padded tokens, so a batch wastes little on padding; batches
    come out in a random order.
    """
    tok = task.tokenizer
    while True:
        seqs = [(task.prompt_ids(p), task.solution_ids(p)) for p in task.sample(rng, pool)]
        seqs.sort(key=lambda s: len(s[0]) + len(s[1]))
        groups, start = [], 0
        while start < len(seqs):
            end = start + 1
            while end < len(seqs) and (end + 1 - start) * sum(map(len, seqs[end])) <= batch_tokens:
                end += 1
            groups.append(seqs[start:end])
            start = end
        for i in rng.permutation(len(groups)):
            group = groups[i]
            width = max(len(p) + len(r) for p, r in group)
            ids = torch.full((len(group), width), tok.pad_id)
            labels = torch.full((len(group), width), -100)
            for row, (p, r) in enumerate(group):
                ids[row, : len(p) + len(r)] = torch.tensor(p + r)
                labels[row, len(p) : len(p) + len(r)] = torch.tensor(r)
            yield ids, labels


def _lr_scale(step: int, config: PretrainConfig) -> float:
    if step < config.warmup:
        return (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(1.0, progress)))


def train(config: PretrainConfig, log=None) -> tuple[torch.nn.Module, GcdTask, PretrainResult]:
    """Train `config.preset` from scratch; `log(step, loss)` is called every 10 steps if given."""
    task = GcdTask(config.task)
    model = build_target(config.preset, seed=config.seed, vocab_size=task.tokenizer.vocab_size).train()
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.98), weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_scale(s, config))
    data = batches(task, np.random.default_rng(config.seed), config.batch_tokens)
    losses, t0 = [], time.perf_counter()
    for step in range(config.steps):
        ids, labels = next(data)
        loss = model(input_ids=ids, attention_mask=(ids != task.tokenizer.pad_id).long(), labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log is not None and (step % 10 == 9 or step == config.steps - 1):
            log(step + 1, losses[-1])
        if config.seconds is not None and time.perf_counter() - t0 >= config.seconds:
            break
    return model.eval(), task, PretrainResult(losses, len(losses), time.perf_counter() - t0)


def save_checkpoint(model: torch.nn.Module, task: GcdTask, out: str | Path, record: dict) -> Path:
    """Write the model (save_pretrained), the task file and `record` into `out`, atomically as a directory
    (tltsim.core.io.atomic_dir): `out` holds the previous checkpoint or the new one, never a mix. An existing `out`
    is replaced only if it is empty or a checkpoint (it has the task file); else a TltsimError."""
    with atomic_dir(out, replaceable_checkpoint) as tmp:
        model.save_pretrained(tmp)
        task.save(tmp)
        write_json(tmp / PRETRAIN_FILE, record)
    return Path(out)


def pretrain(config: PretrainConfig, out: str | Path, log=None) -> PretrainResult:
    """Train and save to `out`; returns the loss curve."""
    model, task, result = train(config, log)
    save_checkpoint(model, task, out, {"config": asdict(config), **asdict(result)})
    return result
