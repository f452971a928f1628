"""What the simulator asks of a policy (its hooks), and the baseline that answers "nothing special" (verl).

Named policies (tltsim/policies) subclass `Policy`; the simulator knows only these hooks.

A policy is a composition of plain policy objects (tltsim.control: switch, tuner,
coordinator, acceptance, drafter quality). The simulator calls these hooks at
events; the real backend drives the same objects at the same events.

Per synchronous step the simulator calls, in order:
    prepare_step -> split -> begin_step -> rollout (which calls speculation once per engine run)
    -> worker_done (per engine, at its end time) -> end_rollout (at the barrier)
A policy that needs another step structure (asynchronous RL) returns its own simpy process from `loop`; a
policy that speculates may run inside it (`loop_refusal` None), asked for each engine's `speculation` and told
    begin_version (at the start and at every weight update) -> idle_training (per engine wait)
    -> end_version (when a training step ends, before the weights it made reach the engines).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tltsim.sim.rollout import StepRollout


@dataclass
class StepOutcome:
    """What a policy decides at the barrier and adds to the step's record."""

    # worker -> (state, t_start, t_end): what the worker did after its rollout share (e.g. drafter_train)
    spans: dict[int, tuple[str, float, float]] = field(default_factory=dict)
    trained: np.ndarray | None = None  # mask over the step's rows trained on; None = every finished row
    dropped: int = 0  # responses whose tokens were thrown away this step (off-policy cost, wasted work)
    prework_gpu_s: float = 0.0  # GPU-seconds of the reward stage's log-prob forwards done before the barrier
    columns: dict = field(default_factory=dict)  # extra per-step columns
    release_s: float = 0.0  # seconds after the barrier until every worker is free for the reward stage (a spot
    # trainer finishing its batch in progress: its span in `spans` runs that far past the barrier)
    train_s: float = 0.0  # seconds the step's update phase takes longer (a drafter trained inside the actor update)


class Policy:
    """Baseline synchronous RL as verl runs it: no speculation, idle engines wait at the barrier."""

    name = "verl"
    multi_turn = True  # runs a multi-turn trace (its rollout runs every share to its end with `run`)
    knob_names: tuple = ()  # the knobs it takes (tltsim.control.knobs)
    knob_values: dict = {}  # an instance's values of them

    def reserved_gpus(self, cluster) -> int:
        """GPUs the policy keeps out of rollout (multiple of tp); they are extra workers after the engines."""
        return 0

    def prepare_step(self, step: int, df: dict) -> dict:
        """The step's responses (column arrays) as the engines will see them.

        Optional columns a policy may add: `group` (unique id of a prompt group; default prompt_id),
        `origin` (the policy version, i.e. step, that generated a row's first tokens; default this step),
        `carried` (tokens generated in earlier steps, already counted in prompt_len; default 0)."""
        return df

    def split(self, df: dict, engines: int) -> list[np.ndarray] | None:
        """Row indices of each engine's share in admission order, or None for the simulator's default
        (contiguous chunks of prompt groups as verl does, or the trace's engine column)."""
        return None

    def rollout(self, step: int, df: dict, shares: list[np.ndarray], run) -> StepRollout:
        """Run the step's rollout. `run(engine, prompt_len, response_len, rows)` returns one EngineRollout of
        those requests (`rows`: their indices in `df`, for a speculation that depends on which requests run; None
        where they are not the step's rows) on that engine (fast or exact, with this policy's speculation). The
        default runs every share to completion; a policy may stop engines early or move requests (see
        tltsim.sim.rollout)."""
        sr = StepRollout.empty(len(df["step"]))
        for e, rows in enumerate(shares):
            if len(rows):
                sr.add(e, rows, run(e, df["prompt_len"][rows], df["response_len"][rows], rows),
                       df["response_len"][rows])
        return sr

    def loop(self, sim, env, bar):
        """A simpy process that runs the whole training run instead of the synchronous step loop, or None."""
        return None

    def bind(self, sim) -> None:
        """Called once before the run with the simulator (cost model, cluster, seed)."""
        self.sim = sim

    def begin_step(self, step: int, t: float) -> None:
        """The step's rollout starts at time t on every engine."""

    def speculation(self, engine: int, rows=None):
        """A tltsim.sim.speculation.Speculation for this engine's rollout of the step's `rows` (indices into the
        step's rows; None: not known), or None for plain decoding."""
        return None

    def priority(self, df: dict, rows: np.ndarray) -> np.ndarray | None:
        """Multi-turn traces: each of the step's `rows`' priority in its engine's queue (highest served first, a
        trajectory keeping it for every turn), or None for FIFO (tltsim.sim.agentic)."""
        return None

    def worker_done(self, engine: int, t: float) -> None:
        """The engine finished its share of the step at time t."""

    def end_rollout(self, step: int, t: float, df: dict, sr: StepRollout) -> StepOutcome:
        """All engines finished (the barrier) at absolute time t; `df` is the step's rows, `sr` the rollout."""
        return StepOutcome()

    def loop_refusal(self) -> str | None:
        """Why this policy cannot run inside another policy's step loop (asynchronous RL's), or None where it can:
        only a policy that speculates and nothing else can."""
        return "it shapes a synchronous step"

    def begin_version(self, version: int, t: float) -> None:
        """Inside an asynchronous run: every rollout engine decodes under policy version `version` from t."""

    def idle_training(self, seconds: float) -> float:
        """Inside an asynchronous run: a rollout engine had nothing to decode for `seconds`; the seconds of them its
        drafter trained (0: it idled)."""
        return 0.0

    def end_version(self, version: int, lengths: np.ndarray) -> dict:
        """Inside an asynchronous run: the training step of `version` trained on responses of `lengths` tokens and
        its weights go out now; the columns the policy adds to the step's record."""
        return {}

    def summary(self) -> dict:
        """Keys the policy adds to the run's summary when the run ends (what it learned); none by default."""
        return {}
