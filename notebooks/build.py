"""Writes the notebooks of this directory from the cells below; `--execute` also runs them and keeps the outputs.

    python notebooks/build.py            # write 01_traces.ipynb ... 04_validate.ipynb (cells only, no outputs)
    python notebooks/build.py --execute  # ... then execute each in notebooks/ and save it with its outputs

The committed notebooks are what `--execute` writes: the cells of this file plus their outputs
(tests/notebooks/test_notebooks.py checks that the cells match and executes every notebook).
Cell ids are fixed (`<notebook>-<index>`), so rebuilding changes only what changed.
"""
from __future__ import annotations

import argparse
import textwrap
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 600  # per cell; the default parameters need a small fraction of it

# Every notebook's first code cell after the parameters: figures inline as small PNGs, compact tables.
SETUP = """\
%matplotlib inline
%config InlineBackend.print_figure_kwargs = {"dpi": 80, "bbox_inches": "tight"}
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's notebook bar; no bars are shown here
pd.set_option("display.precision", 3)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 30)"""


def md(text: str) -> tuple[str, str, tuple[str, ...]]:
    """A markdown cell: (kind, source, tags)."""
    return "markdown", textwrap.dedent(text).strip(), ()


def code(text: str, tags: tuple[str, ...] = ()) -> tuple[str, str, tuple[str, ...]]:
    """A code cell: (kind, source, tags)."""
    return "code", textwrap.dedent(text).strip(), tags


def params(text: str):
    """The parameter cell (tagged `parameters`, as papermill expects)."""
    return code(text, ("parameters",))


# --- 01 --------------------------------------------------------------------------------------------
TRACES = [
    md("""
    # 01 · Traces: response lengths, the tail, and what a synchronous step wastes

    A trace is one row per generated response (`step, prompt_id, sample, prompt_len, response_len`).
    In this notebook you learn how to

    * load a shipped trace, and your own length logs (a verl-style JSONL and a Vidur request CSV),
    * read the length distribution step by step and the **tail share**: the part of a step spent
      waiting for its last 10% of responses,
    * measure what a synchronous RL step (verl) wastes on a modelled cluster: the idle share of GPU
      time, where in the step it falls, and how much a perfectly balanced step would save.

    The defaults run in well under a minute on 2 CPU cores; the parameter cell says what scales it up.
    """),
    params("""
    TRACE = "../traces/dapo_like.parquet"  # a shipped trace or your own file (.parquet, .csv, .jsonl)
    OTHER_TRACES = ["../traces/intern_s1_mixture.parquet", "../traces/lognormal_drift.parquet"]  # for the table
    GPUS, TP = 64, 4  # the simulated cluster: GPUS / TP rollout engines; try 128 or 256
    GPU, MODEL = "h100", "qwen2.5-7b"  # presets in tltsim/presets
    STEPS = "0:8"  # trace steps to simulate; "" = all 20 (about 2.5x the simulation time)
    SEED = 0  # seeds the made-up user logs of section 2
    """),
    code(SETUP),
    md("""
    ## 1. A shipped trace

    `load` reads the file and validates it; the metadata travels inside the Parquet file and says
    where the lengths come from.
    """),
    code("""
    from tltsim.trace import load, stats

    trace = load(TRACE)
    print(trace.meta.provenance)
    print(f"source {trace.meta.source}, cap {trace.meta.max_response_len}, group size {trace.meta.group_size}, "
          f"{len(trace.df):,} responses in {trace.df['step'].nunique()} steps")
    trace.df.head()
    """),
    md("""
    `stats` gives per-step and overall figures. `max_over_median` is how far the longest response
    sits from a typical one; `tail_share` is explained in section 3.
    """),
    code("""
    s = stats(trace)
    per_step = pd.DataFrame(s["per_step"]).set_index("step")
    per_step[["responses", "median", "p90", "p99", "max", "max_over_median", "tail_share", "truncated_fraction"]]
    """),
    code("""
    from tltsim import plots

    plots.length_distribution(trace, title=trace.meta.source)
    """),
    code("""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax = per_step[["median", "p90", "p99", "max"]].plot(logy=True, marker="o", ms=3, figsize=(8, 3.2))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set(title="Response length per step", xlabel="step", ylabel="tokens (log scale)")
    ax.legend(loc="center left", bbox_to_anchor=(1, 0.5));
    """),
    md("""
    ## 2. Your own lengths: a verl-style log and a Vidur CSV

    `load` recognises the length logs people already have by their content. A **verl-style JSONL**
    has one prompt per line (`step`, `input` = prompt length, `output` = the group's response
    lengths, optionally `dp_rank` = the engine that served it). A **Vidur request CSV** has
    `arrived_at, num_prefill_tokens, num_decode_tokens`; `requests_per_step` cuts it into steps.
    Here both are made up with a seeded generator and written to a temporary directory.
    """),
    code("""
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
                                    "output": lengths.tolist(), "n_sampling": 8}) + "\\n")
    print(open(work / "verl_lengths.jsonl").readline())

    vidur = pd.DataFrame({
        "arrived_at": np.cumsum(rng.exponential(0.05, size=256)),
        "num_prefill_tokens": rng.integers(50, 500, size=256),
        "num_decode_tokens": np.maximum(1, rng.pareto(1.5, size=256) * 200).round().astype(int),
    })
    vidur.to_csv(work / "vidur_requests.csv", index=False)
    vidur.head(3)
    """),
    code("""
    mine_verl = load(work / "verl_lengths.jsonl")
    mine_vidur = load(work / "vidur_requests.csv", requests_per_step=64)
    print(mine_verl.meta.provenance)
    print(mine_vidur.meta.provenance)
    mine_verl.df.head()
    """),
    md("""
    Every trace goes through the same statistics, so the made-up logs sit in one table with the
    shipped traces. The Vidur requests are groups of one; the verl log has groups of 8.
    """),
    code("""
    OVERALL = ["steps", "responses", "median", "p90", "p99", "max", "max_over_median", "tail_share",
               "truncated_fraction"]
    sources = {Path(TRACE).name: trace, **{Path(p).name: load(p) for p in OTHER_TRACES},
               "verl_lengths.jsonl (yours)": mine_verl, "vidur_requests.csv (yours)": mine_vidur}
    pd.DataFrame([{k: stats(t)[k] for k in OVERALL} for t in sources.values()], index=list(sources))
    """),
    md("""
    ## 3. The tail share

    Picture one decode slot per response, all starting together, one token per unit of time:
    a response of length L finishes at time L and the step ends with its longest response. By
    t90, 90% of the responses have finished; the **tail share** is (max − t90) / max, the part of
    the step spent on the last 10%. Below is the step with the longest response.
    """),
    code("""
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
    """),
    md("""
    ## 4. What a synchronous step wastes

    verl rolls out each step on every engine (prompt groups split in contiguous chunks), waits for
    the slowest engine, then computes rewards, trains and syncs weights on all GPUs. The simulator
    replays the trace over the cluster with a roofline cost model of the GPU and model presets.
    """),
    code("""
    from tltsim.config import ClusterConfig, SimConfig
    from tltsim.policies import make_policy
    from tltsim.sim.simulator import Simulator

    cfg = SimConfig(trace=TRACE, cluster=ClusterConfig(gpus=GPUS, tp=TP, gpu=GPU, model=MODEL), steps=STEPS)
    verl = Simulator(trace, cfg, make_policy("verl")).run()
    ideal = Simulator(trace, cfg, make_policy("ideal")).run()
    WASTE = ["makespan_s", "mean_step_s", "rollout_share", "idle_fraction", "idle_gpu_seconds", "tail_share"]
    pd.DataFrame({r.name: {k: r.summary[k] for k in WASTE} for r in (verl, ideal)})
    """),
    code("""
    print(f"verl: {verl.summary['idle_fraction']:.0%} of all GPU time is idle; "
          f"{verl.summary['rollout_share']:.0%} of the run is rollout, and {verl.summary['tail_share']:.0%} of "
          f"the rollout time comes after 90% of the responses are done.")
    print(f"A perfectly balanced rollout of the same tokens ('ideal', a lower bound for plain decoding) would "
          f"make the run {verl.summary['makespan_s'] / ideal.summary['makespan_s']:.2f}x faster.")
    """),
    md("""
    Per step: rollout time, the time after 90% of the responses have finished (`tail_s`) and the
    GPU-seconds that sat idle.
    """),
    code("""
    from tltsim.plots.steps import idle_by_step

    waste = verl.steps.set_index("step")[["rollout_s", "tail_s", "total_s"]]
    waste["idle_gpu_s"] = idle_by_step(verl)
    waste["idle_share_of_step"] = waste["idle_gpu_s"] / (GPUS * waste["total_s"])
    waste
    """),
    md("""
    Where it goes: the Gantt chart of the slowest step (one row per engine), then the running batch
    of every engine in that step, then the cluster's GPUs by state over the run.
    """),
    code("plots.gantt(verl)"),
    code("plots.batch_size(verl)"),
    code("plots.utilisation(verl)"),
    md("""
    The grey in these charts is what the other answers to the long tail go after: TLT turns it into
    drafter training and faster decoding, partial rollout and tail batching stop the step early,
    asynchronous RL overlaps steps. `02_compare_policies.ipynb` plays them against each other.
    """),
]



# --- 02 --------------------------------------------------------------------------------------------
COMPARE = [
    md("""
    # 02 · Comparing the answers to the long tail

    One trace, one cluster, every registered policy: TLT and its ablations, the other answers to
    the long tail, and their combinations with TLT. In this notebook you learn

    * how much each policy speeds up the run over verl, and what it pays for it in **off-policy
      cost**: samples trained on by a newer policy than the one that started them (staleness),
      samples continued across a weight update (resumed) or thrown away (dropped), and a changed
      mix of trained responses (`trained_len_ratio` ≠ 1),
    * what each one does with the idle tail of a step (Gantt charts),
    * how the ranking changes with the size of the cluster.

    | policy | what it does |
    |---|---|
    | `verl` | the baseline: synchronous steps, every engine waits for the slowest |
    | `tlt` | TLT: speculative decoding once an engine's batch is small, BEG tuner, drafter trained on idle workers |
    | `tlt-base` | TLT's switch with a model-free n-gram drafter, no training |
    | `static-sd` | TLT's switch with a drafter trained once; it goes stale as the policy moves |
    | `sd-always` | speculative decoding from the first token |
    | `tlt-dedicated` | one engine's GPUs reserved to train the drafter instead of the idle ones |
    | `ideal` | perfect load balance of the same tokens: a lower bound for plain synchronous decoding, not a policy one can run |
    | `partial` | over-provisioned partial rollout (APRIL, Kimi k1.5): launch 2x, stop when enough finish, resume the rest next step |
    | `tail-batching` | RollPacker: short rounds abort and park long prompts, a long round runs them later |
    | `longest-first` | length-aware scheduling: predicted-longest requests first, spread over engines |
    | `migrate` | RLHFuse: move the last requests onto two engines, release the others to the next stage |
    | `async` | bounded-staleness asynchronous RL (AReaL): rollout and training overlap on separate GPUs |
    | `A+tlt` | policy A with TLT's speculative decoding (for `migrate+tlt` the released engines train the drafter) |

    The same comparison from the shell: `tltsim compare --trace TRACE --gpus 64 --tp 4 -o out/cmp`.
    """),
    params("""
    from tltsim.policies import policy_names

    TRACE = "../traces/dapo_like.parquet"  # a shipped trace or your own file
    GPUS, TP = 64, 4  # the cluster of the main comparison (GPUS / TP rollout engines)
    GPU, MODEL = "h100", "qwen2.5-7b"  # presets in tltsim/presets
    STEPS = "0:6"  # trace steps of the main comparison; "" = all 20 (about 3x the time)
    POLICIES = policy_names()  # every registered policy; the first (verl) is the baseline
    FOCUS = ["verl", "tlt", "partial", "tail-batching", "async", "migrate+tlt"]  # drawn as Gantt charts
    ABLATIONS = ["verl", "tlt", "tlt-base", "static-sd", "sd-always", "tlt-dedicated"]  # TLT and its ablations
    GPU_COUNTS = [16, 32, 64, 128]  # cluster sizes of the ranking; add 256, 512 to scale up
    RANK_STEPS = "0:3"  # trace steps per run of the ranking; "0:10" for steadier ranks
    WORKERS = 2  # processes the ranking sweep runs on
    """),
    code(SETUP),
    md("## 1. Every policy on one trace and cluster"),
    code("""
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
    """),
    md("""
    The comparison table: speed on the left, off-policy cost on the right, sorted by speedup
    (end to end, baseline makespan / run makespan). `comparison_table` is the table of the HTML
    report (`tltsim.report`); `trained_len_ratio` is added from each run's summary.
    """),
    code("""
    from tltsim.report import comparison_table

    runs = list(results.values())
    table = comparison_table(runs).set_index("run")
    table["trained_len_ratio"] = [r.summary["trained_len_ratio"] for r in runs]
    SPEED = ["speedup", "makespan_s", "idle_fraction", "tail_share", "sd_share", "mean_accepted"]
    COST = ["staleness_mean", "staleness_max", "resumed_fraction", "dropped_fraction", "trained_len_ratio"]
    side_by_side = pd.concat({"speed": table[SPEED], "off-policy cost": table[COST]}, axis=1)
    side_by_side.sort_values(("speed", "speedup"), ascending=False)
    """),
    code("""
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
    """),
    md("""
    TLT's ablations, end to end and rollout alone: what the adaptive drafter, the spot trainer and
    the switch each contribute.
    """),
    code("""
    from tltsim import plots

    plots.speedup([results[p] for p in ABLATIONS])
    """),
    code("plots.step_breakdown([results[p] for p in FOCUS])"),
    md("""
    ## 2. What each policy does with the tail

    The baseline's slowest step, one panel per policy in `FOCUS` (same time axis). Idle grey on
    verl turns into speculative decoding and drafter training under TLT; partial rollout and tail
    batching stop the rollout when enough responses are done. `async` has no synchronous step: its
    rollout engines (top half) generate without pause while the trainer's GPUs (bottom half) train;
    its panel shows what the run records as that step, including rollout begun before it.
    """),
    code("plots.gantt([results[p] for p in FOCUS])"),
    code("plots.batch_size(results['tlt'])"),
    code("plots.drafter([results[p] for p in POLICIES if p in ('tlt', 'static-sd', 'tlt-base', 'sd-always')])"),
    md("""
    ## 3. How the ranking changes with cluster size

    More engines share the same step's responses, so each holds fewer and the tail takes a larger
    part of the step. A sweep (`tltsim.sweep`, the engine of `tltsim sweep FILE`) runs every policy
    at each size in `GPU_COUNTS` on `WORKERS` processes; speedup is over the baseline at the same size.
    """),
    code("""
    import json
    import tempfile
    from pathlib import Path

    from tltsim.sweep import load_spec, run_sweep

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
    """),
    code("""
    plots.sweep_heatmap(ranking, x="gpus", y="policy", metric="speedup")
    """),
    md("""
    ## Reading the numbers (default parameters)

    * The answers that cut the step short gain most: partial rollout 3.7x, partial+tlt 3.9x, async
      3.7x, tail batching 2.1x at 64 GPUs (6 steps). They pay in off-policy terms: partial rollout
      trains on samples 0.74 policy versions old on average and resumes 57% of them across a weight
      update, async trains 2.3 versions behind, tail batching throws away 17% of the responses it
      starts; all three change the mix of trained responses (`trained_len_ratio` 0.92-0.97).
    * TLT and its variants gain 1.4-1.7x at 64 GPUs with no off-policy cost (staleness 0, nothing
      resumed or dropped, the same responses). Combined with partial rollout or tail batching, the
      speculative decoding adds to their gain (3.7x -> 3.9x, 2.1x -> 2.7x).
    * Reordering alone (longest-first) and migrating the tail (migrate) gain at most 1.1x here.
    * Cluster size reorders the top: async is 6th at 16 GPUs and 1st at 128. Every answer gains
      more on a larger cluster except longest-first, which stays at 1.0x, and migrate, whose gain
      shrinks (1.10x -> 1.01x).
    """),
]



# --- 03 --------------------------------------------------------------------------------------------
TUNE = [
    md("""
    # 03 · Tuning TLT: which knobs matter

    TLT has a handful of knobs (`tltsim/policies/tlt.py`, `TLTKnobs`). In this notebook you sweep
    the ones a user sets, each around the defaults, on one trace and cluster:

    * the **SD threshold**: speculative decoding switches on once an engine's running batch is at
      or below it (default 32), at three cluster sizes,
    * the **arm set**: the `depth_topk_verify` draft-tree strategies the tuner picks from,
    * the **tuner**: BEG-MAB (TLT's), epsilon-greedy, UCB1, fixed (the first arm), and an oracle
      that knows the modelled reward,
    * the **drafter-training cadence**: spot-train the drafter during every k-th step's rollout,
    * **min idle workers**: how many workers must be idle before spot training starts,

    and read off what matters and what does not. Sweeps go through `tltsim.sweep` (the engine of
    `tltsim sweep FILE`): a TOML file per sweep, runs in parallel processes, a results table.
    """),
    params("""
    TRACE = "../traces/dapo_like.parquet"  # a shipped trace or your own file
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
    """),
    code(SETUP),
    md("""
    ## The sweeps

    `sweep(name, grid)` writes a sweep file (the base config below plus a `[grid]` of dotted config
    keys) and runs it; every table gets `speedup` = verl's makespan at the same cluster size / the
    run's makespan.
    """),
    code("""
    import json
    import tempfile
    import time
    from dataclasses import replace
    from pathlib import Path

    from tltsim import plots
    from tltsim.config import ClusterConfig, SimConfig
    from tltsim.policies import make_policy
    from tltsim.sim.simulator import Simulator
    from tltsim.sweep import load_spec, run_sweep
    from tltsim.trace import load

    trace = load(TRACE)
    cfg = SimConfig(trace=TRACE, cluster=ClusterConfig(gpus=GPUS, tp=TP), steps=STEPS)
    verl_makespan = {g: Simulator(trace, replace(cfg, cluster=replace(cfg.cluster, gpus=g)), make_policy("verl"))
                     .run().summary["makespan_s"] for g in sorted({GPUS, *THRESHOLD_GPUS})}

    scratch = tempfile.TemporaryDirectory(prefix="tltsim-nb03-")  # removed when the kernel exits
    work = Path(scratch.name)
    BASE = f\'\'\'[base]
    trace = "{TRACE}"
    policy = "tlt"
    steps = "{STEPS}"
    [base.cluster]
    gpus = {GPUS}
    tp = {TP}
    \'\'\'


    def sweep(name: str, grid: dict) -> pd.DataFrame:
        path = work / f"{name}.toml"
        path.write_text(BASE + "[grid]\\n" + "".join(f'"{k}" = {json.dumps(v)}\\n' for k, v in grid.items()))
        t0 = time.perf_counter()
        table = run_sweep(load_spec(path), work / name, workers=WORKERS, progress=False).table
        print(f"{name}: {len(table)} runs in {time.perf_counter() - t0:.1f} s")
        table["speedup"] = table["cluster.gpus"].map(verl_makespan) / table["makespan_s"]
        return table


    COLUMNS = ["speedup", "sd_share", "mean_accepted", "drafter_train_gpu_seconds", "idle_fraction"]
    """),
    md("## 1. The SD threshold"),
    code("""
    th = sweep("threshold", {"cluster.gpus": THRESHOLD_GPUS, "policy_knobs.threshold": THRESHOLDS})
    print((work / "threshold.toml").read_text())
    th.pivot(index="policy_knobs.threshold", columns="cluster.gpus", values=["speedup", "sd_share"])
    """),
    code("""
    fig = plots.sweep_lines(th, x="policy_knobs.threshold", metric="speedup", by=["cluster.gpus"])
    fig.axes[0].set_xscale("log", base=2)
    fig.axes[0].set_xticks(THRESHOLDS, [str(t) for t in THRESHOLDS])
    fig
    """),
    md("""
    Requests per engine set the scale: a step's 768 responses over `GPUS / TP` engines is 96 per
    engine at 32 GPUs, 48 at 64 and 24 at 128. A threshold at or above that number speculates from
    the first decode iteration (`sd_share` near 1).
    """),
    md("## 2. The arm set"),
    code("""
    arms = sweep("arms", {"policy_knobs.arms": list(ARM_SETS.values())})
    arms.insert(1, "arm set", list(ARM_SETS))
    arms.set_index("arm set")[COLUMNS]
    """),
    code('plots.sweep_bars(arms, ["arm set"], "speedup")'),
    md("## 3. The tuner"),
    code("""
    tuners = sweep("tuner", {"policy_knobs.tuner": TUNERS})
    tuners.set_index("policy_knobs.tuner")[COLUMNS]
    """),
    code('plots.sweep_bars(tuners, ["policy_knobs.tuner"], "speedup")'),
    md("## 4. Drafter-training cadence"),
    code("""
    cadence = sweep("cadence", {"policy_knobs.cadence": CADENCES})
    cadence.set_index("policy_knobs.cadence")[COLUMNS]
    """),
    code('plots.sweep_lines(cadence, x="policy_knobs.cadence", metric="speedup")'),
    md("## 5. Min idle workers before spot training"),
    code("""
    idle = sweep("min_idle", {"policy_knobs.min_idle": MIN_IDLE})
    idle.set_index("policy_knobs.min_idle")[COLUMNS]
    """),
    code('plots.sweep_lines(idle, x="policy_knobs.min_idle", metric="speedup")'),
    md("""
    ## What matters

    For each knob at the main cluster size: the lowest and highest speedup over its values, the
    spread between them, and the best value.
    """),
    code("""
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
    """),
    md("""
    ## Conclusion (default parameters: 64 H100s, TP 4, steps 0:6 of the DAPO-like trace)

    The table above orders the knobs by how far they move the speedup. What drives each spread:

    1. **The SD threshold** (0.24x), most: from 1.48x at 4 to 1.72x at 64 at 64 GPUs. Speculating
       sooner paid at every batch size these engines reach: the best threshold was one at or above
       the number of requests an engine holds, so that SD runs from the first iterations (48
       requests per engine at 64 GPUs; at 128 GPUs, 24 per engine, speedup is flat from 32 on; at 32
       GPUs, 96 per engine, it still climbs at 128). TLT's default of 32 leaves 0.06x at 64 GPUs and
       nothing at 128.
    2. **The arm set** (0.20x), through its worst choice: deep trees (12_8_64..12_8_16) accept the
       most tokens per verify (7.16) yet are slowest (1.47x), since every verify costs more. The
       default set, 8_4_48 alone and the shallow 4_2_8 / 4_1_4 lie within 1.64-1.67x; a single small
       tree (8_4_16, 8_4_8) loses 0.06-0.10x against the default.
    3. **Min idle workers** (0.07x), only at its extreme: from 1 to 8 the speedup does not move
       (1.661x) and drafter training shrinks by 4%. At 16 every engine would have to be idle at once,
       which never happens while the slowest still rolls out: the drafter never trains and TLT falls
       to static-sd's 1.589x (notebook 02).
    4. **The tuner** (0.06x): BEG-MAB is within 0.01x of the oracle (1.661x vs 1.670x);
       epsilon-greedy and fixed lose 0.02-0.03x, UCB1 0.05x.
    5. **Drafter-training cadence** (0.04x): training during every step's rollout is best; every
       4th step costs 0.04x in six steps (accepted length 6.46 -> 6.23 as the drafter goes staler,
       and 26% of GPU time idle instead of none).

    So, on this trace and cluster: set the threshold high enough and keep TLT's arm set (or 8_4_48,
    or the shallow one) rather than deep trees; within sensible values min idle workers, the tuner
    and the cadence move the speedup by 0.05x or less. These are simulator
    results; change the parameter cell to see whether they hold for your trace and cluster.
    """),
]



# --- 04 --------------------------------------------------------------------------------------------
VALIDATE = [
    md("""
    # 04 · Is the simulator right? A real run next to its prediction

    `tltsim real run` runs a policy for real (worker processes, adaptive engines driven by the same
    policy objects the simulator uses, a spot-trained drafter, GRPO updates) and records it in the
    simulator's schema, with its trace. `tltsim validate` replays that trace in the simulator, one
    engine per real worker, with a cost model fitted to a profile of the same machine
    (`tltsim real profile`) and the drafter quality the run measured, and compares. In this
    notebook you learn

    * how well the fitted cost model matches the profiled step times,
    * the error table: per step and overall, for rollout and step time, idle fraction, SD share,
      drafter training and accepted length, and the speedup of TLT over verl, measured and predicted,
    * where predicted and measured timelines differ (per-step plots, Gantt charts of both).

    By default it reads the recorded CPU runs under `traces/`; without them (or with
    `RUN_NOW = True`) it makes a tiny real run on this machine first, which takes a few minutes.
    """),
    params("""
    RUNS = ["../traces/real_verl_cpu", "../traces/real_tlt_cpu"]  # `tltsim real run` directories, baseline first
    PROFILE = "../traces/real_cpu_profile.csv"  # `tltsim real profile` of the machine the runs ran on
    RUN_NOW = "auto"  # "auto": a tiny real run below only if RUNS or PROFILE are missing; True: always; False: never
    TINY_MODEL = "test-llama"  # target of a tiny run: a preset (random weights) or a `tltsim real pretrain` directory
    TINY_STEPS = 2  # RL steps per tiny run; raise it (and prompts, max_new_tokens below) for a run worth validating
    """),
    code(SETUP),
    md("## 1. The runs"),
    code("""
    from pathlib import Path

    recorded = all((Path(d) / "summary.json").is_file() for d in RUNS) and Path(PROFILE).is_file()
    RUN_NOW = not recorded if RUN_NOW == "auto" else RUN_NOW
    if not RUN_NOW and not recorded:
        raise FileNotFoundError(f"no recorded runs at {RUNS} with {PROFILE}; set RUN_NOW = True or point RUNS there")
    print("making a tiny real run on this machine" if RUN_NOW else f"using the recorded runs {RUNS}")
    """),
    code("""
    if RUN_NOW:
        import os
        import tempfile
        from dataclasses import replace

        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # the workers save checkpoints quietly
        import torch
        from real.models import load_target
        from real.profile import profile
        from real.run import RunConfig, launch

        scratch = tempfile.TemporaryDirectory(prefix="tltsim-nb04-")  # removed when the kernel exits
        work = Path(scratch.name)
        torch.set_num_threads(2)
        # the profile the cost model is fitted to: a small grid, the strategies the tlt run uses
        profile(load_target(TINY_MODEL), batches=[1, 4], contexts=[16], strategies=["4_2_8", "4_1_4"], repeats=2,
                train_rows=(4, 16)).to_csv(work / "profile.csv", index=False)
        tiny = RunConfig(workers=2, steps=TINY_STEPS, model=TINY_MODEL, prompts=4, group=2, max_new_tokens=48,
                         warmup_steps=10, warmup_prompts=8, probe=2)
        launch(replace(tiny, policy="verl"), work / "verl")
        launch(replace(tiny, policy="tlt", knobs={"threshold": 4, "patience": 2, "arms": "4_2_8,4_1_4"}), work / "tlt")
        RUNS, PROFILE = [str(work / "verl"), str(work / "tlt")], str(work / "profile.csv")
    """),
    code("""
    import json

    from tltsim.records import Result

    measured = {Path(d).name: Result.load(d) for d in RUNS}
    CONFIG = ["policy", "workers", "steps", "model", "prompts", "group", "max_new_tokens", "knobs"]
    pd.DataFrame({name: {k: json.dumps(r.config.get(k)) if isinstance(r.config.get(k), dict) else r.config.get(k)
                         for k in CONFIG} for name, r in measured.items()})
    """),
    code("""
    SUMMARY = ["steps", "makespan_s", "rollout_share", "idle_fraction", "sd_share", "mean_accepted",
               "drafter_train_gpu_seconds", "mean_reward"]
    pd.DataFrame({name: {k: r.summary.get(k) for k in SUMMARY} for name, r in measured.items()})
    """),
    md("""
    ## 2. The fitted cost model

    `Profiled.fit` fits step times linear in what an iteration processes (query tokens, context,
    draft tree) to the profile. Each point is one timed iteration; on the diagonal the model is exact.
    """),
    code("""
    from tltsim.cost.profiled import Profiled, read_profile

    prof = read_profile(PROFILE)
    cost = Profiled.fit(prof)
    res = cost.residuals(prof)
    res["error"] = res["predicted_s"] / res["measured_s"] - 1
    print(f"{len(prof)} timings; coefficients: " + ", ".join(f"{k} {v:.3g}" for k, v in cost.c.items()))
    res.groupby("kind")["error"].describe(percentiles=[0.5])[["count", "mean", "50%", "min", "max"]]
    """),
    code("""
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for (kind, g), color in zip(res.groupby("kind"), ["#2c7bb6", "#7b3294", "#1a9641", "#d7191c"]):
        ax.scatter(g["measured_s"] * 1e3, g["predicted_s"] * 1e3, s=14, color=color, label=kind, alpha=0.8)
    lim = [res[["measured_s", "predicted_s"]].min().min() * 1e3 * 0.8, res[["measured_s", "predicted_s"]].max().max() * 1e3 * 1.2]
    ax.plot(lim, lim, "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlim=lim, ylim=lim, xlabel="measured (ms)", ylabel="predicted (ms)",
           title="Profiled iterations: fitted vs measured")
    ax.legend();
    """),
    md("""
    ## 3. The error table

    Errors are relative (predicted / measured − 1), except for fractions (idle, SD share), which
    are differences in absolute points.
    """),
    code("""
    from tltsim.validate import validate

    v = validate(RUNS, PROFILE)
    v.overall
    """),
    code("""
    pd.Series(v.speedup, name="speedup of the second run over the first")
    """),
    md("""
    ### The machine's speed

    A profile is measured at one minute and the runs at others; a shared machine's speed drifts by
    tens of percent between minutes. Every run times a fixed plain decode iteration of its target
    before each step (`speed_probe_s` in its steps table); `validate(..., speed=True)` (`tltsim
    validate --speed`) scales the profile's times, step by step, by that probe over the fitted
    model's time for the same iteration (the median of the 5 steps around each, so a momentary
    spike does not count). Below: the speed factor per step, and the headline errors both ways.
    """),
    code("""
    from tltsim.validate import speed_factors

    probed = all("speed_probe_s" in r.steps for r in measured.values())
    if not probed:
        print("these runs predate the speed probe (steps column speed_probe_s): nothing to scale by")
    # how much slower than the profile the machine ran each step (1: as fast)
    pd.DataFrame({name: speed_factors(r, cost) for name, r in measured.items()} if probed else {}).rename_axis("step")
    """),
    code("""
    rows = {}
    scaled = validate(RUNS, PROFILE, speed=True) if probed else None
    for label, val in (("profile as measured", v), ("x speed probe", scaled)):
        if val is not None:
            per = val.overall.set_index(["run", "metric"])["error"]
            rows[label] = {**{f"per-step rollout |error|, {run}": per[(run, "median |error| of per-step rollout")]
                              for run in val.overall["run"].unique()}, "speedup error": val.speedup["error"]}
    pd.DataFrame(rows)
    """),
    code("""
    per_step = v.per_step.pivot_table(index=["run", "step"], columns="metric", values=["measured", "predicted"],
                              dropna=False)
    per_step.swaplevel(axis=1).sort_index(axis=1)[["rollout_s", "total_s", "idle_fraction", "sd_share", "mean_accepted"]]
    """),
    md("## 4. Predicted vs measured, step by step"),
    code("""
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
    """),
    md("""
    ## 5. Measured and predicted timelines

    For each run, the slowest measured step: the real workers on top, the simulator's replay below
    (one engine per worker, same time axis).
    """),
    code("""
    from dataclasses import replace

    from tltsim import plots


    def labelled(result, label):
        return replace(result, summary={**result.summary, "policy": label})


    pairs = list(zip(measured.items(), v.predicted.values()))
    for (name, m), p in pairs:
        display(plots.gantt([labelled(m, f"{name}: measured"), labelled(p, f"{name}: predicted")]))
    """),
    code("""
    if RUN_NOW:
        scratch.cleanup()  # the tiny runs were for this session only
    """),
    md("""
    ## Reading the numbers (the recorded CPU runs, 5 steps each)

    * The fitted cost model matches the profiled iterations of this CPU closely: median error -3.5%
      on plain decode rows, +0.9% on speculative ones, +0.1% on prefills and -1.4% on the drafter's
      catch-ups (section 2). The profile times iterations through the rollout loop with one thread,
      in two processes that start each measurement together (`--processes 2`), as a run's two
      workers share the machine, and samples tokens as the runs do.
    * Replayed with it, the simulator predicts the runs: rollout +14.2% (verl) and +5.1% (tlt),
      median per-step rollout error 8.4% and 3.0%, SD share 7.1% against 8.3% measured, idle
      fractions within 2 points, drafter training +1.7% (the replay lets each spot trainer finish its
      batch in progress at the barrier and charges it no load time, as the real trainer does).
    * The training phases follow the run's GRPO: each worker updates on its own responses in
      padded, length-sorted micro-batches and waits at the gradient all-reduce for the slowest,
      so the replay (`rl.balance_train = false`, `rl.micro_batch_tokens`) charges the slowest
      worker's padded tokens: reward stage -1.2% / -5.4%, update +3.3% / +4.1%, makespan +8.9% /
      +6.0%. Not modelled: the tlt run's weight sync (averaging the spot-trained drafters and sharing
      the step's samples, 0.04 s over 5 steps).
    * The speedup check: on this CPU tlt ran at 0.85x of verl's speed (speculating made 0.25-0.57x of
      plain decoding's tokens per second at every batch size, so the guard tried each size, decoded
      plainly otherwise, and tried again when its refusals expired); the simulator predicts 0.88x
      (+2.8%).
    * The machine ran these runs 5-13% faster than the profile says (the speed factors); scaled by
      them, the per-step errors are 2.5% (verl) and 6.1% (tlt), the speedup +3.7%.
    * These are one pair of short runs on a shared VM whose speed drifts by 10-40% from minute to
      minute (and whose two cores differ). The 10-step runs of `benchmarks/bench_validate.py`, 9
      recordings on 2026-11-30: median per-step rollout error 2-35% (verl) and 5-30% (tlt) with the
      profile as measured, speedup error within 15% in 16 of 18 pairs; with `--speed`, per-step
      errors under 10% in 23 of 36 runs and the speedup within 15% in 17 of 18 pairs
      (benchmarks/results/NOTES.md).

    So on this machine the simulator predicts the rollout, where the policies differ, the training
    phases and the comparison, to within the machine's own run-to-run variation.
    """),
]


# --- building ----------------------------------------------------------------------------------------
NOTEBOOKS = {
    "01_traces": TRACES,
    "02_compare_policies": COMPARE,
    "03_tune_tlt": TUNE,
    "04_validate": VALIDATE,
}


def notebook(name: str) -> nbformat.NotebookNode:
    """The notebook `name` from its cells, without outputs."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
        "language_info": {"name": "python"},
    }
    for i, (kind, source, tags) in enumerate(NOTEBOOKS[name]):
        cell = nbformat.v4.new_markdown_cell(source) if kind == "markdown" else nbformat.v4.new_code_cell(source)
        cell.id = f"{name}-{i}"
        if tags:
            cell.metadata["tags"] = list(tags)
        nb.cells.append(cell)
    return nb


def execute(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Run every cell in a fresh kernel with notebooks/ as the working directory; raises on a cell error."""
    NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(HERE)}}).execute()
    return nb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--execute", action="store_true", help="execute each notebook and save it with its outputs")
    ap.add_argument("names", nargs="*", help=f"notebooks to build (default all: {', '.join(NOTEBOOKS)})")
    args = ap.parse_args()
    for name in args.names or NOTEBOOKS:
        nb = notebook(name)
        if args.execute:
            t0 = time.perf_counter()
            execute(nb)
            print(f"{name}: executed in {time.perf_counter() - t0:.0f} s")
        nbformat.write(nb, HERE / f"{name}.ipynb")


if __name__ == "__main__":
    main()
