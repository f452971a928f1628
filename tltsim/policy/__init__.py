"""The policy layer: decisions both executors (simulator and `real/`) drive.

Plain objects with no simpy and no torch: each takes what was observed and
returns a decision. The simulator calls them with simulated time; `real/`
calls the very same objects with the wall clock (docs/design.md#one-policy-layer-two-executors, "one policy
layer, two executors"). Also here: the acceptance and drafter-quality models
the policies act on.
"""
from tltsim.policy.acceptance import (
    Q_ADAPTIVE_RL, Q_STATIC_RL, Q_TRAINED, AcceptanceModel)
from tltsim.policy.control import EngineControl
from tltsim.policy.coordinator import (
    CHECKPOINT_S, DataBuffer, SpotTrainer, TrainingData, WorkerState)
from tltsim.policy.drafter import Q_NGRAM, DrafterConfig, DrafterQuality, NgramDrafter
from tltsim.policy.guard import SpeculationGuard
from tltsim.policy.strategy import DEFAULT_ARMS, Strategy, parse_arms
from tltsim.policy.switch import SDSwitch
from tltsim.policy.tuner import (
    TUNERS, BEGTuner, EpsilonGreedyTuner, FixedTuner, OracleTuner, Tuner, UCB1Tuner, make_tuner)

__all__ = [
    "AcceptanceModel", "Q_TRAINED", "Q_STATIC_RL", "Q_ADAPTIVE_RL",
    "SpotTrainer", "WorkerState", "DataBuffer", "TrainingData", "CHECKPOINT_S",
    "DrafterConfig", "DrafterQuality", "NgramDrafter", "Q_NGRAM",
    "Strategy", "DEFAULT_ARMS", "parse_arms",
    "SDSwitch", "SpeculationGuard", "EngineControl",
    "Tuner", "BEGTuner", "EpsilonGreedyTuner", "UCB1Tuner", "FixedTuner", "OracleTuner",
    "TUNERS", "make_tuner",
]
