"""Calibrate the simulator to a user's cluster from a verl run: `tltsim validate --verl-metrics M --trace T`.

The run's trace (its rollout dump, `tltsim trace convert`) goes through the simulator under the verl
baseline on the run's cluster (flags or `--verl-config`); each step's predicted rollout and step time
sit beside the measured `timing_s/gen` and `timing_s/step`. One speed factor, measured over predicted
rollout time, is fitted as the median of the per-step ratios, so a few bad steps (a checkpoint save, a
slow node) do not move it. `error_before` / `error_after` are the median absolute relative error of the
per-step rollout time without and with the factor.

Metrics that do not belong to the trace are reported, not fitted: steps the trace lacks (or that lack
metrics), and steps whose `response_length/mean` or `/max` differ from the trace's by more than
LENGTH_TOLERANCE (the dump's counts leave out the EOS token verl counts: a token or so).

The saved calibration (`--save-calibration cal.json`) holds the factor and the cluster it was fitted on;
`tltsim simulate|compare --calibration cal.json` multiplies every cost-model time by it
(SimConfig.speed_factor), so `compare` predicts every policy on the calibrated cluster.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from tltsim.config import SimConfig
from tltsim.errors import TltsimError
from tltsim.io import write_json
from tltsim.sim.simulator import Simulator
from tltsim.trace import Trace

LENGTH_TOLERANCE = (2.0, 0.05)  # tokens, fraction: lengths agree within 2 tokens + 5%
FORMAT = "tltsim.analysis.calibration/1"


@dataclass
class Calibration:
    speed_factor: float | None  # measured / predicted rollout time; None when no step could be fitted
    error_before: float | None  # median |predicted / measured - 1| of per-step rollout time, as the model is
    error_after: float | None  # ... with the speed factor
    step_error_before: float | None  # the same for the whole step (timing_s/step), where the metrics have it
    step_error_after: float | None
    per_step: pd.DataFrame  # one row per step of the metrics or the trace (see `calibrate`)
    notes: list[str] = field(default_factory=list)  # what did not match, in words
    cluster: dict = field(default_factory=dict)  # the cluster the factor was fitted on

    def to_json(self) -> dict:
        rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
                for r in self.per_step.to_dict(orient="records")]
        return {"format": FORMAT, "speed_factor": self.speed_factor, "error_before": self.error_before,
                "error_after": self.error_after, "step_error_before": self.step_error_before,
                "step_error_after": self.step_error_after, "cluster": self.cluster, "notes": self.notes,
                "per_step": rows}


def calibrate(trace: Trace, cfg: SimConfig, metrics: pd.DataFrame) -> Calibration:
    """Fit the speed factor of `cfg`'s cluster from `metrics` (tltsim.verl_metrics.read_metrics) of the run `trace` records.

    per_step columns: step, measured_gen_s, predicted_gen_s, calibrated_gen_s, gen_error_before, gen_error_after,
    measured_step_s, predicted_step_s, calibrated_step_s, step_error_before, step_error_after, trace_len_mean,
    metrics_len_mean, trace_len_max, metrics_len_max, fitted (bool), reason (why a step is not fitted, or "")."""
    cfg = replace(cfg, policy="verl", speed_factor=1.0)
    trace_steps, metric_steps = set(trace.steps), {int(s) for s in metrics.index}
    common = sorted(trace_steps & metric_steps)
    notes = []
    if metric_steps - trace_steps:
        notes.append(f"metrics steps {_ranges(metric_steps - trace_steps)} are not in the trace: not fitted")
    if trace_steps - metric_steps:
        notes.append(f"trace steps {_ranges(trace_steps - metric_steps)} have no metrics (timing_s/gen): not fitted")
    if metrics[["len_mean", "len_max"]].isna().all().all():
        notes.append("the metrics have no response_length/mean or /max: whether they belong to the trace is not checked")
    if not common:
        raise TltsimError(f"the metrics' steps ({_ranges(metric_steps)}) and the trace's ({_ranges(trace_steps)}) "
                          f"have none in common; give the metrics and the rollout dump of one run")
    pred = Simulator(trace.select_steps(common), cfg).run().steps.set_index("step")
    lengths = trace.df.groupby("step")["response_len"].agg(["mean", "max"])
    rows = []
    for s in sorted(trace_steps | metric_steps):
        m = metrics.loc[s] if s in metric_steps else None
        row = {"step": s,
               "measured_gen_s": _get(m, "gen_s"), "predicted_gen_s": _at(pred, s, "rollout_s"),
               "measured_step_s": _get(m, "step_s"), "predicted_step_s": _at(pred, s, "total_s"),
               "trace_len_mean": _at(lengths, s, "mean"), "metrics_len_mean": _get(m, "len_mean"),
               "trace_len_max": _at(lengths, s, "max"), "metrics_len_max": _get(m, "len_max")}
        row["reason"] = _reason(row, s in trace_steps, m is not None)
        row["fitted"] = not row["reason"]
        rows.append(row)
    df = pd.DataFrame(rows)
    mismatched = df[df["reason"].str.startswith("lengths")]
    if len(mismatched):
        notes.append(f"steps {_ranges(mismatched['step'])}: the metrics' response lengths (mean "
                     f"{mismatched['metrics_len_mean'].mean():.0f}) are not the trace's (mean "
                     f"{mismatched['trace_len_mean'].mean():.0f}): not fitted; the metrics may come from another run")
    fit = df[df["fitted"]]
    factor = float(np.median(fit["measured_gen_s"] / fit["predicted_gen_s"])) if len(fit) else None
    if factor is None:
        notes.append("no step of the metrics matches the trace: the metrics and the trace are not of one run; "
                     "no speed factor fitted")
    k = factor if factor is not None else np.nan
    for what in ("gen", "step"):
        df[f"calibrated_{what}_s"] = k * df[f"predicted_{what}_s"]
        df[f"{what}_error_before"] = df[f"predicted_{what}_s"] / df[f"measured_{what}_s"] - 1
        df[f"{what}_error_after"] = df[f"calibrated_{what}_s"] / df[f"measured_{what}_s"] - 1
    fit = df[df["fitted"]]
    c = cfg.cluster
    return Calibration(
        speed_factor=factor,
        error_before=_median_abs(fit["gen_error_before"]), error_after=_median_abs(fit["gen_error_after"]),
        step_error_before=_median_abs(fit["step_error_before"]), step_error_after=_median_abs(fit["step_error_after"]),
        per_step=df[_COLUMNS], notes=notes,
        cluster={"gpu": c.gpu, "model": c.model, "gpus": c.gpus, "tp": c.tp, "max_running": c.max_running,
                 "mem_fraction": cfg.cost.mem_fraction},
    )


_COLUMNS = ["step", "measured_gen_s", "predicted_gen_s", "calibrated_gen_s", "gen_error_before", "gen_error_after",
            "measured_step_s", "predicted_step_s", "calibrated_step_s", "step_error_before", "step_error_after",
            "trace_len_mean", "metrics_len_mean", "trace_len_max", "metrics_len_max", "fitted", "reason"]


def save(cal: Calibration, path) -> Path:
    """Write the calibration as JSON (atomically); refuses one without a factor."""
    if cal.speed_factor is None:
        raise TltsimError(f"no speed factor to save to {path}: " + "; ".join(cal.notes))
    write_json(path, cal.to_json())
    return Path(path)


def load_calibration(path) -> dict:
    """The saved calibration's JSON (speed_factor and cluster at least); TltsimError when it is not one."""
    path = Path(path)
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TltsimError(f"{path}: not a readable calibration file ({e}); make one with "
                          f"`tltsim validate --verl-metrics ... --save-calibration {path.name}`") from None
    f = d.get("speed_factor") if isinstance(d, dict) else None
    if (not isinstance(d, dict) or d.get("format") != FORMAT or isinstance(f, bool) or not isinstance(f, (int, float))
            or not 0 < f < float("inf") or not isinstance(d.get("cluster", {}), dict)):
        raise TltsimError(f"{path}: not a tltsim calibration (no format {FORMAT!r} with a finite speed_factor > 0 and a cluster table); "
                          f"make one with `tltsim validate --verl-metrics ... --save-calibration {path.name}`")
    return d


def cluster_notes(saved: dict, cfg: SimConfig, path) -> list[str]:
    """Where the cluster a calibration is applied to differs from the one it was fitted on in GPU or model."""
    c, fitted = cfg.cluster, saved.get("cluster", {})
    diff = [f"{k} {fitted[k]} (now {getattr(c, k)})" for k in ("gpu", "model") if k in fitted and fitted[k] != getattr(c, k)]
    return [f"{path}: fitted on {', '.join(diff)}; its speed factor is of that GPU and model"] if diff else []


def _reason(row: dict, in_trace: bool, in_metrics: bool) -> str:
    if not in_trace:
        return "not in the trace"
    if not in_metrics:
        return "no metrics"
    slack, rel = LENGTH_TOLERANCE
    for what in ("mean", "max"):
        t, m = row[f"trace_len_{what}"], row[f"metrics_len_{what}"]
        if not np.isnan(m) and abs(m - t) > slack + rel * t:
            return f"lengths differ (response_length/{what} {m:.0f}, trace {t:.0f})"
    if not row["predicted_gen_s"] > 0:
        return "no rollout predicted"
    return ""


def _get(m, key: str) -> float:
    return float(m[key]) if m is not None and key in m.index else np.nan


def _at(frame: pd.DataFrame, s: int, col: str) -> float:
    return float(frame.at[s, col]) if s in frame.index else np.nan


def _median_abs(x: pd.Series) -> float | None:
    x = x.dropna()
    return float(x.abs().median()) if len(x) else None


def _ranges(steps) -> str:
    """2, 3, 4, 7 -> '2-4, 7'."""
    s = sorted(int(x) for x in steps)
    out, start = [], None
    for a, b in zip(s, s[1:] + [None]):
        start = a if start is None else start
        if b != a + 1:
            out.append(f"{start}-{a}" if a != start else f"{a}")
            start = None
    return ", ".join(out)
