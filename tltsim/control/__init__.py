"""The policy layer: decisions both executors (simulator and `real/`) drive.

Plain objects with no simpy and no torch: each takes what was observed and
returns a decision. The simulator calls them with simulated time; `real/`
calls the very same objects with the wall clock (docs/design.md#one-policy-layer-two-executors, "one policy
layer, two executors"). The acceptance and drafter-quality models the simulator's
policies act on are the simulator's world model (tltsim/sim/acceptance.py, drafter_quality.py).
"""
from tltsim.control.control import EngineControl
from tltsim.control.coordinator import (
    CHECKPOINT_S, DataBuffer, SpotTrainer, TrainingData, WorkerState)
from tltsim.control.guard import SpeculationGuard
from tltsim.control.strategy import DEFAULT_ARMS, DEFAULT_STRATEGY, Strategy, parse_arms
from tltsim.control.switch import SDSwitch
from tltsim.control.tuner import (
    TUNERS, BEGTuner, EpsilonGreedyTuner, FixedTuner, OracleTuner, Tuner, UCB1Tuner, make_tuner)

__all__ = [
    "SpotTrainer", "WorkerState", "DataBuffer", "TrainingData", "CHECKPOINT_S",
    "Strategy", "DEFAULT_ARMS", "DEFAULT_STRATEGY", "parse_arms",
    "SDSwitch", "SpeculationGuard", "EngineControl",
    "Tuner", "BEGTuner", "EpsilonGreedyTuner", "UCB1Tuner", "FixedTuner", "OracleTuner",
    "TUNERS", "make_tuner",
]
