"""Calibrate the simulator to a user's cluster from a verl run: `tltsim validate --verl-metrics M --trace T`.

The run's trace (its rollout dump, `tltsim trace convert`) goes through the simulator under the verl
baseline on the run's cluster (flags or `--verl-config`), and each step's predicted phases sit beside
verl's own timers for them (tltsim.verl_metrics.TIMERS). Each phase is fitted on its own
(docs/design.md#calibrating-to-a-verl-run):

- rollout (`timing_s/gen`): measured = factor x predicted + a fixed cost a step, where the steps determine the
  fixed cost: at least MIN_FIXED_STEPS fitted steps, a Theil-Sen fit whose factor's 95% confidence interval is
  no wider than FACTOR_SPREAD of the factor, and a fixed cost >= 0. Otherwise one factor, the median of
  measured / predicted. Both are medians at heart, so a few bad steps (a checkpoint save, a slow node) do not
  move them.
- the log-prob forwards (`old_log_prob` + `ref` + `values`), the update (`update_actor` + `update_critic`), the
  weight sync (`update_weights`): one factor each, the median of measured / predicted. A phase the metrics do
  not time is inside the timers that hold it (older verl syncs the weights inside `gen`): its factor is 0.
- the reward (`timing_s/reward`): a time, the median (the simulator's reward is a time, rl.reward_s). Below
  REWARD_IN_LOOP of the rollout it is read as a reward scored outside the trainer's reward phase: inside
  the agent loop (its time is in `timing_s/gen`) or asynchronously (`reward_model.launch_reward_fn_async`,
  waited for in `timing_s/adv`, the rest of the step); the simulation adds no reward time of its own.
- the rest of `timing_s/step` (adv, balancing, dumps, checkpoint saves): a fixed cost a step, the median.

A run whose rollout went through verl's agent loop with a multi-turn trace (docs/verl.md#a-tool-agent-loop-run):
the rollout factor is fitted on generation alone, the median over the steps of verl's generation seconds a
trajectory (`timing_s/agent_loop/generate_sequences/mean`) / the replay's (each turn from when it is ready to its
last token, queueing included); the trace is replayed again with it, and the rollout's fixed cost is the median of
`timing_s/gen` less that replay's rollout (tool waits included). A synthetic trace's tool seconds are not the
run's: each step's tool calls take the run's `timing_s/agent_loop/tool_calls/mean` x the step's trajectories / its
calls (a note says so); a recorded trace (a PolyTrace log) keeps its own, beside the run's in a note.

A step's calibrated time is then exactly what `tltsim simulate|compare --calibration` gives the verl baseline
(tltsim.cost.calibrated: the factors scale the cost model's phases, the fixed costs are paid with the weight
sync). `error_before` / `error_after` are the median absolute relative error of the per-step rollout time
as modelled and calibrated, `step_error_before` / `step_error_after` the same of the whole step.

Metrics that do not belong to the trace are reported, not fitted: steps the trace lacks (or that lack
metrics), steps whose every request aborted (tltsim.verl_metrics leaves them out: nothing was generated), and
steps whose `response_length/mean` or `/max` differ from the trace's by more than
LENGTH_TOLERANCE (the dump's counts leave out the EOS token verl counts: a token or so).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from tltsim.analysis.calibration.record import FACTORED, PHASES, Calibration
from tltsim.config import SimConfig
from tltsim.cost import PhaseCalibration
from tltsim.core.errors import TltsimError
from tltsim.sim.simulator import Simulator
from tltsim.trace import Trace
from tltsim.verl_metrics import agent_loop

LENGTH_TOLERANCE = (2.0, 0.05)  # tokens, fraction: lengths agree within 2 tokens + 5%
MIN_FIXED_STEPS = 6  # fitted steps a rollout fixed cost needs beside the factor
FACTOR_SPREAD = 0.2  # ... and the widest 95% confidence interval of the factor, as a share of it
REWARD_IN_LOOP = 0.01  # timing_s/reward below this share of timing_s/gen (medians): scored in the agent loop or
# asynchronously, not in the trainer's reward phase
OVERLAP = 0.01  # timed phases longer than timing_s/step by more than this share of it: they overlap (a note)


def calibrate(trace: Trace, cfg: SimConfig, metrics: pd.DataFrame, sources: dict | None = None) -> Calibration:
    """Fit `cfg`'s cluster, phase by phase, to `metrics` (tltsim.verl_metrics.read_metrics) of the run `trace` records.

    per_step columns: step; measured_, predicted_ and calibrated_ gen_s and step_s; gen_error_before,
    gen_error_after, step_error_before, step_error_after; measured_ and predicted_ <phase>_s for the phases
    (reward, logprob, train, sync) and measured_other_s; trace_len_mean, metrics_len_mean, trace_len_max,
    metrics_len_max; fitted (bool); reason (why a step is not fitted, or "")."""
    cfg = replace(cfg, policy="verl", calibration=PhaseCalibration())
    trace_steps, metric_steps = set(trace.steps), {int(s) for s in metrics.index}
    aborted = set(metrics.attrs.get("all_aborted", ()))  # read_metrics left them out
    common = sorted(trace_steps & metric_steps)
    turns = trace.agentic and agent_loop(metrics)  # an agent loop's run replayed turn by turn
    trace, notes = _tool_latencies(trace, metrics) if turns else (trace, _turn_notes(trace, metrics))
    if aborted:
        notes.append(f"steps {_ranges(aborted)}: every request aborted (the metrics' response_length/mean 0): no "
                     f"response to time, left out")
    if metric_steps - trace_steps:
        notes.append(f"metrics steps {_ranges(metric_steps - trace_steps)} are not in the trace: not fitted")
    if trace_steps - metric_steps - aborted:
        notes.append(f"trace steps {_ranges(trace_steps - metric_steps - aborted)} have no metrics (timing_s/gen): "
                     f"not fitted")
    if metrics[["len_mean", "len_max"]].isna().all().all():
        notes.append("the metrics have no response_length/mean or /max: whether they belong to the trace is not checked")
    if not common:
        raise TltsimError(f"the metrics' steps ({_ranges(metric_steps)}) and the trace's ({_ranges(trace_steps)}) "
                          f"have none in common; give the metrics and the rollout dump of one run")
    replay = Simulator(trace.select_steps(common), cfg).run()
    pred = replay.steps.set_index("step")
    per_trajectory = _per_trajectory(trace, replay) if turns else None
    pred = pred.assign(gen_s=pred["rollout_s"], step_s=pred["total_s"], reward_s=cfg.rl.reward_s,
                       logprob_s=pred["reward_s"] - cfg.rl.reward_s, train_s=pred["train_s"], sync_s=pred["sync_s"])
    timed = {phase: bool(metrics[[f"{t}_s" for t in timers]].notna().any().any()) for phase, timers in PHASES.items()}
    # verl's response_length/* count the response's tokens: in an agent loop's, the tools' answers too
    lengths = trace.df.assign(tokens=trace.sequence_tokens()).groupby("step")["tokens"].agg(["mean", "max"])
    rows = []
    for s in sorted(trace_steps | metric_steps | aborted):
        m = metrics.loc[s] if s in metric_steps else None
        row = {"step": s, "trace_len_mean": _at(lengths, s, "mean"), "metrics_len_mean": _get(m, "len_mean"),
               "trace_len_max": _at(lengths, s, "max"), "metrics_len_max": _get(m, "len_max")}
        for what in ("gen", "step"):
            row[f"measured_{what}_s"], row[f"predicted_{what}_s"] = _get(m, f"{what}_s"), _at(pred, s, f"{what}_s")
        for phase, timers in PHASES.items():
            if phase != "rollout":
                row[f"measured_{phase}_s"] = _timed(m, timers)
                row[f"predicted_{phase}_s"] = _at(pred, s, f"{phase}_s")
        if turns:
            row.update(_turn_row(per_trajectory, m, s))
        row["reason"] = "every request aborted" if s in aborted else _reason(row, s in trace_steps, m is not None)
        row["fitted"] = not row["reason"]
        rows.append(row)
    df = pd.DataFrame(rows)
    # the step outside the phases the metrics time (adv, dumps, checkpoint saves ...)
    inside = df["measured_gen_s"] + sum(df[f"measured_{p}_s"].fillna(0.0) for p in PHASES if p != "rollout")
    df["measured_other_s"] = df["measured_step_s"] - inside
    mismatched = df[df["reason"].str.startswith("lengths")]
    if len(mismatched):
        notes.append(f"steps {_ranges(mismatched['step'])}: the metrics' response lengths (mean "
                     f"{mismatched['metrics_len_mean'].mean():.0f}) are not the trace's (mean "
                     f"{mismatched['trace_len_mean'].mean():.0f}): not fitted; the metrics may come from another run")
    fit = df[df["fitted"]]
    phases, reward, how, calibrated_gen = None, None, "no step fitted", None
    if len(fit):
        rollout = None
        if turns:
            rollout, calibrated_gen = _fit_generation(fit, trace.select_steps(common), cfg)
            notes += _turn_count_notes(fit)
        phases, reward, how, fit_notes = _fit(fit, timed, rollout)
        notes += fit_notes
    else:
        notes.append("no step of the metrics matches the trace: the metrics and the trace are not of one run; "
                     "nothing fitted")
    if phases is not None:
        p = phases
        df["calibrated_gen_s"] = (p.rollout * df["predicted_gen_s"] if calibrated_gen is None else
                                  df["step"].map(calibrated_gen)) + p.rollout_fixed_s
        df["calibrated_step_s"] = (df["calibrated_gen_s"] + reward + p.other_s
                                   + sum(getattr(p, ph) * df[f"predicted_{ph}_s"] for ph in FACTORED))
    else:
        df["calibrated_gen_s"] = df["calibrated_step_s"] = np.nan
    for what in ("gen", "step"):
        df[f"{what}_error_before"] = df[f"predicted_{what}_s"] / df[f"measured_{what}_s"] - 1
        df[f"{what}_error_after"] = df[f"calibrated_{what}_s"] / df[f"measured_{what}_s"] - 1
    fit = df[df["fitted"]]
    c = cfg.cluster
    return Calibration(
        phases=phases, reward_s=reward, rollout_fit=how,
        error_before=_median_abs(fit["gen_error_before"]), error_after=_median_abs(fit["gen_error_after"]),
        step_error_before=_median_abs(fit["step_error_before"]), step_error_after=_median_abs(fit["step_error_after"]),
        per_step=df[_COLUMNS + (TURN_COLUMNS if turns else [])], notes=notes,
        cluster={"gpu": c.gpu, "model": c.model, "gpus": c.gpus, "tp": c.tp, "max_running": c.max_running,
                 "mem_fraction": cfg.cost.mem_fraction},
        sources={k: str(v) for k, v in (sources or {}).items() if v}, timed={**timed, "other": True},
    )


_COLUMNS = ["step", "measured_gen_s", "predicted_gen_s", "calibrated_gen_s", "gen_error_before", "gen_error_after",
            "measured_step_s", "predicted_step_s", "calibrated_step_s", "step_error_before", "step_error_after",
            *[f"{w}_{p}_s" for p in PHASES if p != "rollout" for w in ("measured", "predicted")], "measured_other_s",
            "trace_len_mean", "metrics_len_mean", "trace_len_max", "metrics_len_max", "fitted", "reason"]


def _fit(fit: pd.DataFrame, timed: dict, rollout: tuple | None = None) -> tuple[PhaseCalibration, float, str, list[str]]:
    """(the phases, the reward's seconds, how the rollout was fitted, notes) from the fitted steps' rows; `rollout`
    the rollout's (factor, fixed seconds, how) where it was fitted otherwise (an agent loop's run: _fit_generation)."""
    notes = []
    factor, fixed, how = rollout or _fit_rollout(fit["predicted_gen_s"].to_numpy(), fit["measured_gen_s"].to_numpy())
    factors = {}
    for phase in FACTORED:
        ok = fit[fit[f"predicted_{phase}_s"] > 0]
        factors[phase] = (float(np.median(ok[f"measured_{phase}_s"] / ok[f"predicted_{phase}_s"]))
                          if timed[phase] and ok[f"measured_{phase}_s"].notna().any() else 0.0)
        if not timed[phase]:
            notes.append(f"the metrics do not time the {phase} phase ({', '.join('timing_s/' + t for t in PHASES[phase])}): "
                         f"its time is inside the timers that hold it (timing_s/gen or the rest of the step)")
    reward = float(fit["measured_reward_s"].median()) if timed["reward"] else 0.0
    if reward < REWARD_IN_LOOP * float(fit["measured_gen_s"].median()):
        notes.append(f"timing_s/reward is {'about 0' if timed['reward'] else 'absent'} (median {reward:.3g} s): the "
                     f"reward is read as scored outside the trainer's reward phase (inside the agent loop, its time in "
                     f"timing_s/gen; or asynchronously, waited for in timing_s/adv, the rest of the step); the "
                     f"simulation adds no reward time of its own")
    other = fit["measured_other_s"].dropna()
    other_s = float(other.median()) if len(other) else 0.0
    if other_s < 0 and -other_s > OVERLAP * float(fit["measured_step_s"].median()):
        notes.append(f"timing_s/step is shorter than its timed phases (by {-other_s:.3g} s, median): they overlap; "
                     f"no fixed cost for the rest of the step")
    other_s = max(other_s, 0.0)
    return PhaseCalibration(rollout=factor, rollout_fixed_s=fixed, other_s=other_s, **factors), reward, how, notes


# an agent loop's run (trace.agentic and the metrics' timing_s/agent_loop/*): per step, verl's means over the
# trajectories beside the replay's
TURN_COLUMNS = ["measured_agent_gen_s", "predicted_agent_gen_s", "measured_agent_tool_s", "trace_agent_tool_s",
                "metrics_turns_mean", "trace_turns_mean"]


def _turn_notes(trace: Trace, metrics: pd.DataFrame) -> list[str]:
    """Where an agent loop's run is not replayed turn by turn: what the rollout factor then holds."""
    tool = metrics["agent_tool_mean_s"] if "agent_tool_mean_s" in metrics else pd.Series(dtype=float)
    if not trace.agentic and (tool > 0).any():
        return [f"the metrics time tool calls (timing_s/agent_loop/tool_calls/mean up to {tool.max():.3g} s a "
                f"trajectory) but the trace is single-turn (a rollout dump records no turns): the rollout factor, "
                f"fitted on timing_s/gen, holds the tools' time; for the turns give a multi-turn trace (a PolyTrace log, "
                f"or `tltsim trace synth agentic`), docs/verl.md#a-tool-agent-loop-run"]
    if trace.agentic:
        return ["the trace is multi-turn but the metrics have no agent-loop timers (timing_s/agent_loop/...): the "
                "rollout factor is fitted on timing_s/gen whole, the tool waits in it"]
    return []


def _tool_latencies(trace: Trace, metrics: pd.DataFrame) -> tuple[Trace, list[str]]:
    """The trace with the run's tool seconds where its own are not the run's (a synthetic trace's): each step's
    tool calls (its turns that call one) take verl's seconds of tool calls per trajectory
    (timing_s/agent_loop/tool_calls/mean) x the step's trajectories / its calls, so the step's tool seconds are
    the run's; and notes saying so, or comparing a recorded trace's seconds with the run's."""
    df, src = trace.df, trace.meta.source
    calls = df["tool_latency_s"].map(lambda t: sum(v is not None for v in t))
    own = df["tool_latency_s"].map(lambda t: float(sum(v for v in t if v is not None)))
    measured = metrics["agent_tool_mean_s"].reindex(trace.steps)
    if not src.startswith("synth:"):
        mean = own.groupby(df["step"]).mean().reindex(measured.index)
        both = measured.notna() & (measured > 0)
        if not both.any():
            return trace, []
        return trace, [f"the trace ({src}) records its tool calls' seconds: kept; tool seconds a trajectory, median "
                       f"over steps: the trace's {mean[both].median():.3g}, the metrics' "
                       f"(timing_s/agent_loop/tool_calls/mean) {measured[both].median():.3g}"]
    per_call = (measured * df.groupby("step").size() / calls.groupby(df["step"]).sum()).replace(np.inf, np.nan)
    new = [t if np.isnan(per_call.get(step, np.nan)) else [None if v is None else float(per_call[step]) for v in t]
           for step, t in zip(df["step"], df["tool_latency_s"])]
    df = df.assign(tool_latency_s=pd.Series(new, index=df.index, dtype=object))
    given = per_call.dropna()
    notes = [f"the trace's tool seconds are not the run's ({src}): each step's tool calls (turns that call one) take "
             f"the run's timing_s/agent_loop/tool_calls/mean (seconds of tool calls a trajectory) x the step's "
             f"trajectories / its tool calls: {given.median():.3g} s a call, median over {len(given)} steps"
             + ("" if len(given) == len(per_call) else
                f"; steps {_ranges(per_call.index[per_call.isna()])} keep the trace's (no timer, or no call)")]
    return Trace(df, trace.meta), notes


def _per_trajectory(trace: Trace, replay) -> pd.DataFrame:
    """Per step, the replay's mean over trajectories of their seconds in generation (every turn from when it is
    ready, queueing included, to its last token: as verl's timer around each call to the server), the trace's
    mean tool seconds a trajectory and verl's count of turns (assistant turns + tool rounds + 1)."""
    t = replay.turns.sort_values(["step", "prompt_id", "sample", "turn"])
    key = [t["step"], t["prompt_id"], t["sample"]]
    start = t["step"].map(replay.steps.set_index("step")["t_start"])
    ready = (t.groupby(key)["finished_at"].shift() + t.groupby(key)["tool_latency_s"].shift()).fillna(start)
    gen = (t["finished_at"] - ready).groupby(key).sum().groupby(level=0).mean()
    df = trace.df
    tool = df["tool_latency_s"].map(lambda x: float(sum(v for v in x if v is not None)))
    turns = df["turn_response_len"].map(len) + df["tool_latency_s"].map(lambda x: sum(v is not None for v in x)) + 1
    return pd.DataFrame({"gen": gen, "tool": tool.groupby(df["step"]).mean(), "turns": turns.groupby(df["step"]).mean()})


def _turn_row(per_trajectory: pd.DataFrame, m, s: int) -> dict:
    return {"measured_agent_gen_s": _get(m, "agent_gen_mean_s"), "predicted_agent_gen_s": _at(per_trajectory, s, "gen"),
            "measured_agent_tool_s": _get(m, "agent_tool_mean_s"), "trace_agent_tool_s": _at(per_trajectory, s, "tool"),
            "metrics_turns_mean": _get(m, "turns_mean"), "trace_turns_mean": _at(per_trajectory, s, "turns")}


def _turn_count_notes(fit: pd.DataFrame) -> list[str]:
    both = fit[["metrics_turns_mean", "trace_turns_mean"]].dropna()
    if not len(both):
        return ["the metrics have no num_turns/mean: whether the trace's turns are the run's is not checked"]
    return [f"turns a trajectory (user + assistant + 1, as verl counts them), median over {len(both)} steps: the "
            f"metrics' num_turns/mean {both['metrics_turns_mean'].median():.3g}, the trace's "
            f"{both['trace_turns_mean'].median():.3g}"]


def _fit_generation(fit: pd.DataFrame, trace: Trace, cfg: SimConfig) -> tuple[tuple[float, float, str], dict]:
    """An agent loop's rollout: ((factor, fixed seconds, how), step -> the calibrated replay's rollout seconds). The
    factor is the median over the steps of verl's generation seconds a trajectory
    (timing_s/agent_loop/generate_sequences/mean) / the replay's; the trace replayed with it gives each step's
    rollout, tool waits included, and the fixed cost is the median of timing_s/gen less that (>= 0)."""
    ok = fit[(fit["predicted_agent_gen_s"] > 0) & fit["measured_agent_gen_s"].notna()]
    if not len(ok):
        raise TltsimError("the metrics' timing_s/agent_loop/generate_sequences/mean has no value on a step the trace "
                          "replays; give the metrics of the run the trace records")
    factor = float(np.median(ok["measured_agent_gen_s"] / ok["predicted_agent_gen_s"]))
    again = Simulator(trace, replace(cfg, calibration=PhaseCalibration(rollout=factor))).run().steps
    rollout = dict(zip(again["step"].astype(int), again["rollout_s"]))
    rest = fit["measured_gen_s"] - fit["step"].map(rollout)
    fixed = max(float(rest.median()), 0.0)
    how = (f"one factor on generation, the median over {len(ok)} steps of verl's generation seconds a trajectory "
           f"(timing_s/agent_loop/generate_sequences/mean) / the replay's of the multi-turn trace; a fixed cost a step, "
           f"the median of timing_s/gen less the calibrated replay's rollout (tool waits included)"
           + (f" (it would be negative, {rest.median():.3g} s: 0)" if rest.median() < 0 else ""))
    return (factor, fixed, how), rollout


def _fit_rollout(predicted: np.ndarray, measured: np.ndarray) -> tuple[float, float, str]:
    """(factor, fixed seconds, how it was fitted): measured = factor x predicted + fixed where the steps determine
    the fixed cost, else one factor (the median ratio) and fixed 0."""
    n = len(predicted)
    ratio = float(np.median(measured / predicted))
    one = f"one factor, the median of measured / predicted over {n} steps"
    if n < MIN_FIXED_STEPS:
        return ratio, 0.0, f"{one} (a fixed cost beside it takes at least {MIN_FIXED_STEPS} steps)"
    if np.ptp(predicted) == 0:
        return ratio, 0.0, f"{one} (every step's predicted rollout is the same: no fixed cost can be separated)"
    from scipy.stats import theilslopes  # scipy only when a calibration is fitted (not for --help)

    t = theilslopes(measured, predicted)
    spread = (t.high_slope - t.low_slope) / t.slope if t.slope > 0 else np.inf
    if spread > FACTOR_SPREAD:
        return ratio, 0.0, (f"{one} (the steps' rollouts vary too little to separate a fixed cost: the factor's 95% "
                            f"interval would be {spread:.0%} of it, at most {FACTOR_SPREAD:.0%})")
    if t.intercept < 0:
        return ratio, 0.0, f"{one} (a fixed cost fitted beside it would be negative, {t.intercept:.3g} s)"
    return float(t.slope), float(t.intercept), (f"a factor and a fixed cost a step (Theil-Sen over {n} steps; the "
                                                 f"factor's 95% interval is {spread:.0%} of it)")


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


def _timed(m, timers) -> float:
    """The sum of the timers `m` has (a step's metrics row), NaN when it has none of them."""
    if m is None:
        return np.nan
    values = [m[f"{t}_s"] for t in timers if not np.isnan(m[f"{t}_s"])]
    return float(sum(values)) if values else np.nan


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
