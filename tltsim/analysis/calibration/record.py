"""A calibration as a record: what `calibrate` fitted (Calibration, phase by phase: PHASES), the JSON `tltsim
validate --save-calibration` writes (FORMAT, its KEYS), checked on reading (load_calibration), and what it sets in
a cluster's config (apply, drafter_overrides, describe, cluster_notes)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tltsim import config as configmod
from tltsim.analysis.drafter.calibrate import check_saved, finite_number
from tltsim.config import SimConfig
from tltsim.cost import PhaseCalibration
from tltsim.core.errors import TltsimError
from tltsim.core.io import write_json

FORMAT = "tltsim.analysis.calibration/2"
KEYS = ("format", "phases", "reward_s", "rollout_fit", "fitted_steps", "error_before", "error_after",  # to_json's
        "step_error_before", "step_error_after", "cluster", "sources", "timed", "notes", "per_step",
        "drafter")  # the drafter of a run that speculated (tltsim.analysis.drafter.calibrate), null otherwise

# the simulator's phases that verl times, and verl's timers (tltsim.verl_metrics.TIMERS) that time each
PHASES = {"rollout": ("gen",), "reward": ("reward",), "logprob": ("old_log_prob", "ref", "values"),
          "train": ("update_actor", "update_critic"), "sync": ("update_weights",)}
FACTORED = ("logprob", "train", "sync")  # fitted as a factor on the cost model's time


@dataclass
class Calibration:
    phases: PhaseCalibration | None  # the factors and fixed costs; None when no step could be fitted
    reward_s: float | None  # the reward's seconds a step (rl.reward_s)
    rollout_fit: str  # how the rollout was fitted, in words (one factor, or a factor and a fixed cost, and why)
    error_before: float | None  # median |predicted / measured - 1| of per-step rollout time, as the model is
    error_after: float | None  # ... calibrated
    step_error_before: float | None  # the same for the whole step (timing_s/step), where the metrics have it
    step_error_after: float | None
    per_step: pd.DataFrame  # one row per step of the metrics or the trace (see `calibrate`)
    notes: list[str] = field(default_factory=list)  # what did not match, in words
    cluster: dict = field(default_factory=dict)  # the cluster it was fitted on
    sources: dict = field(default_factory=dict)  # the files it was fitted from: metrics, trace, verl_config
    timed: dict = field(default_factory=dict)  # phase -> whether the metrics time it
    drafter: dict | None = None  # a run that speculated: its drafter (tltsim.analysis.drafter.calibrate.DrafterCalibration.to_json)

    def to_json(self) -> dict:
        rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
                for r in self.per_step.to_dict(orient="records")]
        phases = None if self.phases is None else {k: v for k, v in asdict(self.phases).items() if k != "source"}
        return {"format": FORMAT, "phases": phases, "reward_s": self.reward_s, "rollout_fit": self.rollout_fit,
                "fitted_steps": int(self.per_step["fitted"].sum()), "error_before": self.error_before,
                "error_after": self.error_after, "step_error_before": self.step_error_before,
                "step_error_after": self.step_error_after, "cluster": self.cluster, "sources": self.sources,
                "timed": self.timed, "notes": self.notes, "per_step": rows, "drafter": self.drafter}

    def phase_table(self) -> pd.DataFrame:
        """One row per phase: verl's timers, their median seconds and the model's over the fitted steps, and the
        calibration (a factor on the model, and a fixed cost a step)."""
        fit, p = self.per_step[self.per_step["fitted"]], self.phases
        rows = []
        for phase, timers in [*PHASES.items(), ("other", ("step minus the above",))]:
            col = "gen" if phase == "rollout" else phase
            measured = fit[f"measured_{col}_s"].median() if self.timed.get(phase) else np.nan
            factor = getattr(p, phase) if p is not None and phase in ("rollout", *FACTORED) else np.nan
            fixed = ({"rollout": p.rollout_fixed_s, "reward": self.reward_s, "other": p.other_s}.get(phase, 0.0)
                     if p is not None else np.nan)
            rows.append({"phase": phase, "timers": ", ".join(timers), "measured_s": measured,
                         "predicted_s": fit[f"predicted_{col}_s"].median() if phase != "other" else np.nan,
                         "factor": factor, "fixed_s": fixed})
        return pd.DataFrame(rows)


def save(cal: Calibration, path) -> Path:
    """Write `cal` as JSON (atomically); refuses one with nothing fitted."""
    if cal.phases is None:
        raise TltsimError(f"no calibration to save to {path}: " + "; ".join(cal.notes))
    write_json(path, cal.to_json())
    return Path(path)


def load_calibration(path) -> dict:
    """The saved calibration's JSON (Calibration.to_json); TltsimError when it is not one."""
    path = Path(path)
    again = f"make one with `tltsim validate --verl-metrics ... --save-calibration {path.name}`"
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TltsimError(f"{path}: not a readable calibration file ({e}); {again}") from None
    if not isinstance(d, dict) or not str(d.get("format", "")).startswith("tltsim.analysis.calibration/"):
        raise TltsimError(f"{path}: not a tltsim calibration (no format {FORMAT!r}); {again}")
    if d["format"] != FORMAT:
        raise TltsimError(f"{path}: a calibration of another tltsim ({d['format']}, this one reads {FORMAT}); "
                          f"{again.replace('make one', 'make it again')}")
    _known(path, d, KEYS, "key", again)
    phases, reward = d.get("phases"), d.get("reward_s")
    names = [f.name for f in PhaseCalibration.__dataclass_fields__.values() if f.name != "source"]
    if isinstance(phases, dict):
        _known(path, phases, names, "phase", again)
    if (not isinstance(phases, dict) or sorted(phases) != sorted(names) or not all(finite_number(v) for v in phases.values())
            or not finite_number(reward)):
        raise TltsimError(f"{path}: its phases ({', '.join(names)}) and reward_s are not all numbers; {again}")
    if not isinstance(d.get("cluster", {}), dict) or not isinstance(d.get("sources") or {}, dict):
        raise TltsimError(f"{path}: its cluster and sources are not tables; {again}")
    PhaseCalibration(**phases).checked()
    if d.get("drafter") is not None:
        d = {**d, "drafter": check_saved(d["drafter"], str(path), again)}
    return d


def _known(path, d: dict, known, what: str, again: str) -> None:
    """TltsimError for the first key of `d` not among `known` (a misspelt key would be silently ignored), naming
    it, the close match if there is one, and the known keys."""
    import difflib

    for key in d:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise TltsimError(f"{path}: unknown {what} {key!r}; {hint}a calibration's {what}s are "
                              f"{', '.join(known)}; {again}")


def apply(saved: dict, cfg: SimConfig, path=None) -> SimConfig:
    """`cfg` on the calibrated cluster of `saved` (Calibration.to_json, or load_calibration's): its factors and
    fixed costs (tltsim.cost.calibrated), its reward time, and the words that say where they come from."""
    return configmod.override(cfg, **{f"calibration.{k}": v for k, v in saved["phases"].items()},
                              **{"calibration.source": describe(saved, path), "rl.reward_s": saved["reward_s"]},
                              **drafter_overrides(saved.get("drafter"), path))


def drafter_overrides(drafter: dict | None, path=None) -> dict:
    """The config's drafter section (tltsim.config.DrafterWorld) from a calibration's fitted drafter: its method,
    the quality it started at and its drift in quality per policy update (none where it was not measured or the
    drafter gained: the default drift then, or 0); {} without one."""
    if not drafter:
        return {}
    drift = drafter.get("quality_drift_per_step")
    return {"drafter.method": drafter["method"], "drafter.q_start": drafter["quality_start"],
            **({"drafter.drift": max(0.0, drift)} if drift is not None else {}),
            "drafter.source": f"{path or 'calibration'}: {drafter['method']} drafter fitted to the run's accepted "
                              f"lengths ({drafter.get('metric')})"}


def describe(saved: dict, path=None) -> str:
    """One line: the calibration's factors and fixed costs, the files it was fitted from, the fit's error."""
    p, src = saved["phases"], saved.get("sources") or {}
    files = ", ".join(f"{k} {v}" for k, v in src.items())
    err = saved.get("error_after")
    step_err = saved.get("step_error_after")
    error = (f"; median |error| after it: rollout {err:.1%}" if err is not None else "") + (
        f", step {step_err:.1%}" if step_err is not None else "")
    return (f"{path or 'calibration'}: rollout x{p['rollout']:.3f} + {p['rollout_fixed_s']:.3g} s, log-prob "
            f"x{p['logprob']:.3f}, update x{p['train']:.3f}, weight sync x{p['sync']:.3f}, reward "
            f"{saved['reward_s']:.3g} s, rest of the step {p['other_s']:.3g} s; fitted on "
            f"{saved.get('fitted_steps', '?')} steps" + (f" of {files}" if files else "") + error)


def cluster_notes(saved: dict, cfg: SimConfig, path) -> list[str]:
    """Where the cluster a calibration is applied to differs from the one it was fitted on in GPU or model."""
    c, fitted = cfg.cluster, saved.get("cluster", {})
    diff = [f"{k} {fitted[k]} (now {getattr(c, k)})" for k in ("gpu", "model") if k in fitted and fitted[k] != getattr(c, k)]
    return [f"{path}: fitted on {', '.join(diff)}; its factors are of that GPU and model"] if diff else []

