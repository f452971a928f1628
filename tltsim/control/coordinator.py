"""Spot training of the drafter on rollout workers that have finished their share.

TLT (ASPLOS 2026), spot trainer: a synchronous RL step waits for its slowest
rollout engine, so engines that finish early sit idle through the long tail.
A coordinator tracks every worker (one rollout engine's GPUs) as BUSY, IDLE or
TRAINING, starts drafter training on idle workers, and preempts it when the
workers are needed again; the preempted job saves a checkpoint, which the
caller charges (TLT's selective async checkpoint of trainable parameters only:
CHECKPOINT_S). A `DataBuffer` decides what the drafter trains on.

The coordinator keeps no clock: every call carries the time `t` of its event
(simulated or wall clock) and is logged as (t, worker, new state) transitions.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import Enum

import numpy as np

from tltsim.core.errors import TltsimError

CHECKPOINT_S = 0.097        # TLT: selective async checkpoint (trainable params only), per preemption
CHECKPOINT_FULL_S = 0.893   # TLT: the same save with a full synchronous checkpoint


class WorkerState(Enum):
    BUSY = "busy"          # generating its share of the current rollout
    IDLE = "idle"          # nothing to do (between rollouts, or waiting for enough idle peers)
    TRAINING = "training"  # training the drafter on otherwise idle GPUs


class SpotTrainer:
    """Which workers train the drafter, and when; logs every state change.

    Rules (TLT spot trainer):
    * `start_rollout`: every worker turns BUSY; training workers are preempted.
    * `worker_done`: the worker turns IDLE. If this rollout trains (see
      `cadence`), once at least `min_idle` workers are IDLE all of them start
      TRAINING together; from then on, later finishers start at once.
    * `preempt`: the caller needs the GPUs back (e.g. the colocated RL update
      right after the rollout); training workers turn IDLE.
    Before the first rollout every worker is IDLE. Calls with a time earlier
    than the last call's raise ValueError, as do calls that do not fit the
    state (a worker finishing twice).
    """

    def __init__(self, num_workers: int, *, min_idle: int = 1, cadence: int = 1,
                 enabled: bool = True):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise TltsimError(f"spot trainer num_workers={num_workers!r}: must be an integer >= 1")
        if not isinstance(min_idle, int) or not 1 <= min_idle <= num_workers:
            raise TltsimError(f"spot trainer min_idle={min_idle!r}: must be an integer in "
                              f"[1, {num_workers}] (idle workers needed before training starts)")
        if not isinstance(cadence, int) or cadence < 1:
            raise TltsimError(f"spot trainer cadence={cadence!r}: must be an integer >= 1 "
                              "(train during the rollouts of steps divisible by it)")
        self.num_workers = num_workers
        self.min_idle = min_idle          # idle workers needed before training starts
        self.cadence = cadence            # train during rollouts of steps with step % cadence == 0
        self.enabled = enabled            # False: workers only ever go BUSY and IDLE
        self.log: list[tuple[float, int, WorkerState]] = []
        self._states = [WorkerState.IDLE] * num_workers
        self._trains_now = False          # this rollout trains, and min_idle was reached
        self._trains_this_rollout = False
        self._t = -np.inf

    def state(self, worker: int) -> WorkerState:
        return self._states[worker]

    @property
    def training_workers(self) -> list[int]:
        """Workers TRAINING now, in increasing order."""
        return self._in(WorkerState.TRAINING)

    @property
    def idle_workers(self) -> list[int]:
        """Workers IDLE now, in increasing order."""
        return self._in(WorkerState.IDLE)

    def start_rollout(self, step: int, t: float) -> list[int]:
        """All workers turn BUSY for the rollout of `step`; returns the preempted trainers."""
        self._tick(t)
        preempted = self.training_workers  # they go straight to BUSY
        for w in range(self.num_workers):
            self._set(t, w, WorkerState.BUSY)
        self._trains_this_rollout = self.enabled and step % self.cadence == 0
        self._trains_now = False
        return preempted

    def worker_done(self, worker: int, t: float) -> list[int]:
        """`worker` finished its share: it turns IDLE; returns the workers that start TRAINING now."""
        self._tick(t)
        if self._states[worker] is not WorkerState.BUSY:
            raise ValueError(f"worker_done({worker}, t={t}): worker is {self._states[worker].value}, "
                             "not busy")
        self._set(t, worker, WorkerState.IDLE)
        if not self._trains_this_rollout:
            return []
        idle = self.idle_workers
        if not self._trains_now and len(idle) < self.min_idle:
            return []
        self._trains_now = True
        for w in idle:
            self._set(t, w, WorkerState.TRAINING)
        return idle

    def preempt(self, t: float) -> list[int]:
        """Stop all training (each saves a checkpoint): TRAINING workers turn IDLE; returns them."""
        self._tick(t)
        stopped = self.training_workers
        for w in stopped:
            self._set(t, w, WorkerState.IDLE)
        self._trains_now = False
        return stopped

    def seconds_in(self, state: WorkerState, until: float) -> float:
        """Worker-seconds spent in `state` from the log, counting open intervals up to `until`."""
        since: dict[int, float] = {}
        total = 0.0
        for t, w, s in self.log + [(until, w, None) for w in range(self.num_workers)]:
            if w in since:
                total += t - since.pop(w)
            if s is state:
                since[w] = t
        return total

    def state_dict(self) -> dict:
        """Every worker's state, the transition log and the rollout's flags, as plain data."""
        return {"states": [s.value for s in self._states], "log": [[t, w, s.value] for t, w, s in self.log],
                "trains_now": self._trains_now, "trains_this_rollout": self._trains_this_rollout, "t": self._t}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned, on a trainer built with the same knobs."""
        self._states = [WorkerState(s) for s in state["states"]]
        self.log = [(float(t), int(w), WorkerState(s)) for t, w, s in state["log"]]
        self._trains_now, self._trains_this_rollout = bool(state["trains_now"]), bool(state["trains_this_rollout"])
        self._t = float(state["t"])

    def _in(self, state: WorkerState) -> list[int]:
        return [w for w, s in enumerate(self._states) if s is state]

    def _set(self, t: float, worker: int, state: WorkerState) -> None:
        if self._states[worker] is not state:
            self._states[worker] = state
            self.log.append((t, worker, state))

    def _tick(self, t: float) -> None:
        if t < self._t:
            raise ValueError(f"time went backwards: t={t} after t={self._t}")
        self._t = t


@dataclass(frozen=True)
class TrainingData:
    """What the drafter can train on at one moment."""

    lengths: np.ndarray  # [num_samples] tokens per sample (whatever length the caller added)

    @property
    def num_samples(self) -> int:
        return int(self.lengths.size)

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())

    @property
    def mean_length(self) -> float:
        """Mean tokens per sample; 0 when empty. Lower than the rollout's mean = short bias."""
        return float(self.lengths.mean()) if self.lengths.size else 0.0


class DataBuffer:
    """The drafter's training data: recent samples, plus the long ones of the step before.

    TLT keeps the tokens and target hidden states of the last steps; since the
    first workers to finish (the ones that train) hold the *short* responses
    of the current step, it also keeps the long sequences of the previous step
    to offset that bias. Here a sample is its length in tokens, added with
    the RL step that produced it (the caller adds responses as they finish).

    At step s, `samples(s)` holds every sample of steps s - last_n_steps + 1
    .. s, plus the longest round(keep_long_prev x count) samples of step
    s - last_n_steps. Older samples are dropped when a newer step is added.
    """

    def __init__(self, last_n_steps: int = 1, keep_long_prev: float = 0.0):
        if not isinstance(last_n_steps, int) or last_n_steps < 1:
            raise TltsimError(f"data buffer last_n_steps={last_n_steps!r}: must be an integer >= 1")
        if not 0.0 <= keep_long_prev <= 1.0:
            raise TltsimError(f"data buffer keep_long_prev={keep_long_prev!r}: must be a fraction "
                              "in [0, 1] (share of the previous step's longest samples kept)")
        self.last_n_steps = last_n_steps      # steps whose samples are all kept
        self.keep_long_prev = keep_long_prev  # share of the step before them kept, longest first
        self._by_step: dict[int, list[np.ndarray]] = defaultdict(list)

    def add(self, step: int, lengths) -> None:
        """Add samples (their token lengths) produced at `step`; drops steps before the window."""
        newest = max(self._by_step, default=step)
        if step < newest - self.last_n_steps:
            raise ValueError(f"add(step={step}): older than the buffer keeps (newest step {newest})")
        lengths = np.asarray(lengths, dtype=np.int64).ravel()
        if lengths.size and lengths.min() < 0:
            raise ValueError("add: sample lengths must be >= 0")
        self._by_step[step].append(lengths)
        for old in [s for s in self._by_step if s < step - self.last_n_steps]:
            del self._by_step[old]

    def samples(self, step: int) -> TrainingData:
        """What the drafter trains on during the rollout of `step` (see the class docstring)."""
        window = [self._step(s) for s in range(step - self.last_n_steps + 1, step + 1)]
        before = np.sort(self._step(step - self.last_n_steps))
        keep = int(round(self.keep_long_prev * before.size))
        parts = window + [before[before.size - keep:]]
        return TrainingData(np.concatenate(parts))

    def state_dict(self) -> dict:
        """The samples' lengths by step, as plain data."""
        return {"by_step": [[s, [p.tolist() for p in parts]] for s, parts in self._by_step.items()]}

    def load_state_dict(self, state: dict) -> None:
        self._by_step = defaultdict(list)
        for s, parts in state["by_step"]:
            self._by_step[int(s)] = [np.asarray(p, dtype=np.int64) for p in parts]

    def _step(self, step: int) -> np.ndarray:
        parts = self._by_step.get(step)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
