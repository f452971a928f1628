"""A run's checkpoint (RUN_DIR/checkpoint): plain state, written by every rank, replaced atomically.

    checkpoint/state.json     {"step": the last finished step}
    checkpoint/rank<r>.pt     rank r's policy state: its EngineControl, its sample buffer, its drafter
                              optimizer (plain data and tensors: `torch.load(weights_only=True)` reads it)
    checkpoint/trainer.pt     rank 0's SpotTrainer state (plain data)
    checkpoint/target/, drafter.pt, optimizer.pt   the models and the GRPO optimizer

No class is pickled: a checkpoint holds the `state_dict()` of each policy object, and resume builds the
objects from the run's config and loads their state into them.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from tltsim.io import write_json

CHECKPOINT = "checkpoint"


def recover(out: Path) -> None:
    """Put back the last checkpoint if a kill inside `write` left it aside."""
    aside = out / f".{CHECKPOINT}.old"
    if aside.exists() and not (out / CHECKPOINT).exists():
        os.replace(aside, out / CHECKPOINT)


def exists(out: Path) -> bool:
    return (out / CHECKPOINT / "state.json").exists()


def last_step(out: Path) -> int:
    """The last step the checkpoint holds."""
    return json.loads((out / CHECKPOINT / "state.json").read_text())["step"]


def write(out: Path, rank: int, step: int, state: dict, shared: Callable[[Path], None] | None = None) -> None:
    """Every rank (collectively) writes its `state` into a temp dir; rank 0 also calls `shared(dir)` for what the
    ranks share, then the temp dir replaces RUN_DIR/checkpoint."""
    tmp = out / f".{CHECKPOINT}.tmp"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    torch.save(state, tmp / f"rank{rank}.pt")
    dist.barrier()
    if rank == 0:
        if shared is not None:
            shared(tmp)
        write_json(tmp / "state.json", {"step": step})
        _replace_dir(tmp, out / CHECKPOINT)
    dist.barrier()


def read(out: Path, name: str, device=None):
    """A plain-state file of the checkpoint (rank<r>.pt, trainer.pt, optimizer.pt)."""
    return torch.load(out / CHECKPOINT / name, map_location=device, weights_only=True)


def _replace_dir(new: Path, dest: Path) -> None:
    """Put directory `new` at `dest`: readers see the old directory or the new one (the old one is moved
    aside first, then the new one renamed in)."""
    old = dest.with_name(f".{dest.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        os.replace(dest, old)
    os.replace(new, dest)
    shutil.rmtree(old, ignore_errors=True)
