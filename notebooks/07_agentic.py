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
# # 07 · Agentic rollouts: turns, tool calls and where the time goes
#
# An agent's trajectory is several model turns with tool calls between them: the model generates, calls a
# tool (a search, a code sandbox), reads its answer, generates again. In the simulator a trajectory leaves its
# engine's running batch for each tool call, and comes back with a prefill of the tool's answer, its KV kept
# in the engine's cache while there is room. In this notebook you learn
#
# * what a multi-turn trace holds (turns, tool calls, the tokens a tool's answer appends) and its figures per
#   step (`tltsim trace stats`),
# * where a step's GPU time goes on agentic work: generation, the prefill after a tool, engines whose
#   trajectories all wait on tools (`tool_wait`), idle engines at the barrier, drafter training,
# * how TLT, partial rollout, asynchronous RL, history drafting and trajectory-aware ordering (`longest-first`)
#   compare on it,
# * how the answer moves as tools get slower (a retriever answers in a tenth of a second, a sandbox running
#   tests in seconds): TLT trains its drafter in the tool waits.
#
# The same from the shell: `tltsim trace synth agentic ... -o T.parquet`, `tltsim trace stats T.parquet`,
# `tltsim compare --trace T.parquet --policies verl,tlt,partial,das,longest-first -o out/agentic`; a PolyTrace
# multi-turn log reads as it is (`tltsim trace convert LOG_DIR T.parquet`).

# %% tags=["parameters"]
TRACE = "../traces/synthetic/agentic.parquet"  # a multi-turn trace: shipped, synthesized or converted
GPUS, TP = 64, 4  # the cluster (GPUS / TP rollout engines)
GPU, MODEL = "h100", "qwen2.5-7b"  # presets in tltsim/presets
STEPS = "0:2"  # trace steps simulated; "0:10" for steadier figures (about 5x the time)
POLICIES = ["verl", "tlt", "partial", "partial+tlt", "async", "das", "longest-first"]  # the first is the baseline
LATENCY_SCALES = [1, 10, 100]  # tool latencies multiplied by these in section 3
SWEEP = ["verl", "tlt", "partial"]  # the policies of section 3

# %%
# %matplotlib inline
# %config InlineBackend.print_figure_kwargs = {"dpi": 80, "bbox_inches": "tight"}
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown

warnings.filterwarnings("ignore", message="IProgress not found")
pd.set_option("display.precision", 3)
pd.set_option("display.width", 160)

# %% [markdown]
# ## 1. The trace: trajectories, turns and tools

# %%
from tltsim.trace import load, stats

trace = load(TRACE)
turns = trace.turns
print(f"{TRACE}: {len(trace.df):,} trajectories in {len(trace.steps)} steps, source {trace.meta.source}")
turns.head(8)

# %%
st = pd.DataFrame(stats(trace)["per_step"]).set_index("step")
st[["trajectories", "turns", "tool_calls", "completion_tokens", "tool_latency_s"]].head()

# %%
per_traj = turns.groupby(["step", "prompt_id", "sample"]).size()
called = turns["tool_latency_s"].dropna()
fig, axes = plt.subplots(1, 3, figsize=(12, 3), layout="constrained")
axes[0].bar(*np.unique(per_traj, return_counts=True), color="#2c7bb6")
axes[0].set(title="turns per trajectory", xlabel="turns", ylabel="trajectories")
axes[1].hist(turns["response_len"], bins=60, color="#1a9641")
axes[1].set(title="tokens a turn generates", xlabel="tokens", yscale="log")
axes[2].hist(np.log10(called), bins=40, color="#a6cee3")
axes[2].set(title="tool latency", xlabel="log10 seconds");

# %%
Markdown(f"A trajectory takes {per_traj.mean():.2f} turns on average ({per_traj.min()} to {per_traj.max()}); "
         f"its tools answer in a median {called.median():.3f} s and append a median "
         f"{turns.loc[turns['tool_latency_s'].notna(), 'tool_tokens'].median():,.0f} tokens each.")

# %% [markdown]
# ## 2. The policies on agentic work, and where the time goes

# %%
from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator

cfg = SimConfig(trace=TRACE, cluster=ClusterConfig(gpus=GPUS, tp=TP, gpu=GPU, model=MODEL), steps=STEPS)
results = {p: Simulator(trace, cfg, make_policy(p)).run() for p in POLICIES}
base = results[POLICIES[0]].summary["makespan_s"]
KEYS = ["mean_step_s", "idle_fraction", "tool_wait_share", "turns_per_trajectory", "sd_share",
        "staleness_mean", "resumed_fraction"]
table = pd.DataFrame({p: {"speedup": base / r.summary["makespan_s"], **{k: r.summary[k] for k in KEYS}}
                      for p, r in results.items()}).T
table.sort_values("speedup", ascending=False)

# %% [markdown]
# Where each policy's GPU time goes, as shares of all GPU time (every timeline state; `tool_wait`: an engine
# whose trajectories all wait on tools).

# %%
from tltsim.analysis.report.plots.style import STATE_COLORS
from tltsim.core.records import STATES


def shares(result) -> pd.Series:
    tl = result.timeline
    secs = (tl["t_end"] - tl["t_start"]).groupby(tl["state"]).sum()
    return (secs / secs.sum()).reindex(STATES, fill_value=0.0)


where = pd.DataFrame({p: shares(r) for p, r in results.items()}).T
where = where.loc[:, where.sum() > 0]
ax = where.plot.barh(stacked=True, figsize=(10, 3.2), color=[STATE_COLORS[s] for s in where.columns], width=0.8)
ax.set(xlabel="share of GPU time", xlim=(0, 1))
ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False);

# %%
fastest = table["speedup"].idxmax()
Markdown(f"On this trace `{fastest}` is fastest, {table.loc[fastest, 'speedup']:.2f}x {POLICIES[0]}'s end to end. "
         f"Under {POLICIES[0]}, engines spend {where.loc[POLICIES[0]].get('tool_wait', 0):.1%} of GPU time with every "
         f"trajectory waiting on a tool and {where.loc[POLICIES[0], 'idle']:.1%} idle at the barrier; tlt turns "
         f"{where.loc['tlt'].get('drafter_train', 0):.1%} of GPU time into drafter training.")

# %%
from tltsim.analysis.report import plots

plots.gantt([results["verl"], results["tlt"]])

# %% [markdown]
# ## 3. Slower tools
#
# The same trajectories with every tool call taking 10x and 100x as long (a code sandbox, a web browser): the
# waits grow, engines sit with nothing to run, and TLT's spot trainer takes those gaps.

# %%
from tltsim.trace import Trace


def slower(trace: Trace, scale: float) -> Trace:
    """The trace with every tool call `scale` times as long."""
    df = trace.df.copy()
    df["tool_latency_s"] = [[None if v is None or v != v else v * scale for v in cell] for cell in df["tool_latency_s"]]
    return Trace.from_frame(df, trace.meta)


rows = []
for scale in LATENCY_SCALES:
    t = slower(trace, scale)
    runs = {p: Simulator(t, cfg, make_policy(p)).run().summary for p in SWEEP}
    for p, s in runs.items():
        rows.append({"latency x": scale, "policy": p, "speedup": runs[SWEEP[0]]["makespan_s"] / s["makespan_s"],
                     "mean_step_s": s["mean_step_s"], "tool_wait_share": s["tool_wait_share"],
                     "drafter_train_gpu_seconds": s["drafter_train_gpu_seconds"]})
sweep = pd.DataFrame(rows)
sweep.pivot(index="latency x", columns="policy", values=["speedup", "tool_wait_share"])

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.2), layout="constrained")
for p, g in sweep.groupby("policy", sort=False):
    axes[0].plot(g["latency x"], g["mean_step_s"], marker="o", label=p)
    axes[1].plot(g["latency x"], g["tool_wait_share"], marker="o", label=p)
axes[0].set(xscale="log", yscale="log", xlabel="tool latency (x the trace's)", ylabel="seconds a step", title="step time")
axes[1].set(xscale="log", xlabel="tool latency (x the trace's)", ylabel="share", title="tool_wait_share")
axes[0].legend();

# %%
top = sweep[sweep["latency x"] == LATENCY_SCALES[-1]].set_index("policy")
Markdown(f"At {LATENCY_SCALES[-1]}x the tools' latency, engines wait on tools for "
         f"{top.loc[SWEEP[0], 'tool_wait_share']:.1%} of {SWEEP[0]}'s rollout time, and tlt's step takes "
         f"{top.loc['tlt', 'mean_step_s']:.1f} s against {top.loc[SWEEP[0], 'mean_step_s']:.1f} s "
         f"({top.loc['tlt', 'speedup']:.2f}x).")
