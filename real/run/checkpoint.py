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
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

from tltsim.core.io import atomic_dir, write_json

CHECKPOINT = "checkpoint"


def exists(out: Path) -> bool:
    """Whether run directory `out` holds a checkpoint."""
    return _complete(out / CHECKPOINT)


def _complete(directory: Path) -> bool:
    return (directory / "state.json").is_file()


def last_step(out: Path) -> int:
    """The last step the checkpoint holds."""
    return json.loads((out / CHECKPOINT / "state.json").read_text())["step"]


def write(out: Path, rank: int, step: int, state: dict, shared: Callable[[Path], None] | None = None,
          own: Callable[[Path], None] | None = None) -> None:
    """Every rank (collectively) writes its `state` into a temporary directory (and calls `own(dir)` for files of its
    own); rank 0 also calls `shared(dir)` for what the ranks share, then the directory takes RUN_DIR/checkpoint's
    place whole (tltsim.core.io.atomic_dir)."""
    import torch  # here, not at the top: `exists` is read before a run imports torch (real.run.run_dir.check_run_dir)
    import torch.distributed as dist

    with atomic_dir(out / CHECKPOINT, _complete) if rank == 0 else nullcontext() as tmp:
        where = [str(tmp) if rank == 0 else None]
        dist.broadcast_object_list(where, src=0)
        torch.save(state, Path(where[0]) / f"rank{rank}.pt")
        if own is not None:
            own(Path(where[0]))
        dist.barrier()
        if rank == 0:
            if shared is not None:
                shared(tmp)
            write_json(tmp / "state.json", {"step": step})
    dist.barrier()


def read(out: Path, name: str, device=None):
    """A plain-state file of the checkpoint (rank<r>.pt, trainer.pt, optimizer.pt)."""
    import torch

    return torch.load(out / CHECKPOINT / name, map_location=device, weights_only=True)
