"""Tail migration's decisions (RLHFuse): when a step's tail moves, onto which engines, which rows go where, and what
the released engines do. The simulator's `migrate` policy (tltsim/policies/migrate.py, which describes the method
and its defaults) and a real executor drive the same `MigrationControl`:

    c = MigrationControl(MigrateKnobs())
    keep = c.keep(n)                      a step of n responses moves its tail once `keep` or fewer are unfinished
    c.due(unfinished, n)                  online: whether that moment has come (offline: c.when(finish_times))
    targets = c.targets(running)          running: engine -> its unfinished rows then; None: no move (the tail is
                                          already on `to_engines` engines or fewer)
    c.assign(len(moving), targets)        engine -> positions among the moving rows (in engine order): round-robin
    c.released(engines, targets)          the engines that hand their rows over; they do what `release` says
    next_stage_span(work, tp, released, time_left)   release = "next-stage": how long they run the reward stage's
                                          log-prob forwards before the barrier

Nothing is carried across steps (no state to resume from); a step's record is when it moved (`migrate_at_s`), how
many rows (`migrated`) and how many engines it released (`released_engines`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tltsim.control.knobs import knob

RELEASE = ("idle", "next-stage", "drafter")


@dataclass(frozen=True)
class MigrateKnobs:
    remaining: float = knob(0.02, lo=0.0, hi=1.0)  # migrate once unfinished responses <= this share of the step's
    to_engines: int = knob(2, lo=1)  # engines the tail is consolidated onto
    release: str = knob("next-stage", choices=RELEASE)  # what the released engines do until the barrier


class MigrationControl:
    """A step's migration decisions (module docstring)."""

    def __init__(self, knobs: MigrateKnobs):
        self.k = knobs

    def keep(self, n: int) -> int:
        """Unfinished responses, of a step's `n`, at which the tail moves (`remaining` x n, rounded down)."""
        return math.floor(self.k.remaining * n + 1e-9)

    def due(self, unfinished: int, n: int) -> bool:
        """Online: whether a step of `n` responses, `unfinished` of them still unfinished, moves its tail now (no
        step moves all or none of its rows)."""
        keep = self.keep(n)
        return 0 < keep < n and unfinished <= keep

    def when(self, finish: np.ndarray, n: int | None = None) -> float | None:
        """Offline: the time at which `due` turns true, given the finish time of every response of the step's `n`
        (default: as many as `finish` holds); None if never."""
        n = len(finish) if n is None else n
        keep = self.keep(n)
        if not 0 < keep < n:
            return None
        return float(np.sort(finish)[n - keep - 1])  # the (n - keep)-th finish: `keep` left

    def targets(self, running: dict[int, int]) -> list[int] | None:
        """The engines the tail moves onto, given each engine's unfinished rows at that moment: the `to_engines`
        that hold the most (on a tie, the lowest index); None where `to_engines` or fewer hold any (no move)."""
        busy = [e for e, k in sorted(running.items(), key=lambda x: (-x[1], x[0])) if k > 0]
        return busy[: self.k.to_engines] if len(busy) > self.k.to_engines else None

    @staticmethod
    def assign(moving: int, targets: list[int]) -> dict[int, np.ndarray]:
        """Where `moving` rows go (the unfinished rows, running or waiting, in engine order): target -> positions
        among them, dealt round-robin (the engines know no lengths)."""
        return {e: np.arange(i, moving, len(targets)) for i, e in enumerate(targets)}

    @staticmethod
    def released(engines, targets: list[int]) -> list[int]:
        """Of the `engines` that ran rows this step, those released at the move: every one but the targets."""
        return [e for e in engines if e not in targets]


def next_stage_span(work_gpu_s: float, tp: int, released: int, time_left: float) -> float:
    """release = "next-stage": seconds the `released` engines (of `tp` GPUs each) run the reward stage's log-prob
    forwards of the responses finished before the move (`work_gpu_s` GPU-seconds in all), at most until the
    barrier (`time_left` after the move)."""
    return min(time_left, work_gpu_s / (tp * released)) if released else 0.0
