"""The work domain of a run: what its engines did, counted rather than timed, so the machine's speed cannot
move it. `tltsim validate` compares it between a real run and its replay.

Per step and engine, from the run's iterations frame (one row per decode or speculative iteration, in the
order the engine ran them: a real run's, or the simulator's exact executor's):

    plain_iterations       iterations of mode `decode`
    spec_iterations        iterations of mode `spec_decode`
    switch_batch           the running batch size at the engine's first speculative iteration of the step
    switch_iteration       how many iterations the engine ran in the step before that one (0-based index)
    accepted_tokens        tokens the speculative iterations emitted (accepted drafts and bonus tokens)
    tokens                 tokens all its iterations emitted

The switch point (switch_batch, switch_iteration) is NaN for an engine that never speculated in the step.

Per request (`request_acceptance`), from the iterations frame and the requests frame together: the iterations of
its engine from its admission to the one it finished in, and what its speculative ones gave it. A response's
tokens are one a plain iteration and the accepted length of each speculative one, so its mean accepted length is
(response_len - plain iterations) / speculative iterations: counted, like the rest, not read off a clock's rate.
Responses of one batch accept very differently (a row that repeats itself takes whole drafts, one working out
numbers takes the target's token alone), and the rows that accept least are the ones left running at the end.
Per step (engine NA: a real run records its drafter training per step only):

    drafter_train_samples  sequences the drafter trained on: a real run's batches x its drafter_batch (a
                           batch holds fewer only when the buffer holds fewer), the simulator's
                           drafter_train_samples (spot-training tokens over the mean sequence length)
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from tltsim.core.errors import TltsimError
from tltsim.core.records import Result

ENGINE_METRICS = ["plain_iterations", "spec_iterations", "switch_batch", "switch_iteration", "accepted_tokens",
                  "tokens"]
STEP_METRICS = ["drafter_train_samples"]
WORK_METRICS = ENGINE_METRICS + STEP_METRICS
SWITCH_METRICS = {"switch_batch", "switch_iteration"}  # averaged over a run (where it switched), not summed
COLUMNS = ["run", "step", "engine", "metric", "measured", "predicted", "error"]


def work_metrics(result: Result, where: str = "run") -> pd.DataFrame:
    """Long table step, engine, metric, value (engine NA for the per-step metrics); see the module docstring."""
    it = result.iterations
    if it is None or not {"mode", "batch_size", "tokens"} <= set(it.columns):
        raise TltsimError(f"{where}: no iterations frame with mode, batch_size and tokens; the work domain needs "
                          f"a run of `tltsim real run` (or a simulation with --exact)")
    rows = []
    for (step, engine), g in it.groupby(["step", "worker"], sort=True):
        spec = (g["mode"] == "spec_decode").to_numpy()
        first = int(np.argmax(spec)) if spec.any() else None
        values = {
            "plain_iterations": float((g["mode"] == "decode").sum()),
            "spec_iterations": float(spec.sum()),
            "switch_batch": float(g["batch_size"].iloc[first]) if first is not None else np.nan,
            "switch_iteration": float(first) if first is not None else np.nan,
            "accepted_tokens": float(g["tokens"][spec].sum()),
            "tokens": float(g["tokens"].sum()),
        }
        rows += [(int(step), int(engine), m, values[m]) for m in ENGINE_METRICS]
    rows += [(int(s), pd.NA, "drafter_train_samples", v) for s, v in _drafter_samples(result).items()]
    out = pd.DataFrame(rows, columns=["step", "engine", "metric", "value"])
    return out.astype({"engine": "Int64"})


def _drafter_samples(result: Result) -> dict[int, float]:
    steps = result.steps.set_index("step")
    if "drafter_train_samples" in steps:  # the simulator's
        samples = steps["drafter_train_samples"].astype(float)
    elif "drafter_train_batches" in steps:  # a real run's
        samples = steps["drafter_train_batches"].astype(float) * int(result.config.get("drafter_batch", 0))
    else:  # a policy that trains no drafter
        samples = pd.Series(0.0, index=steps.index)
    return {int(s): float(v) for s, v in samples.fillna(0.0).items()}


def compare_work(run: str, measured: Result, predicted: Result) -> pd.DataFrame:
    """Measured against predicted work, per step and engine, then one row per metric for the whole run (step
    and engine NA): the sum, or for the switch point the mean over the engine-steps where both sides switched
    (an engine-step where only one did shows in its own rows, NaN on the other side)."""
    keys = ["step", "engine", "metric"]
    m = work_metrics(measured, f"{run} (measured)").rename(columns={"value": "measured"})
    p = work_metrics(predicted, f"{run} (predicted)").rename(columns={"value": "predicted"})
    both = m.merge(p, on=keys, how="outer")
    both["metric"] = pd.Categorical(both["metric"], WORK_METRICS)
    both = both.sort_values(keys, na_position="last").reset_index(drop=True)
    both["metric"] = both["metric"].astype(str)
    total = []
    for metric, g in both.groupby("metric", sort=False):
        if metric in SWITCH_METRICS:
            both_switched = g[g["measured"].notna() & g["predicted"].notna()]
            measured_v, predicted_v = both_switched["measured"].mean(), both_switched["predicted"].mean()
        else:
            measured_v, predicted_v = g["measured"].sum(min_count=1), g["predicted"].sum(min_count=1)
        total.append({"step": pd.NA, "engine": pd.NA, "metric": metric, "measured": measured_v,
                      "predicted": predicted_v})
    out = pd.concat([both, pd.DataFrame(total)], ignore_index=True)
    out.insert(0, "run", run)
    out["error"] = [relative_error(a, b) for a, b in zip(out["measured"], out["predicted"])]
    return out.astype({"step": "Int64", "engine": "Int64", "measured": float, "predicted": float})[COLUMNS]


def run_totals(work: pd.DataFrame) -> pd.DataFrame:
    """The whole-run rows of a `compare_work` table (those without a step)."""
    return work[work["step"].isna()].reset_index(drop=True)


def relative_error(measured: float, predicted: float) -> float:
    """predicted / measured - 1; the difference where the measured value is zero; NaN where either is."""
    if pd.isna(measured) or pd.isna(predicted):
        return np.nan
    if not measured:
        return float(predicted - measured)
    return float(predicted / measured - 1)


def tokens_alone(result: Result) -> int:
    """Tokens emitted by iterations with a single row running: the tail that rows falling behind leave."""
    it = result.iterations
    return int(it.loc[it["batch_size"] == 1, "tokens"].sum())


REQUEST_COLUMNS = ["step", "prompt_id", "sample", "plain_iterations", "spec_iterations", "accepted", "strategies"]


def request_acceptance(result: Result) -> pd.DataFrame:
    """Per request of `result` (a real run, or an exact simulation): the plain and speculative iterations it took
    part in, its mean accepted length over the speculative ones (NaN where it had none) and their strategies
    (strategy name -> iterations); see the module docstring. Empty for a run that never speculated."""
    it, rq = result.iterations, result.requests
    if it is None or rq is None or "mode" not in it or not (it["mode"] == "spec_decode").any():
        return pd.DataFrame(columns=REQUEST_COLUMNS)
    it = it[it["mode"].isin(["decode", "spec_decode"])]
    rows = []
    for (step, engine), g in rq[rq["engine"].notna()].groupby(["step", "engine"], sort=True):
        its = it[(it["step"] == step) & (it["worker"] == engine)].sort_values("t_end", kind="stable")
        t = its["t_end"].to_numpy(float)
        spec = (its["mode"] == "spec_decode").to_numpy()
        strategy = its["strategy"].to_numpy()
        eps = 1e-9  # a request's finished_at is the end of the iteration it finished in, to the clock's rounding
        first = np.searchsorted(t, g["admitted_at"].to_numpy(float) + eps, side="left")
        last = np.searchsorted(t, g["finished_at"].to_numpy(float) + eps, side="right")
        for r, a, b in zip(g.itertuples(index=False), first, last):
            n_spec = int(spec[a:b].sum())
            n_plain = int(b - a) - n_spec
            rows.append({"step": int(step), "prompt_id": int(r.prompt_id), "sample": int(r.sample),
                         "plain_iterations": n_plain, "spec_iterations": n_spec,
                         "accepted": (float(r.response_len) - n_plain) / n_spec if n_spec else np.nan,
                         "strategies": dict(Counter(strategy[a:b][spec[a:b]].tolist()))})
    return pd.DataFrame(rows, columns=REQUEST_COLUMNS)
