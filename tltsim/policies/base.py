"""What the simulator asks of a policy, and the baseline that answers "nothing special".

A policy is a composition of plain policy objects (tltsim.policy: switch, tuner,
coordinator, acceptance, drafter quality). The simulator calls these hooks at
events; the real backend drives the same objects at the same events.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class StepOutcome:
    """What a policy adds to a step's record: per-worker drafter training spans and per-step columns."""

    train_spans: dict[int, tuple[float, float]] = field(default_factory=dict)  # worker -> (t_start, t_end)
    columns: dict = field(default_factory=dict)


class Policy:
    """Baseline synchronous RL as verl runs it: no speculation, idle engines wait at the barrier."""

    name = "verl"
    knobs: dict = {}

    def reserved_gpus(self, cluster) -> int:
        """GPUs the policy keeps out of rollout (multiple of tp); they are extra workers after the engines."""
        return 0

    def prepare_step(self, step: int, df: dict) -> dict:
        """The step's responses (column arrays) as the engines will see them."""
        return df

    def bind(self, sim) -> None:
        """Called once before the run with the simulator (cost model, cluster, seed)."""
        self.sim = sim

    def begin_step(self, step: int, t: float) -> None:
        """The step's rollout starts at time t on every engine."""

    def speculation(self, engine: int):
        """A tltsim.sim.engine.Speculation for this engine's rollout, or None for plain decoding."""
        return None

    def worker_done(self, engine: int, t: float) -> None:
        """The engine finished its share of the step at time t."""

    def end_rollout(self, step: int, t: float, rollouts: dict, response_len) -> StepOutcome:
        """All engines finished (the barrier) at time t; `rollouts` maps engine -> EngineRollout;
        `response_len` holds the step's response lengths."""
        return StepOutcome()


class Ideal(Policy):
    """Perfect load balance of the same tokens: every response of a step gets the step's mean length
    (total tokens kept), so every engine finishes together and nothing waits in a tail. A lower bound
    on rollout time for plain decoding, not a realisable policy."""

    name = "ideal"

    def prepare_step(self, step: int, df: dict) -> dict:
        r = df["response_len"]
        n, total = len(r), int(r.sum())
        balanced = np.full(n, total // n, dtype=r.dtype)
        balanced[: total % n] += 1
        return {**df, "response_len": balanced}
