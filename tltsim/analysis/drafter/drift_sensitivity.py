"""Is co-training the drafter worth it? The ways to get a drafter side by side, over the drift of one not retrained.

    drift_sensitivity(trace, cfg) -> [row, ...]   # one row per way and drift

A drafter that is not retrained loses accepted length as RL moves the policy (its drift per RL step); how fast
decides whether training it pays. The ways (WAYS): freeze it (`static-sd`), co-train it inside the actor update
(`cotrain`: restored every step, paid in the update phase), spot-train it on the idle GPUs of the rollout tail as
TLT does (`tlt`), draft from history (`das`: nothing to train, nothing that drifts) or the hybrid (`das+tlt`).

The drifts (SPAN, in the simulator's unit: drafter quality lost per policy update, tltsim.drafter.quality):
none, as a frozen EAGLE-3 drafter whose accepted length held over 36 RL steps (marin-community/marin#9114: 2.53
to 2.56 tokens per verification at RL steps 0, 12, 24 and 36); tltsim's default drift (DrafterConfig.drift, an
assumption: TLT, ASPLOS 2026, gives only where a stale drafter ends, 4.59 tokens against 6.53 retrained at 8_4_48,
docs/design.md#accepted-length); half of it between; and, with a calibration to a run that speculated
(tltsim.analysis.drafter.calibrate), the run's own fitted drift, marked `fitted`.

Cheap by design: each way on the trace's first STEPS steps, on the run's cluster (calibrated where it is). A
frozen drafter's quality there is the one it would have at the run's midpoint (its start less the drift times half
the trace's steps, never below the floor), so a run of many steps is judged by its typical step, not its first;
the trained ways start where the run starts (they keep up within a few steps). A history drafter does not drift
and a co-trained one is restored every step, so each of those is simulated once and its row repeated at every
drift. `saved_per_step_s` is verl's mean step time on the same steps minus the way's; `drift_per_step` is the
drift in accepted length per verify at the run's strategy (the calibration's, else RL_REFERENCE_STRATEGY) from the
quality the drafter starts at.
"""
from __future__ import annotations

from dataclasses import replace

from tltsim.config import steps_in
from tltsim.core.drafter_names import TRAINED
from tltsim.policies import knobs_for, make_policy
from tltsim.drafter.acceptance import RL_REFERENCE_STRATEGY, AcceptanceModel
from tltsim.drafter.quality import DrafterConfig
from tltsim.sim.simulator import Simulator

WAYS = (("frozen", "static-sd"), ("cotrain", "cotrain"), ("spot", "tlt"), ("suffix", "das"),
        ("hybrid", "das+tlt"))  # the drafter's training (a model-free method: its method), and the policy that has it
DRIFTING = ("static-sd", "tlt", "das+tlt")  # the ways whose drafter drifts between its trainings (or for good)
SPAN = (("none (frozen EAGLE-3 held over 36 RL steps: marin-community/marin#9114)", 0.0),
        ("half of tltsim's default", DrafterConfig.drift / 2),
        ("tltsim's default (assumed; TLT gives only the stale floor)", DrafterConfig.drift))
STEPS = 3  # trace steps each simulation runs
COLUMNS = ("way", "policy", "drift", "drift_per_step", "quality_drift_per_step", "saved_per_step_s", "fitted")


def drift_sensitivity(trace, cfg, strategy=None, fitted_length_drift=None) -> list[dict]:
    """One row per way and drift (COLUMNS): the ways of WAYS simulated on `trace`'s first STEPS steps on `cfg`'s
    cluster, at each drift of SPAN and, where `cfg.drafter` was fitted to a run (its `source` says so), at its
    drift; `strategy` is the run's draft tree (the drift in accepted length is given at it), and
    `fitted_length_drift` the fitted drift in accepted length as measured (the fitted rows show it)."""
    strategy = strategy or RL_REFERENCE_STRATEGY
    q0, fitted_drift = cfg.drafter.trained()
    fitted = bool(cfg.drafter.source) and cfg.drafter.method in TRAINED  # a trained drafter's drift was fitted
    span = list(SPAN) + ([("fitted to the run", fitted_drift)] if fitted else [])
    steps = steps_in(cfg.steps, trace.steps)  # the run's steps
    short = trace.select_steps(steps[:STEPS])
    cfg = replace(cfg, steps="")
    half = len(steps) / 2
    model = AcceptanceModel()
    floor = min(DrafterConfig.q_floor, q0)
    base = mean_step(short, cfg, "verl", {})
    once = {p: mean_step(short, cfg, p, {}) for _, p in WAYS if p not in DRIFTING}
    rows = []
    for label, drift in span:
        for way, policy in WAYS:
            if policy in DRIFTING:
                knobs = {"drift": drift}
                if policy == "static-sd":
                    knobs["q_start"] = max(floor, q0 - drift * half)
                step_s = mean_step(short, cfg, policy, knobs)
            else:
                step_s = once[policy]
            length = model.mean(strategy, q0) - model.mean(strategy, max(0.0, q0 - drift))
            if label == "fitted to the run" and fitted_length_drift is not None:
                length = fitted_length_drift
            rows.append({"way": way, "policy": policy, "drift": label, "drift_per_step": length,
                         "quality_drift_per_step": drift, "saved_per_step_s": base - step_s,
                         "fitted": label == "fitted to the run"})
    return rows


def mean_step(trace, cfg, policy: str, knobs: dict) -> float:
    """The mean step time of `policy` with `knobs` (added to the config's) on `trace`."""
    run = replace(cfg, policy=policy, policy_knobs=knobs_for(policy, {**cfg.policy_knobs, **knobs}))
    return float(Simulator(trace, run, make_policy(policy, run.policy_knobs)).run().summary["mean_step_s"])


def answer(rows: list[dict]) -> list[str]:
    """What the rows say, in sentences: the best way at each drift, and from which drift co-training beats
    freezing (or that it never does over the span)."""
    if not rows:
        return []
    out = []
    drifts = list(dict.fromkeys(r["drift"] for r in rows))
    for d in drifts:
        at = [r for r in rows if r["drift"] == d]
        best = max(at, key=lambda r: r["saved_per_step_s"])
        out.append(f"At drift {d} ({best['drift_per_step']:.3g} tokens per verify a step): {best['way']} "
                   f"({best['policy']}) saves most, {best['saved_per_step_s']:.2f} s a step.")
    by = {(r["drift"], r["way"]): r["saved_per_step_s"] for r in rows}
    wins = [d for d in drifts if by[(d, "cotrain")] > by[(d, "frozen")]]
    if not wins:
        out.append("Co-training never beats freezing the drafter over these drifts: its update-phase cost is more "
                   "than the accepted length it keeps.")
    elif len(wins) == len(drifts):
        out.append("Co-training beats freezing the drafter at every drift here, none included: its restored "
                   "quality is worth its update-phase cost from the start.")
    else:
        out.append(f"Co-training beats freezing the drafter at drift {', '.join(wins)}, not at "
                   f"{', '.join(d for d in drifts if d not in wins)}.")
    return out
