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
# # 01 · Traces: response lengths, the tail, and what a synchronous step wastes
#
# A trace is one row per generated response (`step, prompt_id, sample, prompt_len, response_len`).
# In this notebook you learn how to
#
# * load a shipped trace, and your own length logs (a verl-style JSONL and a Vidur request CSV),
# * read the length distribution step by step and the **tail share**: the part of a step spent
#   waiting for its last 10% of responses,
# * measure what a synchronous RL step (verl) wastes on a modelled cluster: the idle share of GPU
#   time, where in the step it falls, and how much a perfectly balanced step would save.
#
# The defaults run in well under a minute on 2 CPU cores; the parameter cell says what scales it up.

# %% tags=["parameters"]
TRACE = "../traces/synthetic/dapo_like.parquet"  # a shipped trace or your own file (.parquet, .csv, .jsonl)
OTHER_TRACES = ["../traces/synthetic/intern_s1_mixture.parquet", "../traces/synthetic/lognormal_drift.parquet"]  # for the table
GPUS, TP = 64, 4  # the simulated cluster: GPUS / TP rollout engines; try 128 or 256
GPU, MODEL = "h100", "qwen2.5-7b"  # presets in tltsim/presets
STEPS = "0:8"  # trace steps to simulate; "" = all 20 (about 2.5x the simulation time)
SEED = 0  # seeds the made-up user logs of section 2

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
# ## 1. A shipped trace
#
# `load` reads the file and validates it; the metadata travels inside the Parquet file and says
# where the lengths come from.

# %%
from tltsim.trace import load, stats

trace = load(TRACE)
print(trace.meta.provenance)
print(f"source {trace.meta.source}, cap {trace.meta.max_response_len}, group size {trace.meta.group_size}, "
      f"{len(trace.df):,} responses in {trace.df['step'].nunique()} steps")
trace.df.head()

# %% [markdown]
# `stats` gives per-step and overall figures. `max_over_median` is how far the longest response
# sits from a typical one; `tail_share` is explained in section 3.

# %%
s = stats(trace)
per_step = pd.DataFrame(s["per_step"]).set_index("step")
per_step[["responses", "median", "p90", "p99", "max", "max_over_median", "tail_share", "truncated_fraction"]]

# %%
from tltsim.analysis.report import plots

plots.length_distribution(trace, title=trace.meta.source)

# %%
from matplotlib.ticker import FuncFormatter, NullFormatter

ax = per_step[["median", "p90", "p99", "max"]].plot(logy=True, marker="o", ms=3, figsize=(8, 3.2))
ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
ax.yaxis.set_minor_formatter(NullFormatter())
ax.set(title="Response length per step", xlabel="step", ylabel="tokens (log scale)")
ax.legend(loc="center left", bbox_to_anchor=(1, 0.5));

# %% [markdown]
# ## 2. Your own lengths: a verl-style log and a Vidur CSV
#
# `load` recognises the length logs people already have by their content. A **verl-style JSONL**
# has one prompt per line (`step`, `input` = prompt length, `output` = the group's response
# lengths, optionally `dp_rank` = the engine that served it). A **Vidur request CSV** has
# `arrived_at, num_prefill_tokens, num_decode_tokens`; `requests_per_step` cuts it into steps.
# Here both are made up with a seeded generator and written to a temporary directory.

# %%
import json
import tempfile
from pathlib import Path

scratch = tempfile.TemporaryDirectory(prefix="tltsim-nb01-")  # removed when the kernel exits
work = Path(scratch.name)
rng = np.random.default_rng(SEED)
with open(work / "verl_lengths.jsonl", "w") as f:
    for step in range(3):
        for prompt in range(16):
            lengths = np.maximum(1, rng.lognormal(np.log(600), 0.9, size=8)).round().astype(int)
            f.write(json.dumps({"step": step, "dp_rank": prompt // 4, "input": int(rng.integers(40, 300)),
                                "output": lengths.tolist(), "n_sampling": 8}) + "\n")
print(open(work / "verl_lengths.jsonl").readline())

vidur = pd.DataFrame({
    "arrived_at": np.cumsum(rng.exponential(0.05, size=256)),
    "num_prefill_tokens": rng.integers(50, 500, size=256),
    "num_decode_tokens": np.maximum(1, rng.pareto(1.5, size=256) * 200).round().astype(int),
})
vidur.to_csv(work / "vidur_requests.csv", index=False)
vidur.head(3)

# %%
mine_verl = load(work / "verl_lengths.jsonl")
mine_vidur = load(work / "vidur_requests.csv", requests_per_step=64)
print(mine_verl.meta.provenance)
print(mine_vidur.meta.provenance)
print(f"group size: {mine_verl.meta.group_size} in the verl log, {mine_vidur.meta.group_size} in the Vidur requests")
mine_verl.df.head()

# %% [markdown]
# Every trace goes through the same statistics, so the made-up logs sit in one table with the
# shipped traces (each with its group size, printed above).

# %%
OVERALL = ["steps", "responses", "median", "p90", "p99", "max", "max_over_median", "tail_share",
           "truncated_fraction"]
sources = {Path(TRACE).name: trace, **{Path(p).name: load(p) for p in OTHER_TRACES},
           "verl_lengths.jsonl (yours)": mine_verl, "vidur_requests.csv (yours)": mine_vidur}
pd.DataFrame([{k: stats(t)[k] for k in OVERALL} for t in sources.values()], index=list(sources))

# %% [markdown]
# ## 3. The tail share
#
# Picture one decode slot per response, all starting together, one token per unit of time:
# a response of length L finishes at time L and the step ends with its longest response. By
# t90, 90% of the responses have finished; the **tail share** is (max − t90) / max, the part of
# the step spent on the last 10%. Below is the step with the longest response.

# %%
from tltsim.trace import tail_share
from tltsim.trace.stats import t90

step = int(per_step["max"].idxmax())
x = np.sort(trace.df.loc[trace.df["step"] == step, "response_len"].to_numpy())
t = np.arange(x[-1] + 1)
running = len(x) - np.searchsorted(x, t, side="right")  # responses still generating at time t

fig, ax = plt.subplots(figsize=(8, 3.2))
ax.plot(t, running, color="#2c7bb6")
ax.axvspan(t90(x), x[-1], color="0.85", label=f"last 10%: {tail_share(x):.0%} of the step")
ax.axvline(t90(x), color="k", ls="--", lw=1, label=f"t90 = {t90(x):,} tokens")
ax.set_yscale("log")
ax.set(title=f"Step {step}: responses still generating", xlabel="tokens generated (time)",
       ylabel="running responses (log)")
ax.legend();

# %% [markdown]
# ## 4. What a synchronous step wastes
#
# verl rolls out each step on every engine (prompt groups split in contiguous chunks), waits for
# the slowest engine, then computes rewards, trains and syncs weights on all GPUs. The simulator
# replays the trace over the cluster with a roofline cost model of the GPU and model presets.

# %%
from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator

cfg = SimConfig(trace=TRACE, cluster=ClusterConfig(gpus=GPUS, tp=TP, gpu=GPU, model=MODEL), steps=STEPS)
verl = Simulator(trace, cfg, make_policy("verl")).run()
ideal = Simulator(trace, cfg, make_policy("ideal")).run()
WASTE = ["makespan_s", "mean_step_s", "rollout_share", "idle_fraction", "idle_gpu_seconds", "tail_share"]
pd.DataFrame({r.name: {k: r.summary[k] for k in WASTE} for r in (verl, ideal)})

# %%
print(f"verl: {verl.summary['idle_fraction']:.0%} of all GPU time is idle; "
      f"{verl.summary['rollout_share']:.0%} of the run is rollout, and {verl.summary['tail_share']:.0%} of "
      f"the rollout time comes after 90% of the responses are done.")
print(f"No schedule of plain decoding rolls a step out faster than 'ideal' (per step, the longest response "
      f"decoded alone, or the step's tokens at the cluster's best throughput if that is longer): at best it "
      f"makes verl's rollout {verl.summary['rollout_s'] / ideal.summary['rollout_s']:.2f}x faster and the run "
      f"{verl.summary['makespan_s'] / ideal.summary['makespan_s']:.2f}x faster; only changing the work per "
      f"token (speculation) or the step's shape (partial, async) goes further.")

# %% [markdown]
# Per step: rollout time, the time after 90% of the responses have finished (`tail_s`) and the
# GPU-seconds that sat idle.

# %%
from tltsim.analysis.report.plots.steps import idle_by_step

waste = verl.steps.set_index("step")[["rollout_s", "tail_s", "total_s"]]
waste["idle_gpu_s"] = idle_by_step(verl)
waste["idle_share_of_step"] = waste["idle_gpu_s"] / (GPUS * waste["total_s"])
waste

# %% [markdown]
# Where it goes: the Gantt chart of the slowest step (one row per engine), then the running batch
# of every engine in that step, then the cluster's GPUs by state over the run.

# %%
plots.gantt(verl)

# %%
plots.batch_size(verl)

# %%
plots.utilisation(verl)

# %% [markdown]
# The grey in these charts is what the other answers to the long tail go after: TLT turns it into
# drafter training and faster decoding, partial rollout and tail batching stop the step early,
# asynchronous RL overlaps steps. `02_compare_policies.ipynb` plays them against each other.
