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
# # 03 · Tuning TLT: which knobs matter
#
# TLT has a handful of knobs (`tltsim/policies/tlt.py`, `TLTKnobs`). In this notebook you sweep
# the ones a user sets, each around the defaults, on one trace and cluster:
#
# * the **SD threshold**: speculative decoding switches on once an engine's running batch is at
#   or below it (default 32), at three cluster sizes, beside `tlt-auto`, whose switch learns it,
# * the **arm set**: the `depth_topk_verify` draft-tree strategies the tuner picks from,
# * the **tuner**: BEG-MAB (TLT's), epsilon-greedy, UCB1, fixed (the first arm), and an oracle
#   that knows the modelled reward,
# * the **drafter-training cadence**: spot-train the drafter during every k-th step's rollout,
# * **min idle workers**: how many workers must be idle before spot training starts,
#
# and read off what matters and what does not. Sweeps go through `tltsim.analysis.sweep` (the engine of
# `tltsim sweep FILE`): a TOML file per sweep, runs in parallel processes, a results table.

# %% tags=["parameters"]
TRACE = "../traces/synthetic/dapo_like.parquet"  # a shipped trace or your own file
GPUS, TP = 64, 4  # the cluster every sweep but the threshold's runs on
STEPS = "0:6"  # trace steps per run; "" = all 20 (about 3x the time; cadence effects grow with steps)
WORKERS = 2  # sweep processes; use your core count to scale up
THRESHOLDS = [4, 8, 16, 32, 64, 128]  # SD threshold values (TLT default 32)
THRESHOLD_GPUS = [32, 64, 128]  # cluster sizes of the threshold sweep
ARM_SETS = {  # name -> the strategies the tuner chooses among
    "TLT default (8_4_48..8_4_8)": ["8_4_48", "8_4_32", "8_4_16", "8_4_8"],
    "8_4_48 only": ["8_4_48"],
    "8_4_16 only": ["8_4_16"],
    "8_4_8 only": ["8_4_8"],
    "shallow (4_2_8, 4_1_4)": ["4_2_8", "4_1_4"],
    "deep (12_8_64..12_8_16)": ["12_8_64", "12_8_32", "12_8_16"],
}
TUNERS = ["beg", "egreedy", "ucb", "fixed", "oracle"]
CADENCES = [1, 2, 4]  # spot-train every k-th step
MIN_IDLE = [1, 2, 4, 8, 16]  # idle workers before spot training starts (16 = every engine at 64 GPUs, TP 4)

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
# ## The sweeps
#
# `sweep(name, grid)` writes a sweep file (the base config below plus a `[grid]` of dotted config
# keys) and runs it; every table gets `speedup` = verl's makespan at the same cluster size / the
# run's makespan.

# %%
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from tltsim.analysis.report import plots
from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.analysis.sweep import load_spec, run_sweep
from tltsim.trace import load

trace = load(TRACE)
cfg = SimConfig(trace=TRACE, cluster=ClusterConfig(gpus=GPUS, tp=TP), steps=STEPS)
verl_makespan = {g: Simulator(trace, replace(cfg, cluster=replace(cfg.cluster, gpus=g)), make_policy("verl"))
                 .run().summary["makespan_s"] for g in sorted({GPUS, *THRESHOLD_GPUS})}

scratch = tempfile.TemporaryDirectory(prefix="tltsim-nb03-")  # removed when the kernel exits
work = Path(scratch.name)
BASE = f'''[base]
trace = "{TRACE}"
policy = "tlt"
steps = "{STEPS}"
[base.cluster]
gpus = {GPUS}
tp = {TP}
'''


def sweep(name: str, grid: dict) -> pd.DataFrame:
    path = work / f"{name}.toml"
    path.write_text(BASE + "[grid]\n" + "".join(f'"{k}" = {json.dumps(v)}\n' for k, v in grid.items()))
    t0 = time.perf_counter()
    table = run_sweep(load_spec(path), work / name, workers=WORKERS, progress=False).table
    print(f"{name}: {len(table)} runs in {time.perf_counter() - t0:.1f} s")
    table["speedup"] = table["cluster.gpus"].map(verl_makespan) / table["makespan_s"]
    return table


COLUMNS = ["speedup", "sd_share", "mean_accepted", "drafter_train_gpu_seconds", "idle_fraction"]

# %% [markdown]
# ## 1. The SD threshold

# %%
th = sweep("threshold", {"cluster.gpus": THRESHOLD_GPUS, "policy_knobs.threshold": THRESHOLDS})
print((work / "threshold.toml").read_text())
th.pivot(index="policy_knobs.threshold", columns="cluster.gpus", values=["speedup", "sd_share"])

# %%
fig = plots.sweep_lines(th, x="policy_knobs.threshold", metric="speedup", by=["cluster.gpus"])
fig.axes[0].set_xscale("log", base=2)
fig.axes[0].set_xticks(THRESHOLDS, [str(t) for t in THRESHOLDS])
fig

# %%
from IPython.display import Markdown

responses = int(trace.df.groupby("step").size().median())  # responses per step
per_engine = {g: responses / (g // TP) for g in THRESHOLD_GPUS}
display(Markdown(
    f"Requests per engine set the scale: a step's {responses} responses over `GPUS / TP` engines is "
    + ", ".join(f"{n:.0f} per engine at {g} GPUs" for g, n in per_engine.items())
    + ". A threshold at or above that number speculates from the first decode iteration (`sd_share` near 1)."))

# %% [markdown]
# ### The learned switch beside the fixed one
#
# `tlt-auto` is TLT whose threshold is learned (`tltsim/control/learned.py`, docs/design.md#the-learned-switch-tlt-auto):
# per batch bucket (1, 2-3, 4-7, ...) it compares measured speculative and plain tokens per second, starts from
# the cost model's estimate, explores one bucket above its threshold when that bucket is unmeasured, and
# speculates where it pays. One run per cluster size, beside the fixed thresholds swept above:

# %%
auto_rows = []
for g in THRESHOLD_GPUS:
    s = Simulator(trace, replace(cfg, cluster=replace(cfg.cluster, gpus=g)), make_policy("tlt-auto")).run().summary
    auto_rows.append({"cluster.gpus": g, "speedup": verl_makespan[g] / s["makespan_s"], "sd_share": s["sd_share"],
                      "sd_threshold": s["sd_threshold"], "sd_buckets": ", ".join(s["sd_buckets"])})
auto = pd.DataFrame(auto_rows).set_index("cluster.gpus")
by_gpus = th.pivot(index="policy_knobs.threshold", columns="cluster.gpus", values="speedup")
side = pd.DataFrame({"tlt (threshold 32)": by_gpus.loc[32], "best fixed threshold": by_gpus.idxmax(),
                     "its speedup": by_gpus.max(), "tlt-auto": auto["speedup"],
                     "learned threshold": auto["sd_threshold"], "buckets it speculates in": auto["sd_buckets"]})
side

# %%
fig, ax = plt.subplots(figsize=(6, 3.2))
for g in THRESHOLD_GPUS:
    line, = ax.plot(THRESHOLDS, by_gpus[g], marker="o", label=f"fixed threshold, {g} GPUs")
    ax.axhline(auto.loc[g, "speedup"], color=line.get_color(), linestyle="--", label=f"tlt-auto, {g} GPUs")
ax.set_xscale("log", base=2)
ax.set_xticks(THRESHOLDS, [str(t) for t in THRESHOLDS])
ax.set_xlabel("SD threshold")
ax.set_ylabel("speedup over verl")
ax.legend(fontsize=7, ncol=2)
fig.tight_layout()

# %%
gap = (side["its speedup"] - side["tlt-auto"]) / side["its speedup"]
display(Markdown(
    "Against the best fixed threshold of the sweep at each cluster size, tlt-auto is "
    + ", ".join(f"{abs(x):.1%} {'behind' if x > 0 else 'ahead'} at {g} GPUs" for g, x in gap.items())
    + "; against TLT's default of 32 it gains "
    + ", ".join(f"{side.loc[g, 'tlt-auto'] - side.loc[g, 'tlt (threshold 32)']:+.2f}x at {g} GPUs" for g in gap.index)
    + ". It needs no sweep: the threshold it learned is in its summary (`sd_threshold`, `sd_buckets`)."))

# %% [markdown]
# ## 2. The arm set

# %%
arms = sweep("arms", {"policy_knobs.arms": list(ARM_SETS.values())})
arms.insert(1, "arm set", list(ARM_SETS))
arms.set_index("arm set")[COLUMNS]

# %%
plots.sweep_bars(arms, ["arm set"], "speedup")

# %% [markdown]
# ## 3. The tuner

# %%
tuners = sweep("tuner", {"policy_knobs.tuner": TUNERS})
tuners.set_index("policy_knobs.tuner")[COLUMNS]

# %%
plots.sweep_bars(tuners, ["policy_knobs.tuner"], "speedup")

# %% [markdown]
# ## 4. Drafter-training cadence

# %%
cadence = sweep("cadence", {"policy_knobs.cadence": CADENCES})
cadence.set_index("policy_knobs.cadence")[COLUMNS]

# %%
plots.sweep_lines(cadence, x="policy_knobs.cadence", metric="speedup")

# %% [markdown]
# ## 5. Min idle workers before spot training

# %%
idle = sweep("min_idle", {"policy_knobs.min_idle": MIN_IDLE})
idle.set_index("policy_knobs.min_idle")[COLUMNS]

# %%
plots.sweep_lines(idle, x="policy_knobs.min_idle", metric="speedup")


# %% [markdown]
# ## What matters
#
# For each knob at the main cluster size: the lowest and highest speedup over its values, the
# spread between them, and the best value.

# %%
def spread(table: pd.DataFrame, key: str) -> dict:
    t = table[table["cluster.gpus"] == GPUS]
    best = t.loc[t["speedup"].idxmax(), key]
    return {"min speedup": t["speedup"].min(), "max speedup": t["speedup"].max(),
            "spread": t["speedup"].max() - t["speedup"].min(), "best value": str(best)}


matters = pd.DataFrame({
    "SD threshold": spread(th, "policy_knobs.threshold"),
    "arm set": spread(arms, "arm set"),
    "tuner": spread(tuners, "policy_knobs.tuner"),
    "cadence": spread(cadence, "policy_knobs.cadence"),
    "min idle workers": spread(idle, "policy_knobs.min_idle"),
}).T.sort_values("spread", ascending=False)
matters

# %% [markdown]
# ## Conclusion
#
# The table above orders the knobs by how far they move the speedup. The cell below writes what drives
# each spread from the sweeps' tables, for the parameters you ran with.

# %%
DEFAULT_THRESHOLD = 32  # TLT's default SD threshold
ENGINES = GPUS // TP
NEAR = 0.03  # speedups this close to the default arm set's count as equal here


def span(values, fmt: str = "{:.2f}x") -> str:
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def threshold_text(size: float) -> str:
    t = th.pivot(index="policy_knobs.threshold", columns="cluster.gpus", values="speedup").round(3)
    peaks = {g: t[g].idxmax() for g in THRESHOLD_GPUS}  # the lowest threshold reaching the best speedup
    covers = {g: min([x for x in THRESHOLDS if x >= n], default=None) for g, n in per_engine.items()}
    where = "; ".join(f"{per_engine[g]:.0f} requests per engine at {g} GPUs: best from {peaks[g]}" for g in THRESHOLD_GPUS)
    rule = ("the best threshold is the first one at or above the number of requests an engine holds, so that SD "
            "runs from the first iterations" if peaks == covers else
            "the best threshold is not always the first one at or above the requests an engine holds")
    main = t[GPUS]
    sooner = ("Speculating sooner paid at every cluster size" if all(t[g].is_monotonic_increasing for g in THRESHOLD_GPUS)
              else "Speculating sooner did not pay at every cluster size")
    left = ", ".join(f"{t[g].max() - t.loc[DEFAULT_THRESHOLD, g]:.2f}x at {g} GPUs" for g in THRESHOLD_GPUS)
    return (f"**The SD threshold** ({size:.2f}x): from {main.min():.2f}x at {main.idxmin()} to {main.max():.2f}x at "
            f"{main.idxmax()} at {GPUS} GPUs. {sooner}: {rule} "
            f"({where}). TLT's default of {DEFAULT_THRESHOLD} leaves {left}.")


a = arms.set_index("arm set")
default_arms = list(ARM_SETS)[0]
worst_arms = a["speedup"].idxmin()
near = a.index[a["speedup"] >= a.loc[default_arms, "speedup"] - NEAR]
lose = a.index.drop([*near, worst_arms])


def arms_text(size: float) -> str:
    why = (f" though it accepts the most tokens per verify ({a.loc[worst_arms, 'mean_accepted']:.2f}), since every "
           f"verify costs more" if a["mean_accepted"].idxmax() == worst_arms else "")
    losses = (f"; {', '.join(lose)} lose {span(a.loc[default_arms, 'speedup'] - a.loc[lose, 'speedup'])} against "
              f"the default" if len(lose) else "")
    return (f"**The arm set** ({size:.2f}x), through its worst choice: {worst_arms} is slowest "
            f"({a.loc[worst_arms, 'speedup']:.2f}x){why}. {', '.join(near)} lie within "
            f"{span(a.loc[near, 'speedup'])}{losses}.")


def min_idle_text(size: float) -> str:
    m = idle.set_index("policy_knobs.min_idle")
    sp = m["speedup"].round(3)
    flat = m.index[sp == sp.iloc[0]][-1]
    shrink = 1 - m.loc[flat, "drafter_train_gpu_seconds"] / m["drafter_train_gpu_seconds"].iloc[0]
    text = (f"**Min idle workers** ({size:.2f}x): from {m.index[0]} to {flat} the speedup does not move "
            f"({sp.iloc[0]:.3f}x) and drafter training shrinks by {shrink:.0%}.")
    top = m.index[-1]
    if top > flat:
        static_sd = verl_makespan[GPUS] / Simulator(trace, cfg, make_policy("static-sd")).run().summary["makespan_s"]
        never = m.loc[top, "drafter_train_gpu_seconds"] == 0
        every = (f", every engine ({ENGINES}) would have to be idle at once, which never happens while the slowest "
                 f"still rolls out" if top >= ENGINES and never else "")
        text += (f" At {top}{every}: the drafter trains {m.loc[top, 'drafter_train_gpu_seconds']:.0f} GPU-seconds "
                 f"and TLT runs at {m.loc[top, 'speedup']:.3f}x, against {static_sd:.3f}x for static-sd (a drafter "
                 f"trained once, notebook 02).")
    return text


u = tuners.set_index("policy_knobs.tuner")["speedup"]
choosable = u.drop("oracle", errors="ignore")  # the oracle knows the modelled reward: no tuner one can run


def tuner_text(size: float) -> str:
    others = ", ".join(f"{k} loses {u['beg'] - u[k]:.2f}x" for k in choosable.index if k != "beg")
    oracle = f" against the oracle's {u['oracle']:.3f}x" if "oracle" in u else ""
    return f"**The tuner** ({size:.2f}x): BEG-MAB runs at {u['beg']:.3f}x{oracle}; against it, {others}."


def cadence_text(size: float) -> str:
    c = cadence.set_index("policy_knobs.cadence")
    first, last = c.index[0], c.index[-1]
    best = "training during every step's rollout" if c["speedup"].idxmax() == 1 else f"every {c['speedup'].idxmax()}th step"
    return (f"**Drafter-training cadence** ({size:.2f}x): {best} is best; every {last}th step costs "
            f"{c.loc[first, 'speedup'] - c.loc[last, 'speedup']:.2f}x over steps {STEPS} (accepted length "
            f"{c.loc[first, 'mean_accepted']:.2f} -> {c.loc[last, 'mean_accepted']:.2f}"
            f"{' as the drafter goes staler' if c.loc[last, 'mean_accepted'] < c.loc[first, 'mean_accepted'] else ''}, "
            f"and {c.loc[last, 'idle_fraction']:.0%} of GPU time idle instead of "
            f"{c.loc[first, 'idle_fraction']:.0%}).")


TEXT = {"SD threshold": threshold_text, "arm set": arms_text, "min idle workers": min_idle_text,
        "tuner": tuner_text, "cadence": cadence_text}
sensible_idle = idle.loc[idle["policy_knobs.min_idle"] < ENGINES, "speedup"]
small_knobs = max(choosable.max() - choosable.min(), matters.loc["cadence", "spread"],
                  sensible_idle.max() - sensible_idle.min())
display(Markdown(
    f"At {GPUS} GPUs, TP {TP}, steps {STEPS or 'all'} of `{TRACE}`:\n\n"
    + "\n".join(f"{i}. {TEXT[knob](matters.loc[knob, 'spread'])}" for i, knob in enumerate(matters.index, 1))
    + f"\n\nSo, on this trace and cluster: set the threshold high enough and keep TLT's arm set (or "
    f"{', '.join(near.drop(default_arms))}) rather than {worst_arms}; within sensible values min idle workers, "
    f"the tuner and the cadence move the speedup by {small_knobs:.2f}x or less. These are simulator results; change "
    f"the parameter cell to see whether they hold for your trace and cluster."))
