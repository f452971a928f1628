# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Is the simulator right? A real run next to its prediction
#
# `tltsim real run` runs a policy for real (worker processes, adaptive engines driven by the same
# policy objects the simulator uses, a spot-trained drafter, GRPO updates) and records it in the
# simulator's schema, with its trace. `tltsim validate` replays that trace in the simulator, one
# engine per real worker, with a cost model fitted to a profile of the same machine
# (`tltsim real profile`) and the drafter quality the run measured, and compares. In this
# notebook you learn
#
# * how well the fitted cost model matches the profiled step times,
# * the error table: per step and overall, for rollout and step time, idle fraction, SD share,
#   drafter training and accepted length, and the speedup of TLT over verl, measured and predicted,
# * the work domain: iterations, switch points, accepted tokens and drafter-training samples, counted,
# * where predicted and measured timelines differ (per-step plots, Gantt charts of both).
#
# By default it reads the recorded CPU runs under `traces/`; without them (or with
# `RUN_NOW = True`) it makes a tiny real run on this machine first, which takes a few minutes.

# %% tags=["parameters"]
RUNS = ["../traces/runs/real_verl_cpu", "../traces/runs/real_tlt_cpu"]  # `tltsim real run` directories, baseline first
PROFILE = "../traces/profiles/real_cpu_profile.csv"  # `tltsim real profile` of the machine the runs ran on
RUN_NOW = "auto"  # "auto": a tiny real run below only if RUNS or PROFILE are missing; True: always; False: never
TINY_MODEL = "test-llama"  # target of a tiny run: a preset (random weights) or a `tltsim real pretrain` directory
TINY_STEPS = 2  # RL steps per tiny run; raise it (and prompts, max_new_tokens below) for a run worth validating

# %%
# %matplotlib inline
# %config InlineBackend.print_figure_kwargs = {"dpi": 80, "bbox_inches": "tight"}
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notebook bar; no bars are shown here
pd.set_option("display.precision", 3)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 30)

# %% [markdown]
# ## 1. The runs

# %%
from pathlib import Path

recorded = all((Path(d) / "summary.json").is_file() for d in RUNS) and Path(PROFILE).is_file()
RUN_NOW = not recorded if RUN_NOW == "auto" else RUN_NOW
if not RUN_NOW and not recorded:
    raise FileNotFoundError(f"no recorded runs at {RUNS} with {PROFILE}; set RUN_NOW = True or point RUNS there")
print("making a tiny real run on this machine" if RUN_NOW else f"using the recorded runs {RUNS}")

# %%
if RUN_NOW:
    import os
    import tempfile
    from dataclasses import replace

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # the workers save checkpoints quietly
    import torch
    from real.models.targets import load_target
    from real.tools.profile import profile
    from real.run.launch import RunConfig, launch
    from real.settings import ProfileSettings

    scratch = tempfile.TemporaryDirectory(prefix="tltsim-nb04-")  # removed when the kernel exits
    work = Path(scratch.name)
    torch.set_num_threads(2)
    # the profile the cost model is fitted to: a small grid, the strategies the tlt run uses
    grid = ProfileSettings(batches=(1, 4), contexts=(16,), strategies=("4_2_8", "4_1_4"), repeats=2, train_rows=(4, 16))
    profile(load_target(TINY_MODEL), settings=grid).to_csv(work / "profile.csv", index=False)
    tiny = RunConfig(workers=2, steps=TINY_STEPS, model=TINY_MODEL, prompts=4, group=2, max_new_tokens=48,
                     warmup_steps=10, warmup_prompts=8, probe=2)
    launch(replace(tiny, policy="verl"), work / "verl")
    launch(replace(tiny, policy="tlt", knobs={"threshold": 4, "patience": 2, "arms": "4_2_8,4_1_4"}), work / "tlt")
    RUNS, PROFILE = [str(work / "verl"), str(work / "tlt")], str(work / "profile.csv")

# %%
import json

from tltsim.core.records import Result

measured = {Path(d).name: Result.load(d) for d in RUNS}
CONFIG = ["policy", "workers", "steps", "model", "prompts", "group", "max_new_tokens", "knobs"]
pd.DataFrame({name: {k: json.dumps(r.config.get(k)) if isinstance(r.config.get(k), dict) else r.config.get(k)
                     for k in CONFIG} for name, r in measured.items()})

# %%
SUMMARY = ["steps", "makespan_s", "rollout_share", "idle_fraction", "sd_share", "mean_accepted",
           "drafter_train_gpu_seconds", "mean_reward"]
pd.DataFrame({name: {k: r.summary.get(k) for k in SUMMARY} for name, r in measured.items()})

# %% [markdown]
# ## 2. The fitted cost model
#
# `Profiled.fit` fits step times linear in what an iteration processes (query tokens, context,
# draft tree) to the profile. Each point is one timed iteration; on the diagonal the model is exact.

# %%
from tltsim.cost.profiled import Profiled, read_profile

prof = read_profile(PROFILE)
cost = Profiled.fit(prof)
res = cost.residuals(prof)
res["error"] = res["predicted_s"] / res["measured_s"] - 1
print(f"{len(prof)} timings; coefficients: " + ", ".join(f"{k} {v:.3g}" for k, v in cost.c.items()))
res.groupby("kind")["error"].describe(percentiles=[0.5])[["count", "mean", "50%", "min", "max"]]

# %%
fig, ax = plt.subplots(figsize=(5.5, 4.5))
for (kind, g), color in zip(res.groupby("kind"), ["#2c7bb6", "#7b3294", "#1a9641", "#d7191c"]):
    ax.scatter(g["measured_s"] * 1e3, g["predicted_s"] * 1e3, s=14, color=color, label=kind, alpha=0.8)
lim = [res[["measured_s", "predicted_s"]].min().min() * 1e3 * 0.8, res[["measured_s", "predicted_s"]].max().max() * 1e3 * 1.2]
ax.plot(lim, lim, "k--", lw=1)
ax.set(xscale="log", yscale="log", xlim=lim, ylim=lim, xlabel="measured (ms)", ylabel="predicted (ms)",
       title="Profiled iterations: fitted vs measured")
ax.legend();

# %% [markdown]
# ## 3. The error table
#
# Errors are relative (predicted / measured − 1), except for fractions (idle, SD share), which
# are differences in absolute points.

# %%
from tltsim.analysis.validation.validate import validate

v = validate(RUNS, PROFILE)
v.overall

# %%
pd.Series(v.speedup, name="speedup of the second run over the first")

# %% [markdown]
# ### The machine's speed
#
# A profile is measured at one minute and the runs at others; a shared machine's speed drifts by
# tens of percent between minutes. Every run times a fixed plain decode iteration of its target
# before each step (`speed_probe_s` in its steps table); `validate(..., speed=True)` (`tltsim
# validate --speed`) scales the profile's times, step by step, by that probe over the fitted
# model's time for the same iteration (the median of the 5 steps around each, so a momentary
# spike does not count). Below: the speed factor per step, and the headline errors both ways.

# %%
from tltsim.analysis.validation.validate import speed_factors

probed = all("speed_probe_s" in r.steps for r in measured.values())
if not probed:
    print("these runs predate the speed probe (steps column speed_probe_s): nothing to scale by")
# how much slower than the profile the machine ran each step (1: as fast)
pd.DataFrame({name: speed_factors(r, cost) for name, r in measured.items()} if probed else {}).rename_axis("step")

# %%
rows = {}
scaled = validate(RUNS, PROFILE, speed=True) if probed else None
for label, val in (("profile as measured", v), ("x speed probe", scaled)):
    if val is not None:
        per = val.overall.set_index(["run", "metric"])["error"]
        rows[label] = {**{f"per-step rollout |error|, {run}": per[(run, "median |error| of per-step rollout")]
                          for run in val.overall["run"].unique()}, "speedup error": val.speedup["error"]}
pd.DataFrame(rows)

# %%
per_step = v.per_step.pivot_table(index=["run", "step"], columns="metric", values=["measured", "predicted"],
                          dropna=False)
per_step.swaplevel(axis=1).sort_index(axis=1)[["rollout_s", "total_s", "idle_fraction", "sd_share", "mean_accepted"]]

# %% [markdown]
# ### The work domain
#
# What the engines did, counted rather than timed (`v.work`, `work.csv`; the metrics are described in
# `docs/architecture.md`): plain and speculative iterations, the switch point (the running batch and the
# iteration index of an engine's first speculative iteration in a step), the tokens speculation emitted,
# all tokens, and the drafter's training samples. Below, each run's totals; `work.csv` has them per step
# and engine.

# %%
from tltsim.analysis.validation.work_domain import run_totals

work = run_totals(v.work)
if scaled is not None:  # --speed rescales every time of a step; the counts stay what they were
    moved = (run_totals(scaled.work)["predicted"] - work["predicted"]).abs() > 1e-9 * work["predicted"].abs()
    print("the same under --speed:", "yes" if not moved.any() else f"no: {', '.join(work.metric[moved])}")
work.drop(columns=["step", "engine"])

# %% [markdown]
# ## 4. Predicted vs measured, step by step

# %%
PANELS = [("rollout_s", "rollout (s)"), ("total_s", "step (s)"), ("idle_fraction", "idle fraction"),
          ("mean_accepted", "accepted tokens / verify")]
names = list(v.per_step["run"].unique())
fig, axes = plt.subplots(len(names), len(PANELS), figsize=(12, 2.6 * len(names)), squeeze=False, layout="constrained")
for row, name in zip(axes, names):
    d = v.per_step[v.per_step["run"] == name]
    for ax, (metric, label) in zip(row, PANELS):
        m = d[d["metric"] == metric]
        ax.set_title(f"{name}: {label}", fontsize=9, loc="left")
        if m["measured"].isna().all():
            ax.text(0.5, 0.5, "no speculative decoding", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        ax.plot(m["step"], m["measured"], "o-", color="k", ms=4, label="measured")
        ax.plot(m["step"], m["predicted"], "s--", color="#2c7bb6", ms=4, label="predicted")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("step")
        ax.xaxis.get_major_locator().set_params(integer=True)
axes[0, 0].legend();

# %% [markdown]
# ## 5. Measured and predicted timelines
#
# For each run, the slowest measured step: the real workers on top, the simulator's replay below
# (one engine per worker, same time axis).

# %%
from dataclasses import replace

from tltsim.analysis.report import plots


def labelled(result, label):
    return replace(result, summary={**result.summary, "policy": label})


pairs = list(zip(measured.items(), v.predicted.values()))
for (name, m), p in pairs:
    display(plots.gantt([labelled(m, f"{name}: measured"), labelled(p, f"{name}: predicted")]))

# %%
if RUN_NOW:
    scratch.cleanup()  # the tiny runs were for this session only

# %% [markdown]
# ## 6. Every policy, checked against real runs
#
# The pair above speculates. `traces/runs/` ships a verl run beside a run of each policy tltsim runs for real
# (speculation, history drafting, partial rollout, tail batching, migration, asynchronous RL), each made on the
# machine its verl twin ran on. `python benchmarks/bench_checked.py` replays every pair as the cells above replay
# this one and records the predicted speedup over verl beside the measured one, at one machine speed: the record the
# report's "checked against a run" column reads. Below, that record, then one off-policy pair replayed here:
# partial rollout, whose carried responses, staleness and resumed samples follow from its own stop decisions.

# %%
from tltsim.analysis.validation.checked import shipped

shipped()[["policy", "run", "steps", "measured_speedup", "predicted_speedup", "error"]]

# %%
OFF_POLICY = ["../traces/runs/real_verl_smollm2_sampled", "../traces/runs/real_partial_smollm2_sampled"]
off = validate(OFF_POLICY, "../traces/profiles/smollm2_sampled_cpu_profile.csv", speed=True)
OFF_METRICS = ["rollout_s", "makespan_s", "staleness_mean", "resumed_fraction", "dropped_fraction"]
print(f"speedup of partial over verl at one machine speed: measured {off.speedup['measured_at_one_speed']:.3f}, "
      f"predicted {off.speedup['predicted_at_one_speed']:.3f}")
off.overall[off.overall["metric"].isin(OFF_METRICS)]

# %% [markdown]
# ## Reading the numbers
#
# What the tables above say, written from them (the recorded CPU runs by default), and how it compares with
# the repeated recordings of `benchmarks/bench_validate.py` listed in `docs/investigations/validate_repeatability.md`.

# %%
import re

from IPython.display import Markdown

overall = v.overall.set_index(["run", "metric"])
err, mea, pre = overall["error"], overall["measured"], overall["predicted"]
base_run, tlt_run = v.overall["run"].unique()[:2]
both = (base_run, tlt_run)
policy = {run: run.split(" (")[0] for run in both}
fit = res.groupby("kind")["error"].median()


def pair(metric: str, fmt: str = "{:+.1%}") -> str:
    return " / ".join(fmt.format(err[(run, metric)]) for run in both)


def spec_over_plain(iterations: pd.DataFrame) -> pd.Series:
    """Tokens per second of speculative over plain decoding, per batch size both ran at (the iterations frame's
    batches: a timeline row keeps the batch it began at)."""
    g = iterations[iterations["mode"].isin(["decode", "spec_decode"])].groupby(["batch_size", "mode"])
    rate = (g["tokens"].sum() / g["wall_s"].sum()).unstack()
    return (rate["spec_decode"] / rate["decode"]).dropna()


ratio = spec_over_plain(list(measured.values())[-1].iterations)
rates = (f"speculating made {ratio.min():.2f}-{ratio.max():.2f}x of plain decoding's tokens per second at each of "
         f"the {len(ratio)} batch sizes it ran both at, so the guard tried each size, decoded plainly otherwise, and "
         f"tried again when its refusals expired" if len(ratio) else "it never decoded plainly and speculatively at "
         "one batch size, so the two rates cannot be set side by side")
factors = pd.DataFrame({name: speed_factors(r, cost) for name, r in measured.items()}) if probed else None
if factors is None:
    speed_text = "These runs carry no speed probe, so nothing scales them."
else:
    lo, hi = factors.min().min(), factors.max().max()
    pace = (f"{1 - hi:.0%}-{1 - lo:.0%} faster than" if hi < 1 else f"at {lo:.2f}-{hi:.2f} of the times of")
    scaled_err = scaled.overall.set_index(["run", "metric"])["error"]
    speed_text = (f"The machine ran these runs {pace} the profile says (the speed factors); scaled by them, the "
                  f"per-step errors are " + " and ".join(
                      f"{scaled_err[(run, 'median |error| of per-step rollout')]:.1%} ({policy[run]})" for run in both)
                  + f", the speedup {scaled.speedup['error']:+.1%}.")

# docs/investigations/validate_repeatability.md lists each recording: "R<n> ... as is v/t s | v/t s   x speed v/t s | v/t s"
NUM = r"\s*([+-]?[\d.]+)/\s*([\d.]+)\s+([+-][\d.]+)\s*\|\s*([\d.]+)/\s*([\d.]+)\s+([+-][\d.]+)"
rec = [[float(x) for x in m.groups()] for m in re.finditer(rf"^\s+R\d+ .*?as is{NUM}\s+x speed{NUM}\s*$",
                                                           Path("../docs/investigations/validate_repeatability.md").read_text(), re.M)]
rec = pd.DataFrame(rec, columns=[f"{way} {k}" for way in ("as is", "x speed") for k in
                                 ("verl a", "tlt a", "speedup a", "verl b", "tlt b", "speedup b")])


def runs_of(way: str, kind: str) -> pd.Series:
    return pd.concat([rec[f"{way} {kind} a"], rec[f"{way} {kind} b"]])


def within(s: pd.Series, limit: float) -> str:
    return f"{(s.abs() < limit).sum()} of {len(s)}"


bench_text = (
    f"Over the {len(rec)} recordings of `benchmarks/bench_validate.py` (10-step runs, two pairs each) in "
    f"`docs/investigations/validate_repeatability.md`: median per-step rollout error "
    f"{runs_of('as is', 'verl').min():.0f}-{runs_of('as is', 'verl').max():.0f}% (verl) and "
    f"{runs_of('as is', 'tlt').min():.0f}-{runs_of('as is', 'tlt').max():.0f}% (tlt) with the profile as measured, "
    f"speedup error within 15% in {within(runs_of('as is', 'speedup'), 15)} pairs; with `--speed`, per-step errors "
    f"under 10% in {within(pd.concat([runs_of('x speed', 'verl'), runs_of('x speed', 'tlt')]), 10)} runs and the "
    f"speedup within 15% in {within(runs_of('x speed', 'speedup'), 15)} pairs." if len(rec) else
    "The repeated recordings of `benchmarks/bench_validate.py` are in `docs/investigations/validate_repeatability.md`.")


per_step_err = max(err[(run, "median |error| of per-step rollout")] for run in both)
spread = max(runs_of("as is", "verl").max(), runs_of("as is", "tlt").max()) / 100 if len(rec) else 0.15
conclusion = (
    "So on this machine the simulator predicts the rollout, where the policies differ, the training phases and the "
    "comparison, to within the machine's own run-to-run variation."
    if per_step_err <= spread and abs(v.speedup["error"]) < 0.15 else
    f"These errors lie outside the spread of the repeated recordings (per-step rollout errors up to {spread:.0%}, "
    "speedup within 15%): runs this small, or a profile this coarse, do not validate the simulator; make the runs "
    "and the profile larger (TINY_STEPS and the sizes in the tiny-run cell).")
steps_each = sorted({r.summary["steps"] for r in measured.values()})
display(Markdown(f"""
**{' and '.join(map(str, steps_each))} steps each.**

* The fitted cost model against the profiled iterations of this CPU: median error {fit['decode']:+.1%} on plain
  decode rows, {fit['spec']:+.1%} on speculative ones, {fit['prefill']:+.1%} on prefills and
  {fit['catchup']:+.1%} on the drafter's catch-ups (section 2). The profile times iterations through the rollout
  loop with one thread, in two processes that start each measurement together (`--processes 2`), as a run's two
  workers share the machine, and samples tokens as the runs do.
* Replayed with it, the simulator's errors on the runs: rollout {pair('rollout_s')} ({' / '.join(policy.values())}),
  median per-step rollout error {pair('median |error| of per-step rollout', '{:.1%}')}, SD share
  {pre[(tlt_run, 'sd_share')]:.1%} against {mea[(tlt_run, 'sd_share')]:.1%} measured, idle fractions within
  {max(abs(err[(run, 'idle_fraction')]) for run in both) * 100:.1f} points, drafter training
  {err[(tlt_run, 'drafter_train_s')]:+.1%} (the replay lets each spot trainer finish its batch in progress at the
  barrier and charges it no load time, as the real trainer does).
* The training phases follow the run's GRPO: each worker updates on its own responses in padded, length-sorted
  micro-batches and waits at the gradient all-reduce for the slowest, so the replay (`rl.balance_train = false`,
  `rl.micro_batch_tokens`) charges the slowest worker's padded tokens: reward stage {pair('reward_s')}, update
  {pair('train_s')}, makespan {pair('makespan_s')}. Not modelled: the {policy[tlt_run]} run's weight sync
  (averaging the spot-trained drafters and sharing the step's samples, {mea[(tlt_run, 'sync_s')]:.2f} s in all).
* The speedup check: on this CPU {policy[tlt_run]} ran at {v.speedup['measured']:.2f}x of
  {policy[base_run]}'s speed ({rates}); the simulator predicts {v.speedup['predicted']:.2f}x
  ({v.speedup['error']:+.1%}).
* {speed_text}
* These are one pair of short runs on a shared VM whose speed drifts from minute to minute (and whose two cores
  differ). {bench_text}

{conclusion}
"""))
