"""TLT's decision knobs, and the policy objects they build: one set for the simulator and for `real/`.

`DecisionKnobs` holds what a TLT engine and its spot trainer decide with (when to switch
speculation on, which tuner over which strategies, whether to guard, when and on what to train
the drafter). What the simulator assumes about the world (drafter quality and drift, load
times, its fast path's chunking) is not here: those are the simulator's own knobs
(tltsim/policies/tlt.py, `TLTKnobs`), which extend these.

    VARIANTS[name]      the knob defaults of each named variant that differ from DecisionKnobs()
    knobs.control(e, seed)   engine e's EngineControl (switch, tuner seeded seed * 1000 + e, guard)
    knobs.trainer(workers)   the SpotTrainer
    knobs.buffer()           the DataBuffer
    knobs_from_text(["threshold=16", ...])   knob values given as KEY=VALUE text (`--knob`)
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from tltsim.core.errors import TltsimError
from tltsim.control.control import EngineControl
from tltsim.control.coordinator import DataBuffer, SpotTrainer
from tltsim.control.guard import SpeculationGuard
from tltsim.control.knobs import check_fields, knob
from tltsim.control.learned import LearnedSwitch
from tltsim.control.strategy import DEFAULT_ARMS, parse_arms
from tltsim.control.switch import SD_MODES, SDSwitch
from tltsim.control.tuner import TUNERS, make_tuner

DRAFTERS = ("adaptive", "static", "ngram", "history", "hybrid")

# name -> knob defaults that differ from DecisionKnobs()
VARIANTS = {
    "tlt": {},
    "tlt-base": {"drafter": "ngram", "spot": False},
    "static-sd": {"drafter": "static", "spot": False},
    "sd-always": {"sd": "always"},
    "tlt-auto": {"sd": "learned"},
    "das": {"drafter": "history", "spot": False},
    "das+tlt": {"drafter": "hybrid"},
}


@dataclass(frozen=True)
class DecisionKnobs:
    sd: str = knob("adaptive", choices=SD_MODES)  # adaptive (TLT switch), always (from the first token), never,
    # learned (the switch point learned per batch bucket, starting from `threshold` or the cost model's estimate:
    # tltsim.control.learned)
    threshold: int = knob(32, lo=1)  # SD may switch on once the running batch is at or below this (TLT default)
    patience: int = knob(10, lo=0)  # ... for this many consecutive decode iterations (TLT default)
    tuner: str = knob("beg", choices=tuple(TUNERS))  # beg, egreedy, ucb, fixed, oracle
    arms: tuple = tuple(str(a) for a in DEFAULT_ARMS)  # depth_topk_verify strategies the tuner picks from
    eps: float = knob(0.1, lo=0.0, hi=1.0)  # exploration rate of beg / egreedy
    drafter: str = knob("adaptive", choices=DRAFTERS)  # adaptive (trained online), static (trained once), ngram
    # (model-free), history (drafts from the prompt's sibling and earlier responses: no model), hybrid (history
    # where its match is long and confident, else the adaptive drafter)
    spot: bool = knob(True)  # train the drafter on workers idle in the rollout tail
    min_idle: int = knob(1, lo=1)  # idle workers needed before spot training starts
    cadence: int = knob(1, lo=1)  # spot-train during every k-th step's rollout
    buffer_steps: int = knob(1, lo=1)  # drafter trains on samples of the last N steps
    keep_long_prev: float = knob(0.25, lo=0.0, hi=1.0)  # plus this share of the step before's longest samples
    guard: bool = knob(True)  # decode plainly at batches where speculating measured slower
    # (tltsim.control.SpeculationGuard)
    guard_trial: int = knob(4, lo=1, hi=8, needs=("guard", True))  # speculative iterations a fresh measurement
    # gets before the guard judges it (sooner once it cannot pay; at most the guard's window of 8)

    def checked(self, name: str) -> "DecisionKnobs":
        """This, checked (each knob by tltsim.control.knobs, then the knobs together); TltsimError naming policy
        `name`, the knob, its value and what is allowed."""
        k = check_fields(self, name)
        if k.spot and k.drafter not in ("adaptive", "hybrid"):
            raise TltsimError(f"policy {name!r}: spot = {k.spot!r} needs drafter = 'adaptive' or 'hybrid' (a "
                              f"{k.drafter} drafter does not train)")
        if k.sd == "learned" and not k.guard:
            raise TltsimError(f"policy {name!r}: guard = {k.guard!r} must be true with sd = 'learned' (the learned "
                              f"switch is its own guard)")
        parse_arms(k.arms)
        return k

    def control(self, engine: int, seed: int, expected_reward=None, prior: dict | None = None) -> EngineControl:
        """Engine `engine`'s control: its switch, its tuner (seeded seed * 1000 + engine) and its guard.
        `expected_reward(strategy, batch)` is what tuner "oracle" needs (a model of the world); `prior` is what
        sd "learned" starts from where a model predicts the rates (tltsim.control.learned.prior_from)."""
        knobs = {}
        if self.tuner in ("beg", "egreedy"):
            knobs["eps"] = self.eps
        if self.tuner == "oracle":
            knobs["expected_reward"] = expected_reward
        tuner = make_tuner(self.tuner, parse_arms(self.arms), seed=seed * 1000 + engine, **knobs)
        if self.sd == "learned":
            switch = LearnedSwitch(self.threshold, self.patience, prior)
            return EngineControl(switch, tuner, switch)
        return EngineControl(SDSwitch(self.sd, self.threshold, self.patience), tuner,
                             SpeculationGuard(trial=self.guard_trial) if self.guard else None)

    def trainer(self, workers: int) -> SpotTrainer:
        """The spot trainer over `workers` workers."""
        return SpotTrainer(workers, min_idle=min(self.min_idle, workers), cadence=self.cadence, enabled=self.spot)

    def buffer(self) -> DataBuffer:
        """The drafter's data buffer."""
        return DataBuffer(self.buffer_steps, self.keep_long_prev)


def knobs_from_text(pairs: list[str]) -> dict:
    """KEY=VALUE strings (the CLI's `--knob`) as a knob dict: a value is read as JSON (16, 0.5, true), else kept
    as the string it is (8_4_48)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise TltsimError(f"--knob {pair!r}: expected KEY=VALUE, e.g. --knob threshold=16")
        try:
            out[key.strip()] = json.loads(value, parse_constant=_not_finite(pair))
        except (json.JSONDecodeError, RecursionError):
            out[key.strip()] = value
    return out


def _not_finite(pair: str):
    def refuse(constant: str):  # json's NaN, Infinity, -Infinity
        raise TltsimError(f"--knob {pair!r}: {constant} is not a finite number; give a number, e.g. 0.5")
    return refuse
