"""The policy layer: decisions both executors (simulator and `real/`) drive.

Plain objects with no simpy and no torch: each takes what was observed and
returns a decision. The simulator calls them with simulated time; `real/`
calls the very same objects with the wall clock (docs/design.md#one-policy-layer-two-executors, "one policy
layer, two executors"). The acceptance and drafter-quality models the simulator's
policies act on are the simulator's world model (tltsim/drafter/: acceptance.py, quality.py).

Speculation: `EngineControl` (switch, tuner, guard) and the `SpotTrainer`. The other answers to the long tail:
`PartialControl` (partial rollout), `TailControl` (tail batching), `HistoryPredictor` and `lpt_shares`
(longest-first), `MigrationControl` (tail migration), over a step's rows grouped by prompt (tltsim.control.groups);
`AsyncControl` (asynchronous RL: the staleness gate, the trainer's choice).
"""
from tltsim.control.async_rl import AsyncControl
from tltsim.control.control import EngineControl
from tltsim.control.coordinator import (
    CHECKPOINT_S, DataBuffer, SpotTrainer, TrainingData, WorkerState)
from tltsim.control.groups import GroupQuota, quota_stop
from tltsim.control.guard import SpeculationGuard
from tltsim.control.migration import MigrateKnobs, MigrationControl
from tltsim.control.partial import PartialControl, PartialKnobs
from tltsim.control.placement import HistoryPredictor, LongestFirstKnobs, lpt_shares
from tltsim.control.strategy import DEFAULT_ARMS, DEFAULT_STRATEGY, Strategy, parse_arms
from tltsim.control.switch import SDSwitch
from tltsim.control.tail import TailBatchingKnobs, TailControl
from tltsim.control.tuner import (
    TUNERS, BEGTuner, EpsilonGreedyTuner, FixedTuner, OracleTuner, Tuner, UCB1Tuner, make_tuner)

__all__ = [
    "SpotTrainer", "WorkerState", "DataBuffer", "TrainingData", "CHECKPOINT_S",
    "Strategy", "DEFAULT_ARMS", "DEFAULT_STRATEGY", "parse_arms",
    "SDSwitch", "SpeculationGuard", "EngineControl",
    "Tuner", "BEGTuner", "EpsilonGreedyTuner", "UCB1Tuner", "FixedTuner", "OracleTuner",
    "TUNERS", "make_tuner",
    "PartialControl", "PartialKnobs", "TailControl", "TailBatchingKnobs", "HistoryPredictor", "LongestFirstKnobs",
    "lpt_shares", "MigrationControl", "MigrateKnobs", "GroupQuota", "quota_stop", "AsyncControl",
]
