"""Bounded-staleness asynchronous RL's decisions (AReaL's): when a prompt group may start, which finished groups a
training step takes, which it drops. The simulator's `async` policy (tltsim/sim/async_loop.py plays it) and a real
executor drive the same `AsyncControl`:

    c = AsyncControl(max_staleness, batches)   batches[k]: the groups training step k trains on
    while c.may_start(started, version): ...    start the stream's next group (started: groups started so far)
    trained, dropped = c.select(step, finished) finished: {group: policy version of its oldest first token}

The gate: a group may start only while started < (version + max_staleness + 1) x the batch, so no sample starts
more than `max_staleness` versions ahead of the trainer. The trainer takes the oldest finished groups first (by
version, then by when they started); a finished group whose first tokens are more than `max_staleness` versions
older than the step is dropped, its samples wasted. Plain Python, no state but the knobs.
"""
from __future__ import annotations

from dataclasses import dataclass

from tltsim.control.knobs import knob


@dataclass(frozen=True)
class AsyncKnobs:
    rollout_share: float = knob(0.5, lo=0.0, hi=1.0)  # GPUs rolling out / all GPUs (whole engines)
    max_staleness: int = knob(4, lo=0)  # policy versions a trained sample may lag (AReaL's eta)


class AsyncControl:
    """The gate and the trainer's choice of a bounded-staleness asynchronous run (module docstring)."""

    def __init__(self, max_staleness: int, batches: list[int]):
        if max_staleness < 0 or not batches or min(batches) < 1:
            raise ValueError(f"AsyncControl({max_staleness}, {batches}): max_staleness >= 0 and a batch of "
                             f">= 1 group a step")
        self.max_staleness = max_staleness
        self.batches = list(batches)

    def batch(self, version: int) -> int:
        """Groups the training step of policy version `version` trains on (the last step's beyond the run)."""
        return self.batches[min(version, len(self.batches) - 1)]

    def may_start(self, started: int, version: int) -> bool:
        """Whether another group may start with `started` started so far, while the trainer is at `version`."""
        return started < (version + self.max_staleness + 1) * self.batch(version)

    def stale(self, step: int, version: int) -> bool:
        """Whether a group whose oldest first token is of `version` is too old for training step `step`."""
        return step - version > self.max_staleness

    def select(self, step: int, finished: dict[int, int]) -> tuple[list[int] | None, list[int]]:
        """Training step `step`'s choice among the `finished` groups ({group: version of its oldest first token},
        a group's number giving the order groups started in): (the groups it trains on, oldest first, or None
        while fewer than its batch are fresh enough; the groups it drops, too stale)."""
        dropped = sorted(g for g, v in finished.items() if self.stale(step, v))
        fresh = sorted((v, g) for g, v in finished.items() if not self.stale(step, v))
        need = self.batch(step)
        return ([g for _, g in fresh[:need]] if len(fresh) >= need else None), dropped
