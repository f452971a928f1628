"""The drafter of a verl run that speculates: its accepted length per step, the quality that gives it, its drift.

    calibrate_drafter(speculation, metrics) -> DrafterCalibration  # speculation: verl_config.read_speculation's
    check_saved(section, where)                                    # a saved calibration's `drafter` section

verl logs a speculative rollout's accepted length per step (`rollout/spec_accept_length`, verl-SpeCo
`drafter/spec_decode/mean_acceptance_length`; tltsim.verl_metrics.SPEC_KEYS). Each step's drafter quality q is the
acceptance model's inverse at the run's strategy (tltsim.drafter.acceptance.invert_quality): the q whose mean accepted
length at that draft tree is the step's. The drift is a robust line (Theil-Sen, as the calibration's rollout fit)
through the steps:

- a frozen drafter: the line over every step; `drift_per_step` is the accepted length (tokens per verify, at the
  run's strategy) it loses per RL step, `quality_drift_per_step` the same in q (what the simulator's drafter
  model takes, tltsim.drafter.quality `drift`);
- a drafter trained every `train_interval` > 1 steps (training periodic, verl-SpeCo): the drafter is frozen between
  trainings, so the line is fitted within each stretch between two trainings (each stretch its own level, one
  common slope), and `recovery_per_training` is the accepted length a training gives back (the median jump at a
  stretch's start over the previous stretch's line);
- a drafter co-trained every step (training cotrain, verl's MTP `enable_train`): drift and recovery happen in every
  step together and cannot be told apart; the line's slope is the net change (`net_change_per_step`), the drift is
  left unknown (None) and a note says so: a frozen run measures it.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tltsim.analysis.drafter import fit
from tltsim.core.errors import TltsimError, TltsimNote
from tltsim.drafter.acceptance import AcceptanceModel
from tltsim.core.drafter_names import RUN_METHODS, method_name

MIN_STEPS = 3  # measured steps a line needs
# the metric read, in order of preference: verl's own, then verl-SpeCo's
METRICS = (("spec_accept_length", "rollout/spec_accept_length"),
           ("speco_accept_length", "drafter/spec_decode/mean_acceptance_length"))
KEYS = ("method", "training", "strategy", "engine", "train_interval", "metric", "accept_length", "drift_per_step",
        "quality_start", "quality_drift_per_step", "net_change_per_step", "recovery_per_training", "fit", "notes")


@dataclass
class DrafterCalibration:
    method: str  # tltsim.core.drafter_names
    training: str  # cotrain, periodic or frozen (tltsim.core.drafter_names)
    strategy: str  # depth_topk_verify of the run's draft tree
    engine: str
    train_interval: int
    metric: str  # the verl key the accepted lengths were read from
    per_step: pd.DataFrame  # step, measured, fitted (accepted length per verify), quality (inverted from measured)
    drift_per_step: float | None  # accepted length a drafter that is not retrained loses per RL step
    quality_start: float  # q of the line at the first measured step
    quality_drift_per_step: float | None  # the drift in q
    net_change_per_step: float  # the line's slope in accepted length (co-trained: drift and recovery together)
    recovery_per_training: float | None  # accepted length a periodic training gives back
    fit: str  # how it was fitted, in words
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in self.per_step.to_dict(orient="records")]
        return {"method": self.method, "training": self.training, "strategy": self.strategy, "engine": self.engine,
                "train_interval": self.train_interval, "metric": self.metric, "accept_length": rows,
                "drift_per_step": self.drift_per_step, "quality_start": self.quality_start,
                "quality_drift_per_step": self.quality_drift_per_step, "net_change_per_step": self.net_change_per_step,
                "recovery_per_training": self.recovery_per_training, "fit": self.fit, "notes": list(self.notes)}


def calibrate_drafter(spec, metrics: pd.DataFrame, model: AcceptanceModel | None = None) -> DrafterCalibration:
    """Fit the drafter of `spec` (tltsim.verl_config.VerlSpeculation) to the accepted lengths of `metrics`
    (tltsim.verl_metrics.read_metrics); TltsimError when the metrics hold none."""
    model = model or AcceptanceModel()
    column, key = next(((c, k) for c, k in METRICS if c in metrics and metrics[c].notna().any()), (None, None))
    if column is None:
        raise TltsimError(f"{spec.path} speculates ({spec.source}) but the metrics have no "
                          f"{' or '.join(k for _, k in METRICS)}: give the metrics of that run (verl logs them with "
                          f"its speculative rollout on)")
    series = metrics[column].dropna()
    steps = series.index.to_numpy(dtype=float)
    measured = series.to_numpy(dtype=float)
    strategy = spec.strategy
    quality = fit.quality(measured, model, strategy)
    notes = []
    low = int((measured < 1).sum())
    if low:
        notes.append(f"{low} step(s) logged an accepted length below 1 (verl counts a request with no verify step "
                     f"as 0 in its mean): read as quality 0")
    periodic = spec.training == "periodic"
    window = (steps // spec.train_interval) if periodic else np.zeros_like(steps)
    drift = q_drift = recovery = None
    if len(steps) < MIN_STEPS:
        slope, q_slope = 0.0, 0.0
        level, q_level = _levels(steps, measured, window, 0.0), _levels(steps, quality, window, 0.0)
        how = f"too few steps for a line ({len(steps)}, at least {MIN_STEPS}): each stretch's median, no drift"
        notes.append(f"the metrics hold {len(steps)} speculative step(s): no drift can be fitted from fewer than "
                     f"{MIN_STEPS}")
    elif periodic:
        slope, q_slope = _within_slope(steps, measured, window), _within_slope(steps, quality, window)
        level, q_level = _levels(steps, measured, window, slope), _levels(steps, quality, window, q_slope)
        drift, q_drift = -slope, -q_slope
        recovery = _recovery(steps, measured, window, slope, level)
        how = (f"one slope within the stretches between trainings (every {spec.train_interval} steps), each stretch "
               f"its own level, over {len(steps)} steps")
        if recovery is None:
            notes.append("no training falls between two measured stretches: its recovery is not measured")
    else:
        from scipy.stats import theilslopes

        slope, q_slope = float(theilslopes(measured, steps).slope), float(theilslopes(quality, steps).slope)
        level, q_level = _levels(steps, measured, window, slope), _levels(steps, quality, window, q_slope)
        how = f"a Theil-Sen line over {len(steps)} steps"
        if spec.training == "cotrain":
            notes.append("the drafter is co-trained every step (model.mtp.enable_train): drift and recovery happen "
                         "together, so the drift is not measured (the net change per step is); a run with the "
                         "drafter frozen measures it")
        else:
            drift, q_drift = -slope, -q_slope
    q_line = np.clip(np.array([q_level[w] for w in window]) + q_slope * steps, 0.0, 1.0)
    per_step = pd.DataFrame({"step": steps.astype(int), "measured": measured,
                             "fitted": [model.mean(strategy, q) for q in q_line], "quality": quality})
    return DrafterCalibration(spec.method, spec.training, str(strategy), spec.engine,
                              spec.train_interval if spec.training != "frozen" else 0, key, per_step, drift,
                              float(q_line[0]), q_drift, slope, recovery, how, notes)


def _levels(steps, values, window, slope) -> dict:
    """Each stretch's level: the median of value - slope x step (Theil-Sen's intercept)."""
    return {w: float(np.median(values[window == w] - slope * steps[window == w])) for w in np.unique(window)}


def _within_slope(steps, values, window) -> float:
    """One least-squares slope over the stretches, each centred on its own means (stretches of one step add
    nothing)."""
    dx, dy = [], []
    for w in np.unique(window):
        x, y = steps[window == w], values[window == w]
        dx.append(x - x.mean())
        dy.append(y - y.mean())
    dx, dy = np.concatenate(dx), np.concatenate(dy)
    return float((dx * dy).sum() / (dx * dx).sum()) if (dx * dx).sum() > 0 else 0.0


def _recovery(steps, values, window, slope, level) -> float | None:
    """The median over trainings of what the first step after one accepted over the previous stretch's line."""
    ws = sorted(np.unique(window))
    jumps = [float(values[window == b][0] - (level[a] + slope * steps[window == b][0]))
             for a, b in zip(ws, ws[1:]) if b == a + 1]
    return float(np.median(jumps)) if jumps else None


def check_saved(d, where: str, again: str) -> dict:
    """A saved calibration's `drafter` section (DrafterCalibration.to_json), checked: TltsimError naming `where` and what to
    do (`again`) when a key is unknown or a value is not what it must be. A section saved with the older keys
    (`family`, `cotrained`) is returned in today's, with one note line."""
    import difflib

    if not isinstance(d, dict):
        raise TltsimError(f"{where}: its drafter is not a table; {again}")
    d = _renamed(d, where, again)
    for key in d:
        if key not in KEYS:
            close = difflib.get_close_matches(str(key), KEYS, n=1)
            raise TltsimError(f"{where}: unknown drafter key {key!r}; {f'did you mean {close[0]!r}? ' if close else ''}"
                              f"a calibration's drafter keys are {', '.join(KEYS)}; {again}")
    if d.get("method") not in RUN_METHODS:
        raise TltsimError(f"{where}: drafter method {d.get('method')!r} is not one of {', '.join(RUN_METHODS)}; "
                          f"{again}")
    if d.get("training") not in ("cotrain", "periodic", "frozen"):
        raise TltsimError(f"{where}: drafter training {d.get('training')!r} is not one of cotrain, periodic, frozen; "
                          f"{again}")
    q = d.get("quality_start")
    if not finite_number(q) or not 0 <= q <= 1:
        raise TltsimError(f"{where}: drafter quality_start {q!r} is not a quality in [0, 1]; {again}")
    for key in ("drift_per_step", "quality_drift_per_step"):
        if d.get(key) is not None and not finite_number(d[key]):
            raise TltsimError(f"{where}: drafter {key} {d[key]!r} is not a number or null; {again}")
    return d


def _renamed(d: dict, where: str, again: str) -> dict:
    """A drafter section saved before the drafter's two names (`family`; `cotrained` with `train_interval`) in
    today's keys (`method`, `training`), with one note line; any other section as it is."""
    old = [k for k in ("family", "cotrained") if k in d and {"family": "method", "cotrained": "training"}[k] not in d]
    out = {k: v for k, v in d.items() if k not in ("family", "cotrained")}  # beside today's keys, the older go
    if not old:
        return out
    interval = d.get("train_interval") or 1
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < 0:
        raise TltsimError(f"{where}: drafter train_interval {d.get('train_interval')!r} is not a whole number of "
                          f"steps; {again}")
    if "family" in old:
        out["method"] = method_name(d["family"]) or d["family"]
    if "cotrained" in old:
        out["training"] = "frozen" if not d["cotrained"] else "periodic" if interval > 1 else "cotrain"
    if out.get("method") in RUN_METHODS:
        warnings.warn(TltsimNote(f"{where}: its drafter's {' and '.join(old)} read as "
                                 + ", ".join(f"{k} = {out[k]!r}" for k in ("method", "training") if k in out)))
    return out


def finite_number(v) -> bool:
    """A finite int or float, not a bool: what a saved calibration's numbers must be."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
