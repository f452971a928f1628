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
# # 02 · Comparing the answers to the long tail
#
# One trace, one cluster, every registered policy: TLT and its ablations, the other answers to
# the long tail, and their combinations with TLT. In this notebook you learn
#
# * how much each policy speeds up the run over verl, and what it pays for it in **off-policy
#   cost**: samples trained on by a newer policy than the one that started them (staleness),
#   samples continued across a weight update (resumed) or thrown away (dropped), and a changed
#   mix of trained responses (`trained_len_ratio` ≠ 1),
# * what each one does with the idle tail of a step (Gantt charts),
# * how the ranking changes with the size of the cluster.
#
# | policy | what it does |
# |---|---|
# | `verl` | the baseline: synchronous steps, every engine waits for the slowest |
# | `tlt` | TLT: speculative decoding once an engine's batch is small, BEG tuner, drafter trained on idle workers |
# | `tlt-base` | TLT's switch with a model-free n-gram drafter, no training |
# | `static-sd` | TLT's switch with a drafter trained once; it goes stale as the policy moves |
# | `sd-always` | speculative decoding from the first token |
# | `tlt-dedicated` | one engine's GPUs reserved to train the drafter instead of the idle ones |
# | `cotrain` | TLT's switch with a drafter co-trained inside the actor update (as verl's MTP heads): fresh every step, its training added to the update |
# | `ideal` | a bound, not a policy: per step, the longest response decoded alone (or the step's tokens at the cluster's best throughput, if longer); no step of plain synchronous decoding is faster |
# | `partial` | over-provisioned partial rollout (APRIL, Kimi k1.5): launch 2x, stop when enough finish, resume the rest next step |
# | `tail-batching` | RollPacker: short rounds abort and park long prompts, a long round runs them later |
# | `longest-first` | length-aware scheduling: predicted-longest requests first, spread over engines |
# | `migrate` | RLHFuse: move the last requests onto two engines, release the others to the next stage |
# | `async` | bounded-staleness asynchronous RL (AReaL): rollout and training overlap on separate GPUs |
# | `A+tlt` | policy A with TLT's speculative decoding (for `migrate+tlt` the released engines train the drafter) |
#
# The same comparison from the shell: `tltsim compare --trace TRACE --gpus 64 --tp 4 -o out/cmp`.

# %% tags=["parameters"]
from tltsim.policies import policy_names

TRACE = "../traces/synthetic/dapo_like.parquet"  # a shipped trace or your own file
GPUS, TP = 64, 4  # the cluster of the main comparison (GPUS / TP rollout engines)
GPU, MODEL = "h100", "qwen2.5-7b"  # presets in tltsim/presets
STEPS = "0:6"  # trace steps of the main comparison; "" = all 20 (about 3x the time)
POLICIES = policy_names()  # every registered policy; the first (verl) is the baseline
FOCUS = ["verl", "tlt", "partial", "tail-batching", "async", "migrate+tlt"]  # drawn as Gantt charts
ABLATIONS = ["verl", "tlt", "tlt-base", "static-sd", "sd-always", "tlt-dedicated"]  # TLT and its ablations
GPU_COUNTS = [16, 32, 64, 128]  # cluster sizes of the ranking; add 256, 512 to scale up
RANK_STEPS = "0:3"  # trace steps per run of the ranking; "0:10" for steadier ranks
WORKERS = 2  # processes the ranking sweep runs on

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
# ## 1. Every policy on one trace and cluster

# %%
import time

from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import load

trace = load(TRACE)
cfg = SimConfig(trace=TRACE, cluster=ClusterConfig(gpus=GPUS, tp=TP, gpu=GPU, model=MODEL), steps=STEPS)
t0 = time.perf_counter()
results = {p: Simulator(trace, cfg, make_policy(p)).run() for p in POLICIES}
print(f"{len(results)} policies simulated in {time.perf_counter() - t0:.1f} s: {GPUS} x {GPU}, TP {TP}, "
      f"{MODEL}, steps {STEPS or 'all'} of {TRACE}")

# %% [markdown]
# The comparison table: speed on the left, off-policy cost on the right, sorted by speedup
# (end to end, baseline makespan / run makespan). `comparison_table` is the table of the HTML
# report (`tltsim.analysis.report.page`); `trained_len_ratio` is added from each run's summary.

# %%
from tltsim.analysis.report.page import comparison_table

runs = list(results.values())
table = comparison_table(runs).set_index("run")
table["trained_len_ratio"] = [r.summary["trained_len_ratio"] for r in runs]
SPEED = ["speedup", "makespan_s", "idle_fraction", "tail_share", "sd_share", "mean_accepted"]
COST = ["staleness_mean", "staleness_max", "resumed_fraction", "dropped_fraction", "trained_len_ratio"]
side_by_side = pd.concat({"speed": table[SPEED], "off-policy cost": table[COST]}, axis=1)
side_by_side.sort_values(("speed", "speedup"), ascending=False)

# %%
order = table.sort_values("speedup").index  # fastest at the top
fig, axes = plt.subplots(1, 4, sharey=True, figsize=(12, 0.32 * len(order) + 1.2), layout="constrained")
axes[0].barh(order, table.loc[order, "speedup"], color="#2c7bb6")
axes[0].axvline(1, color="k", lw=0.8)
axes[0].set_title(f"speedup over {POLICIES[0]} (x)")
axes[1].barh(order, table.loc[order, "staleness_mean"], color="#d7191c")
axes[1].set_title("mean staleness (versions)")
axes[2].barh(order, table.loc[order, "resumed_fraction"], color="#fdae61", label="resumed")
axes[2].barh(order, table.loc[order, "dropped_fraction"], left=table.loc[order, "resumed_fraction"],
             color="#7b3294", label="dropped")
axes[2].set_title("resumed / dropped share")
axes[2].legend(loc="lower right")
axes[3].barh(order, table.loc[order, "trained_len_ratio"] - 1, color="#636363")
axes[3].axvline(0, color="k", lw=0.8)
axes[3].set_title("trained length ratio - 1")
fig.suptitle("Speed and what it costs in off-policy terms", x=0.01, ha="left", fontweight="bold");

# %% [markdown]
# TLT's ablations, end to end and rollout alone: what the adaptive drafter, the spot trainer and
# the switch each contribute.

# %%
from tltsim.analysis.report import plots

plots.speedup([results[p] for p in ABLATIONS])

# %%
plots.step_breakdown([results[p] for p in FOCUS])

# %% [markdown]
# ## 2. What each policy does with the tail
#
# The baseline's slowest step, one panel per policy in `FOCUS` (same time axis). Idle grey on
# verl turns into speculative decoding and drafter training under TLT; partial rollout and tail
# batching stop the rollout when enough responses are done. `async` has no synchronous step: its
# rollout engines (top half) generate without pause while the trainer's GPUs (bottom half) train;
# its panel shows what the run records as that step, including rollout begun before it.

# %%
plots.gantt([results[p] for p in FOCUS])

# %%
plots.batch_size(results['tlt'])

# %%
plots.drafter([results[p] for p in POLICIES if p in ('tlt', 'static-sd', 'tlt-base', 'sd-always')])

# %% [markdown]
# ## 3. How the ranking changes with cluster size
#
# More engines share the same step's responses, so each holds fewer and the tail takes a larger
# part of the step. A sweep (`tltsim.analysis.sweep`, the engine of `tltsim sweep FILE`) runs every policy
# at each size in `GPU_COUNTS` on `WORKERS` processes; speedup is over the baseline at the same size.

# %%
import json
import tempfile
from pathlib import Path

from tltsim.analysis.sweep import load_spec, run_sweep

scratch = tempfile.TemporaryDirectory(prefix="tltsim-nb02-")  # removed when the kernel exits
work = Path(scratch.name)
(work / "ranking.toml").write_text(f'''
[base]
trace = "{TRACE}"
steps = "{RANK_STEPS}"
[base.cluster]
tp = {TP}
gpu = "{GPU}"
model = "{MODEL}"
[grid]
"cluster.gpus" = {json.dumps(GPU_COUNTS)}
policy = {json.dumps(POLICIES)}
''')
t0 = time.perf_counter()
sweep = run_sweep(load_spec(work / "ranking.toml"), work / "ranking", workers=WORKERS, progress=False).table
print(f"{len(sweep)} runs in {time.perf_counter() - t0:.1f} s")
base = sweep[sweep["policy"] == POLICIES[0]].set_index("cluster.gpus")["makespan_s"]
ranking = pd.DataFrame({"gpus": sweep["cluster.gpus"], "policy": sweep["policy"],
                        "speedup": sweep["cluster.gpus"].map(base) / sweep["makespan_s"]})
wide = ranking.pivot(index="policy", columns="gpus", values="speedup")
ranks = wide.rank(ascending=False, method="min").astype(int)
pd.concat({"speedup": wide, "rank": ranks}, axis=1).sort_values(("rank", GPU_COUNTS[-1]))

# %%
plots.sweep_heatmap(ranking, x="gpus", y="policy", metric="speedup")

# %% [markdown]
# ## Reading the numbers
#
# What the tables above say, written from them (so it holds for the parameters you ran with).

# %%
from IPython.display import Markdown


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def span(values, fmt: str = "{:.1f}x") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


sp = table["speedup"]
CUTTERS = ["partial", "async", "tail-batching"]  # the answers that stop or overlap the step
TLT_FAMILY = ABLATIONS[1:]  # TLT and its ablations
runnable = sp.drop(["ideal", POLICIES[0]]).sort_values(ascending=False)
cuts = [p.split("+")[0] in CUTTERS for p in runnable.index]
lead = list(runnable.index[:cuts.index(False) if False in cuts else len(cuts)])  # the fastest, up to the first other
other = runnable.index[len(lead)] if len(lead) < len(runnable) else None
cost = table.loc[CUTTERS]
tlt_cost = table.loc[TLT_FAMILY]
small, large = GPU_COUNTS[0], GPU_COUNTS[-1]
shrinking = [p for p in wide.index if p not in (POLICIES[0], "ideal") and wide.loc[p, large] <= wide.loc[p, small]]
beat_bound = [p for p in runnable.index if sp[p] > sp["ideal"]]
display(Markdown(f"""
* The {len(lead)} fastest policies one can run are answers that cut the step short or their combinations with
  TLT: {', '.join(f'{p} {sp[p]:.1f}x' for p in lead)} at {GPUS} GPUs ({results[POLICIES[0]].summary['steps']}
  steps){f'; the fastest other one, {other}, gains {sp[other]:.1f}x' if other else ''}. They pay in off-policy terms: partial rollout trains on samples
  {cost.loc['partial', 'staleness_mean']:.2f} policy versions old on average and resumes
  {cost.loc['partial', 'resumed_fraction']:.0%} of them across a weight update, async trains
  {cost.loc['async', 'staleness_mean']:.1f} versions behind, tail batching throws away
  {cost.loc['tail-batching', 'dropped_fraction']:.0%} of the responses it starts; all three change the mix of
  trained responses (`trained_len_ratio` {span(cost['trained_len_ratio'], '{:.2f}')}).
* TLT and its variants gain {span(sp[TLT_FAMILY])} at {GPUS} GPUs with staleness
  {tlt_cost['staleness_max'].max():.0f}, {(tlt_cost['resumed_fraction'] + tlt_cost['dropped_fraction']).max():.0%}
  resumed or dropped and `trained_len_ratio` {span(tlt_cost['trained_len_ratio'], '{:.2f}')}. Combined with
  partial rollout or tail batching, speculative decoding changes their gain from
  {sp['partial']:.1f}x to {sp['partial+tlt']:.1f}x and from {sp['tail-batching']:.1f}x to
  {sp['tail-batching+tlt']:.1f}x.
* Reordering alone (longest-first) and migrating the tail (migrate) gain at most
  {sp[['longest-first', 'migrate']].max():.2f}x here.
* `ideal` ({sp['ideal']:.2f}x) is the bound on plain synchronous decoding: per step, the longest response decoded
  alone (or the step's tokens at the cluster's best throughput, if longer). {len(beat_bound)} of the
  {len(runnable)} policies beat it end to end, by speculating, cutting the step short, overlapping it with
  training or starting the reward stage before the rollout ends (the report's explanations say which).
* Cluster size reorders the top: async is {ordinal(ranks.loc['async', small])} at {small} GPUs and
  {ordinal(ranks.loc['async', large])} at {large}. From {small} to {large} GPUs every answer gains more except
  {', '.join(f'{p} ({wide.loc[p, small]:.2f}x -> {wide.loc[p, large]:.2f}x)' for p in shrinking) or 'none'}.
"""))
