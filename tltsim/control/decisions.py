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

The drafter is two knobs, `drafter` (its method) and `training` (tltsim.core.drafter_names). The knobs they replaced
(`drafter` = adaptive, static or history; `family`; `spot`; `cotrain`) are read as what they became, with one note
line each (`renamed`): recorded runs and saved configs carry them.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass

from tltsim.core.errors import TltsimError, TltsimNote
from tltsim.control.control import EngineControl
from tltsim.control.coordinator import DataBuffer, SpotTrainer
from tltsim.control.guard import SpeculationGuard
from tltsim.control.knobs import check_fields, knob
from tltsim.control.learned import LearnedSwitch
from tltsim.control.strategy import DEFAULT_ARMS, parse_arms
from tltsim.control.switch import SD_MODES, SDSwitch
from tltsim.control.tuner import TUNERS, make_tuner
from tltsim.core.drafter_names import METHOD_NAMES, MODEL_FREE, TRAINED, method_name, training_name

SIMULATED_TRAININGS = ("spot", "cotrain", "frozen")  # periodic training is read from runs, not simulated
RENAMED_KNOBS = ("family", "spot", "cotrain")  # knobs the drafter's two replaced (DecisionKnobs.renamed reads them)

# name -> knob defaults that differ from DecisionKnobs()
VARIANTS = {
    "tlt": {},
    "tlt-base": {"drafter": "ngram", "training": "frozen"},
    "static-sd": {"training": "frozen"},
    "sd-always": {"sd": "always"},
    "tlt-auto": {"sd": "learned"},
    "das": {"drafter": "suffix", "training": "frozen"},
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
    drafter: str = knob("eagle", choices=METHOD_NAMES)  # the drafter's method (tltsim.core.drafter_names): a
    # trained one (eagle, eagle3, mtp, draft_model, dflash, dspark; the config's where not given), ngram or suffix
    # (no model), hybrid (suffix where its match is long and confident, else the config's trained method)
    training: str = knob("spot", choices=SIMULATED_TRAININGS)  # how a trained drafter keeps up: spot (on workers
    # idle in the rollout's tail), cotrain (inside the actor update), frozen (never)
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
        if k.training != "frozen" and k.drafter in MODEL_FREE:
            raise TltsimError(f"policy {name!r}: training = {k.training!r} needs a drafter with weights (method "
                              f"{k.drafter} has nothing to train); give training=frozen")
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

    @property
    def spot(self) -> bool:
        """Whether the drafter trains on workers idle in the rollout's tail."""
        return self.training == "spot"

    def trainer(self, workers: int, idle: bool = True) -> SpotTrainer:
        """The spot trainer over `workers` workers (`idle` false: the drafter spot-trains elsewhere)."""
        return SpotTrainer(workers, min_idle=min(self.min_idle, workers), cadence=self.cadence,
                           enabled=self.spot and idle)

    @staticmethod
    def renamed(name: str, values: dict, defaults: dict | None = None) -> dict:
        """`values` (the knobs given) with those the drafter's two knobs replaced read as what they became, a note
        line each: drafter = adaptive / static (a trained drafter: training spot / frozen), history (suffix), an
        older method spelling; family (the trained drafter's method); spot (training spot; false: frozen, or spot on
        the dedicated GPUs alone where the policy keeps some); cotrain (training cotrain). `defaults` (the variant's
        knobs) is what they are read against. An older knob that says otherwise than a knob of today given beside
        it is a TltsimError."""
        out = dict(values)
        context = {**(defaults or {}), **values}
        explicit = {k: values[k] for k in ("drafter", "training")
                    if k in values and values[k] in (METHOD_NAMES if k == "drafter" else SIMULATED_TRAININGS)}
        said = []

        def becomes(old: str, new: dict):
            for k, v in new.items():
                if k in explicit and explicit[k] != v:
                    raise TltsimError(f"policy {name!r}: {old} (an older knob) means {k} = {v!r}, but {k} = "
                                      f"{explicit[k]!r} is given too; give {k} alone")
            said.append(f"{old} reads as {', '.join(f'{k} = {v!r}' for k, v in new.items())}")
            out.update(new)
            context.update(new)

        drafter = values.get("drafter")
        if drafter in ("adaptive", "static"):  # a trained drafter: the variant's, or the default method if it has none
            del out["drafter"]
            context.pop("drafter", None)
            trained = (defaults or {}).get("drafter", "eagle") in TRAINED
            becomes(f"drafter = {drafter!r}", {**({} if trained else {"drafter": "eagle"}),
                                               "training": "spot" if drafter == "adaptive" else "frozen"})
        elif drafter not in METHOD_NAMES and method_name(drafter):
            becomes(f"drafter = {drafter!r}", {"drafter": method_name(drafter)})
        if "family" in out:
            family = out.pop("family")
            method = method_name(family)
            if method not in TRAINED:
                raise TltsimError(f"policy {name!r}: family = {family!r} (an older knob) must be one of "
                                  f"{', '.join(TRAINED)}; give drafter=METHOD")
            if context.get("drafter", "eagle") in TRAINED:
                becomes(f"family = {family!r}", {"drafter": method})
            else:
                said.append(f"family = {family!r} is left out: the drafter is {context['drafter']!r}")
        if isinstance(out.get("cotrain"), bool):
            cotrain = out.pop("cotrain")
            if cotrain:
                becomes("cotrain = True", {"training": "cotrain"})
            else:
                said.append("cotrain = False is left out: it was the default")
        if isinstance(out.get("spot"), bool):
            spot = out.pop("spot")
            if context.get("training") == "cotrain" and "cotrain" in values:
                said.append(f"spot = {spot!r} is left out: training is 'cotrain'")
            elif not spot and context.get("dedicated_gpus", 0):
                becomes("spot = False", {"training": "spot"})  # on the dedicated GPUs alone, as it trained then
            else:
                becomes(f"spot = {spot!r}", {"training": "spot" if spot else "frozen"})
        training = out.get("training")
        if training_name(training) not in (None, training):
            becomes(f"training = {training!r}", {"training": training_name(training)})
        for line in said:
            warnings.warn(TltsimNote(f"policy {name!r}: knob {line} (the drafter's knobs are drafter, its method, "
                                     f"and training: `tltsim policies`)"))
        return out

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
