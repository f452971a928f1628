"""Where a replay decided otherwise than the run: the first iteration of each step and engine at which one side
decoded plainly and the other speculated, and the times behind each side's decision.

A real engine's switch and guard (tltsim.control) decide from the wall clock; the replay's, the very same
objects, from the cost model's times. Each side's decisions are re-derived here from its own iterations frame
(one row per iteration, in order): a `SpeculationGuard` is told every iteration's outcome as the engine told
it (plain: its seconds; speculative: the batch's tokens per second) and an `SDSwitch` counts the batches, so at
the first iteration where the two sides' modes differ each side's view is what its engine decided on:

    switch_on            whether the side's switch was on (batch at or below `threshold` for `patience`
                         decode iterations in this rollout)
    plain_s              the guard's estimate of a plain iteration's seconds at the side's batch then
    spec_tok_s           its estimate of speculation's tokens per second there (NaN: not tried, so it pays)
    pays                 whether the guard said speculating pays (spec_tok_s above batch / plain_s)

and `cause` says which rule made the two sides differ: "switch" when one side's switch was on and the other's
not (one side had not yet seen `patience` small batches); "batch" when both were on but at different batches
(an earlier difference in accepted tokens changed which rows still run); "guard" when at the same batch one
guard said speculating pays and the other not, each re-derived view saying what its own engine did: a model
error, read in the times beside it; "other" when the re-derived views do not explain the two modes (a catch-up
share the frame does not hold, see below).

A real run's iterations frame records an iteration's whole wall time; a speculative iteration after plain
ones also fed the drafter the tokens it had not seen (its catch-up), which the real guard did not count in
the reward. That share is not in the frame, so the re-derived reward of such an iteration (`reprefill`) is
low by it; the replay's frame is read the same way, so both sides are re-derived alike.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tltsim.control import SDSwitch, SpeculationGuard
from tltsim.core.records import Result

COLUMNS = ["run", "step", "engine", "iteration", "cause", "measured_mode", "predicted_mode", "measured_batch",
           "predicted_batch", "measured_switch_on", "predicted_switch_on", "measured_plain_s", "predicted_plain_s",
           "measured_spec_tok_s", "predicted_spec_tok_s", "measured_pays", "predicted_pays"]


def decision_views(result: Result, threshold: int, patience: int,
                   guard_trial: int = SpeculationGuard().trial) -> pd.DataFrame:
    """Per iteration (step, engine, iteration index within the step): its mode and batch and the switch's and
    guard's view before it (see the module docstring), re-derived from `result`'s iterations frame by a guard
    with the run's trial (`guard_trial`)."""
    it = result.iterations
    rows = []
    for engine, g in it.groupby("worker", sort=True):
        guard = SpeculationGuard(trial=guard_trial)
        for step, s in g.groupby("step", sort=True):
            guard.begin_rollout()
            switch = SDSwitch("adaptive", threshold, patience)
            for i, (mode, batch, wall, tokens) in enumerate(zip(s["mode"], s["batch_size"], s["wall_s"], s["tokens"])):
                batch = int(batch)
                plain_rate = guard.plain_rate(batch)
                rows.append({"step": int(step), "engine": int(engine), "iteration": i, "mode": mode, "batch": batch,
                             "switch_on": not switch.advance(batch, 1),
                             "plain_s": batch / plain_rate if plain_rate else np.nan,
                             "spec_tok_s": guard.spec_rate(batch), "pays": guard.pays(batch)})
                if mode == "spec_decode":
                    guard.observe_spec(batch, tokens / wall)
                else:
                    guard.observe_plain(batch, wall)
    return pd.DataFrame(rows)


def divergences(run: str, measured: Result, predicted: Result, knobs: dict) -> pd.DataFrame:
    """The first iteration of each step and engine where the two sides' modes differ (COLUMNS), with each
    side's view; empty where they never do (or without a switch: a policy that never speculates). `knobs`: the
    ones the run acted on (`tltsim.analysis.validation.validate.recorded_knobs`)."""
    if not knobs:
        return pd.DataFrame(columns=COLUMNS)
    threshold, patience = int(knobs.get("threshold", 32)), int(knobs.get("patience", 10))
    trial = int(knobs.get("guard_trial", SpeculationGuard().trial))
    m = decision_views(measured, threshold, patience, trial)
    p = decision_views(predicted, threshold, patience, trial)
    both = m.merge(p, on=["step", "engine", "iteration"], suffixes=("_m", "_p"))
    differ = both[both["mode_m"] != both["mode_p"]].groupby(["step", "engine"], sort=True).head(1)
    out = []
    for r in differ.itertuples():
        if r.switch_on_m != r.switch_on_p:
            cause = "switch"
        elif r.batch_m != r.batch_p:
            cause = "batch"
        elif r.pays_m == (r.mode_m == "spec_decode") and r.pays_p == (r.mode_p == "spec_decode"):
            cause = "guard"  # each side's re-derived guard said what its engine did, and they differ
        else:
            cause = "other"
        out.append({"run": run, "step": r.step, "engine": r.engine, "iteration": r.iteration, "cause": cause,
                    "measured_mode": r.mode_m, "predicted_mode": r.mode_p, "measured_batch": r.batch_m,
                    "predicted_batch": r.batch_p, "measured_switch_on": r.switch_on_m,
                    "predicted_switch_on": r.switch_on_p, "measured_plain_s": r.plain_s_m,
                    "predicted_plain_s": r.plain_s_p, "measured_spec_tok_s": r.spec_tok_s_m,
                    "predicted_spec_tok_s": r.spec_tok_s_p, "measured_pays": r.pays_m, "predicted_pays": r.pays_p})
    return pd.DataFrame(out, columns=COLUMNS)
