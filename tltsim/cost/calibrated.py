"""A cost model calibrated phase by phase to a measured cluster: `tltsim simulate|compare --calibration CAL.json`.

`tltsim validate --verl-metrics` (tltsim.analysis.calibration) fits, from a verl run's own timers, a factor for
each phase the simulator models and the step's fixed costs (docs/design.md#calibrating-to-a-verl-run):

    rollout   x every engine iteration (prefill, decode, draft, verify, switch)   timing_s/gen
    logprob   x the log-prob forwards                                            timing_s/old_log_prob, ref, values
    train     x the actor update                                                 timing_s/update_actor, update_critic
    sync      x the weight sync                                                  timing_s/update_weights
    rollout_fixed_s   seconds a step, the part of timing_s/gen that does not grow with the rollout's work
    other_s           seconds a step, timing_s/step outside the timed phases (adv, dumps, checkpoint saves)

The two fixed costs are paid once a step with the weight sync (verl's update_weights wakes the replicas
that sleep after generating), so every policy pays them and the timeline holds them as weight_sync. The
reward phase is a time, not a factor: a calibration sets rl.reward_s. Drafter-training throughput is divided
by the rollout factor, as the GPUs that decode slower train slower.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from tltsim.cost.scaled import StepScaled
from tltsim.core.errors import TltsimError

FACTORS = ("rollout", "logprob", "train", "sync")
FIXED = ("rollout_fixed_s", "other_s")
# A factor is measured / modelled time on one cluster. The cost model divides each phase's work by the GPU's peak
# bandwidth or FLOPs times an efficiency below 1, so no real cluster runs a phase 1000x faster than modelled (it
# would beat the hardware's peak), and one 1000x slower is not the cluster the model describes (another GPU or
# model, or a damaged file). Outside this range every time overflows or vanishes, so it is refused, not applied.
FACTOR_RANGE = (1e-3, 1e3)
MAX_FIXED_S = 86_400.0  # a fixed cost over a day a step is not one of a training step (a damaged file)


@dataclass(frozen=True)
class PhaseCalibration:
    """Per-phase factors and per-step fixed costs (module docstring); the defaults leave the cost model as it is."""

    rollout: float = 1.0
    logprob: float = 1.0
    train: float = 1.0
    sync: float = 1.0
    rollout_fixed_s: float = 0.0
    other_s: float = 0.0
    source: str = ""  # what the calibration was fitted from, in words (the report's header names it)

    @property
    def applied(self) -> bool:
        """Whether it changes any time (a default one does not)."""
        return any(getattr(self, f.name) != f.default for f in fields(self) if f.name != "source")

    def checked(self) -> "PhaseCalibration":
        """This calibration, checked (TltsimError for a bad factor)."""
        if not self.rollout > 0:
            raise TltsimError(f"calibration.rollout = {self.rollout} must be > 0 (1 = the cost model as it is)")
        for name in FACTORS[1:] + FIXED:
            if not getattr(self, name) >= 0:
                raise TltsimError(f"calibration.{name} = {getattr(self, name)} must be >= 0")
        low, high = FACTOR_RANGE
        for name in FACTORS:  # 0: a phase the metrics did not time (it is inside another phase's timer)
            v = getattr(self, name)
            if not (low <= v <= high or (v == 0 and name != "rollout")):
                raise TltsimError(f"calibration.{name} = {v:g} is outside [{low:g}, {high:g}]: a factor that far from 1 "
                                  f"is not a measured cluster's (another GPU or model, or a damaged file); "
                                  f"calibrate again on the run's cluster")
        for name in FIXED:
            if getattr(self, name) > MAX_FIXED_S:
                raise TltsimError(f"calibration.{name} = {getattr(self, name):g} s is more than {MAX_FIXED_S:g} s a "
                                  f"step (a day): not a step's fixed cost; calibrate again")
        return self


class Calibrated(StepScaled):
    """`base`'s rollout times x the rollout factor, its RL-stage times x their phase's factor, plus the fixed costs."""

    def __init__(self, base, phases: PhaseCalibration):
        super().__init__(base, {}, default=phases.rollout)
        self.phases = phases
        self.name = f"{getattr(base, 'name', 'cost')} calibrated"

    def train_time(self, tokens, gpus, sq_tokens=0.0):
        return self.phases.train * self.base.train_time(tokens, gpus, sq_tokens)

    def logprob_time(self, tokens, gpus, sq_tokens=0.0):
        return self.phases.logprob * self.base.logprob_time(tokens, gpus, sq_tokens)

    def sync_time(self):
        p = self.phases
        return p.sync * self.base.sync_time() + p.rollout_fixed_s + p.other_s
