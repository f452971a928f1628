"""The simulator's drafter-staleness model fitted to real runs, and what it predicts for a run at another learning rate.

    read_probes(run_dir) -> Probes                       # a real run's drafter probes, per step
    fit_drafter(spot_runs, frozen_runs=None)             # -> DrafterFit (`tltsim fit-drafter`)
    predict_gap(fit, probes, drift_scale) -> GapPrediction
    mean_gap(predictions) -> dict                        # the gap over runs of one config (seeds)

A `tltsim real run` of a speculative policy measures, before every step, its drafter's accepted length on fixed
held-out prompts with the current target (steps column `drafter_accepted`, greedy, a chain of 4); with
`--probe-static` also the drafter it started from, never trained (`static_drafter_accepted`). Inverted through the
acceptance model each gives the drafter's quality q per step, the unit of the simulator's drafter model
(tltsim.drafter.quality):

- the static drafter measures the drift: q_s = q_0 - drift x s, the drift a robust (Theil-Sen) slope, never below 0;
- the spot-trained drafter then fixes the learning curve: q_{s+1} = q_s + (q_max - q_s)(1 - exp(-n_s / tau)) - drift,
  with n_s the samples it trained on in step s (batches x drafter_batch); q_max and tau by least squares.

The static series comes from a second run of the same config without drafter training (static-sd), or from the
spot run's own `static_drafter_accepted` (one run, the same targets and prompts for both drafters).

`predict_gap` plays the fitted model on another run's steps (its own start and its own training samples) with the
drift times `drift_scale`, and compares the spot-vs-static gap (the mean over the steps after the first of the spot
drafter's accepted length minus the static one's) with what that run measured. A run at another learning rate of
the target takes the ratio of the two rates as its scale: AdamW moves each weight by about the learning rate a step,
whatever the gradient's size, so the target moves, and the drafter goes stale, in proportion to it (first order).
benchmarks/bench_drift.py measures where that holds: on the shipped small target the fitted drift rose 18.5x for 50x
the rate, and the mean gap over 12 seeds came back within 10% both ways; where rewards are sparse (SmolLM2 on the
long-tail workload) GRPO has a gradient in few steps, the rate does not set how far the target moves, and the scaled
drift misleads.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tltsim.control import DEFAULT_STRATEGY
from tltsim.core.errors import TltsimError
from tltsim.core.records import Result
from tltsim.drafter.acceptance import AcceptanceModel, invert_quality
from tltsim.drafter.quality import DrafterConfig, DrafterQuality


@dataclass
class Probes:
    """A real run's drafter probes, per step (before the step's rollout, with the target of the step before)."""

    path: str
    spot: np.ndarray  # the policy's (spot-trained) drafter's accepted length
    static: np.ndarray | None  # the starting drafter's, never trained (--probe-static), else None
    samples: np.ndarray  # samples the spot drafter trained on in each step
    lr: float | None  # the target's learning rate (config.json grpo.lr)


def quality(accepted, model: AcceptanceModel, strategy=DEFAULT_STRATEGY) -> np.ndarray:
    """The drafter quality q whose mean accepted length at `strategy` (default: the probe's chain of 4) is each of
    `accepted`."""
    return np.array([invert_quality(model, strategy, a) for a in accepted])


def read_probes(run_dir: str | Path, drafter_batch: int | None = None) -> Probes:
    """The probes of the run in `run_dir`; TltsimError when it has none, a step without one, fewer than 2 steps or a
    learning rate that is not > 0."""
    res = Result.load(run_dir)
    steps = res.steps
    if "drafter_accepted" not in steps or steps["drafter_accepted"].isna().all():
        raise TltsimError(f"{run_dir}: no drafter_accepted per step; `tltsim fit-drafter` fits runs made with "
                          f"`tltsim real run --probe N` (N > 0) of a speculative policy")
    if len(steps) < 2:
        raise TltsimError(f"{run_dir}: {len(steps)} step(s); calibration needs at least 2")
    static = steps.get("static_drafter_accepted")
    static = None if static is None or static.isna().all() else static
    for name, column in (("drafter_accepted", steps["drafter_accepted"]), ("static_drafter_accepted", static)):
        if column is not None and column.isna().any():
            missing = steps["step"][column.isna()].tolist() if "step" in steps else column.index[column.isna()].tolist()
            raise TltsimError(f"{run_dir}: {name} is missing at step(s) {', '.join(map(str, missing))}; a fit "
                              f"needs every step's probe (a run made with --probe 0 for a while cannot be fitted)")
    batch = drafter_batch or int(res.config.get("drafter_batch", 8))
    batches = steps.get("drafter_train_batches", pd.Series(0, index=steps.index)).to_numpy(float)
    lr = (res.config.get("grpo") or {}).get("lr")
    if lr is not None and not (isinstance(lr, (int, float)) and lr > 0):
        raise TltsimError(f"{run_dir}: config.json's grpo.lr is {lr!r}; a target learning rate must be > 0")
    return Probes(str(run_dir), steps["drafter_accepted"].to_numpy(float),
                  static.to_numpy(float) if static is not None else None, batches * batch,
                  float(lr) if lr is not None else None)


@dataclass
class DrafterFit:
    """Drafter-staleness parameters fitted from real runs (see `fit_drafter`)."""

    q_start: float  # drafter quality before the first policy update (the runs' mean)
    q_max: float  # the learning curve's asymptote
    drift: float  # quality lost per policy update (from the static drafter's probes)
    tau_samples: float  # training samples that close 63% of the quality gap (from the spot-trained drafter's)
    rms_error: float  # RMS error of the modelled vs measured quality over both series' steps
    qualities: pd.DataFrame  # run, drafter (spot or static), step, measured quality, modelled quality
    lr: float | None = None  # the fitted run's target learning rate

    def knobs(self) -> dict:
        """As simulator policy knobs (--knob q_start=... drift=... tau_samples=...)."""
        return {"q_start": self.q_start, "q_max": self.q_max, "drift": self.drift, "tau_samples": self.tau_samples}


def spot_trajectory(q0: float, samples: np.ndarray, q_max: float, tau: float, drift: float) -> np.ndarray:
    """The spot drafter's quality before each step, as the simulator's drafter model plays it
    (tltsim.drafter.quality, floored at 0): trained on that step's samples, then the policy update."""
    drafter = DrafterQuality(DrafterConfig(q_start=q0, q_max=q_max, drift=drift, q_floor=0.0, tau_samples=tau))
    q = [q0]
    for n in samples[:-1]:
        drafter.train(float(n))
        q.append(drafter.policy_update())
    return np.array(q)


def static_trajectory(q0: float, steps: int, drift: float) -> np.ndarray:
    """The static drafter's quality before each step, as the simulator's drafter model plays it (floored at 0)."""
    drafter = DrafterQuality(DrafterConfig(q_start=q0, q_max=q0, drift=drift, q_floor=0.0), trainable=False)
    return np.array([q0] + [drafter.policy_update() for _ in range(steps - 1)])


def fit_drafter(spot_runs, frozen_runs=None, drafter_batch: int | None = None) -> DrafterFit:
    """Fit the simulator's drafter drift and recovery to spot-trained runs of one config and learning rate (a run
    directory, or several: seeds, whose noise the fit then averages) and to the static drafter's probes: those of
    `frozen_runs` (one a spot run, the same config with its drafter frozen), or, without them, each run's own
    `static_drafter_accepted` (`tltsim real run --probe-static`). The drift is the median of the runs' Theil-Sen
    slopes; q_max and tau are shared, each run's spot trajectory starting from its own first probe."""
    from scipy.optimize import minimize
    from scipy.stats import theilslopes

    spot_runs = [spot_runs] if isinstance(spot_runs, (str, Path)) else list(spot_runs)
    model = AcceptanceModel()
    runs = [read_probes(d, drafter_batch) for d in spot_runs]
    if frozen_runs is None:
        for r in runs:
            if r.static is None:
                raise TltsimError(f"{r.path}: no static_drafter_accepted per step; give the frozen run with "
                                  f"--frozen, or make the run with `tltsim real run --probe-static`")
        statics = [r.static for r in runs]
    else:
        frozen_runs = [frozen_runs] if isinstance(frozen_runs, (str, Path)) else list(frozen_runs)
        if len(frozen_runs) != len(runs):
            raise TltsimError(f"{len(frozen_runs)} frozen run(s) for {len(runs)} spot-trained one(s): give one "
                              f"frozen run a spot run, in the same order")
        statics = [read_probes(d, drafter_batch).spot for d in frozen_runs]
    lrs = {r.lr for r in runs}
    if len(lrs) > 1:
        raise TltsimError(f"the runs fitted together have target learning rates {sorted(lrs, key=str)}; fit runs of "
                          f"one learning rate and predict the others with --predict")
    q_ad = [quality(r.spot, model) for r in runs]
    q_static = [quality(st, model) for st in statics]
    drift = max(0.0, -float(np.median([theilslopes(q, np.arange(len(q))).slope for q in q_static])))

    def loss(x) -> float:  # x = (q_max, log tau)
        return float(sum(np.sum((spot_trajectory(q[0], r.samples, x[0], np.exp(x[1]), drift) - q) ** 2)
                         for q, r in zip(q_ad, runs)))

    lo = float(max(max(q.max() for q in q_ad), max(q[0] for q in q_static)))
    starts = [(qm, lt) for qm in np.linspace(lo, 1.0, 5) for lt in (0.0, 3.0, 6.0, 9.0)]
    best = min((minimize(loss, x0, bounds=[(lo, 1.0), (-5.0, 15.0)], method="L-BFGS-B") for x0 in starts),
               key=lambda r: r.fun)
    q_max, tau = float(best.x[0]), float(np.exp(best.x[1]))
    rows = []
    for r, q, qs in zip(runs, q_ad, q_static):
        name = Path(r.path).name
        rows += [{"run": name, "drafter": "spot", "step": i, "measured_q": m, "modelled_q": p}
                 for i, (m, p) in enumerate(zip(q, spot_trajectory(q[0], r.samples, q_max, tau, drift)))]
        rows += [{"run": name, "drafter": "static", "step": i, "measured_q": m, "modelled_q": p}
                 for i, (m, p) in enumerate(zip(qs, static_trajectory(qs[0], len(qs), drift)))]
    table = pd.DataFrame(rows)
    rms = float(np.sqrt(np.mean((table.measured_q - table.modelled_q) ** 2)))
    return DrafterFit(float(np.mean([q[0] for q in q_ad])), q_max, drift, tau, rms, table, runs[0].lr)


@dataclass
class GapPrediction:
    """The fitted model played on another run's steps, beside what that run measured (accepted lengths)."""

    run: str
    drift_scale: float
    per_step: pd.DataFrame  # step, samples, spot, static (measured), spot_pred, static_pred
    measured_gap: float  # mean over the steps after the first of spot - static, measured
    predicted_gap: float  # the same, predicted

    @property
    def error(self) -> float | None:
        """Relative error of the predicted gap (None when the measured gap is 0)."""
        return _gap_error(self.predicted_gap, self.measured_gap)

    def to_json(self) -> dict:
        return {"run": self.run, "drift_scale": self.drift_scale, "measured_gap": self.measured_gap,
                "predicted_gap": self.predicted_gap, "error": self.error,
                "steps": self.per_step.to_dict(orient="records")}


def _gap_error(predicted: float, measured: float) -> float | None:
    """(predicted - measured) / |measured|; None when the measured value is 0 (no gap to be relative to)."""
    return (predicted - measured) / abs(measured) if measured != 0 else None


def predict_gap(fit: DrafterFit, probes: Probes, drift_scale: float = 1.0) -> GapPrediction:
    """Play `fit` on `probes`' run (its first probe's quality, its training samples) with the drift times
    `drift_scale`; TltsimError when that run has no static probes to compare with."""
    if probes.static is None:
        raise TltsimError(f"{probes.path}: no static_drafter_accepted per step, so its spot-vs-static gap is not "
                          f"measured; make the run with `tltsim real run --probe-static`")
    if not drift_scale >= 0:
        raise TltsimError(f"drift scale {drift_scale!r}: must be >= 0")
    model = AcceptanceModel()
    q0 = float(quality(probes.spot[:1], model)[0])
    drift = fit.drift * drift_scale
    spot = spot_trajectory(q0, probes.samples, fit.q_max, fit.tau_samples, drift)
    static = static_trajectory(float(quality(probes.static[:1], model)[0]), len(probes.static), drift)
    length = np.vectorize(lambda q: model.mean(DEFAULT_STRATEGY, float(np.clip(q, 0.0, 1.0))))
    table = pd.DataFrame({"step": np.arange(len(spot)), "samples": probes.samples, "spot": probes.spot,
                          "static": probes.static, "spot_pred": length(spot), "static_pred": length(static)})
    later = table.iloc[1:]
    return GapPrediction(probes.path, drift_scale, table, float((later.spot - later.static).mean()),
                         float((later.spot_pred - later.static_pred).mean()))


def mean_gap(predictions: list[GapPrediction]) -> dict:
    """The gap averaged over runs (seeds of one config), measured and predicted, and the relative error."""
    measured = float(np.mean([p.measured_gap for p in predictions]))
    predicted = float(np.mean([p.predicted_gap for p in predictions]))
    return {"runs": len(predictions), "measured_gap": measured, "predicted_gap": predicted,
            "error": _gap_error(predicted, measured)}
