"""Cost models: how long an engine iteration, a prefill, a verify and an RL stage take.

`CostModel` is the interface the simulator calls; `Roofline` is the analytic
implementation. A profiled model fitted from `tltsim real profile` measurements
answers the same calls. A cost model may also have `begin_step(step)`, which the simulator calls at
the start of every synchronous step (`StepScaled`: a machine whose speed drifts). `Calibrated` is a model
scaled phase by phase to a measured cluster (`--calibration`).
"""
from typing import Protocol

from tltsim.core.padding import prefill_load
from tltsim.cost.calibrated import Calibrated, PhaseCalibration
from tltsim.cost.roofline import CostParams, Roofline
from tltsim.cost.scaled import StepScaled


class CostModel(Protocol):
    kv_capacity_tokens: int
    # True: the engine prefills rows padded to the widest (tltsim.core.padding.prefill_load says what that costs)
    padded_prefill: bool

    def decode_time(self, batch, ctx): ...
    def verify_time(self, batch, tokens_per_request, ctx): ...
    def draft_time(self, batch, topk=1, vocab=None): ...  # vocab: the drafter's output vocabulary (None: the target's)
    def prefill_time(self, tokens, sq_tokens=None): ...
    def catchup_time(self, batch, tokens_per_row, ctx): ...
    def switch_time(self, batch, ctx, sq_tokens): ...
    def segment_time(self, q, k, ctx0, growth, n): ...
    def train_time(self, tokens, gpus, sq_tokens=0.0): ...
    def logprob_time(self, tokens, gpus, sq_tokens=0.0): ...
    def sync_time(self): ...
    def drafter_train_tokens_per_s(self, gpus): ...


def prefill_seconds(cost: CostModel, new, cached=None) -> float:
    """Seconds of one prefill forward on `cost`'s engine that feeds row i its `new[i]` tokens after its `cached[i]`
    cached ones (default none): padded to the widest row where the engine pads (tltsim.core.padding.prefill_load)."""
    return float(cost.prefill_time(*prefill_load(new, cached, cost.padded_prefill)))


__all__ = ["Calibrated", "CostModel", "CostParams", "PhaseCalibration", "Roofline", "StepScaled", "prefill_seconds"]
