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
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Bring your own verl run: what would each policy save on *your* cluster?
#
# A verl run leaves three files behind, and they are all this notebook needs:
#
# * the **rollout dump** (`trainer.rollout_data_dir=DIR`): `DIR/{step}.jsonl`, one line per sample
#   with the prompt and response *texts* and the score,
# * the **metrics** of the file logger (`trainer.logger=[console,file]`, path in `VERL_FILE_LOGGER_PATH`):
#   one JSON line per step with verl's timers (`timing_s/gen`, `timing_s/reward`, `timing_s/old_log_prob`,
#   `timing_s/update_actor`, `timing_s/update_weights`, `timing_s/step`), `response_length/mean`, ...,
# * the **config** Hydra kept (`<output folder>/.hydra/config.yaml`): GPUs, TP, memory utilisation,
#   `max_num_seqs`, `n`, `response_length`.
#
# In this notebook you learn how to
#
# * turn the dump into a trace (token counts from the run's own tokenizer, groups, rewards),
# * set the simulated cluster from the config,
# * **calibrate** the simulator to the cluster the run measured, phase by phase from verl's own timers:
#   a factor per phase, a fixed cost a step beside the rollout's factor where the steps determine it, the
#   reward's seconds, and the per-step error before and after,
# * predict every policy on the calibrated cluster (what each would save per step), and on other
#   cluster sizes.
#
# It runs on the small example run of `examples/verl/` (a few steps; `examples/verl/README.md` says how it
# was made); point the parameters at your own run's files. It takes well under a minute.

# %% tags=["parameters"]
from pathlib import Path

ROOT = Path.cwd() if (Path.cwd() / "examples" / "verl").is_dir() else Path.cwd().parent  # repo root or notebooks/
EXAMPLE = ROOT / "examples" / "verl"
DUMP = EXAMPLE / "rollout"  # your trainer.rollout_data_dir
TOKENIZER = EXAMPLE / "tokenizer"  # your run's model directory (its tokenizer counts the tokens)
METRICS = EXAMPLE / "metrics.jsonl"  # your VERL_FILE_LOGGER_PATH file (or a wandb CSV export)
CONFIG = EXAMPLE / "run"  # your run's output folder (holding .hydra/config.yaml)
GPU = "h100"  # a verl config does not name the GPU: tltsim/presets/gpus
POLICIES = ["verl", "tlt", "tlt-base", "partial", "tail-batching"]  # the first is the baseline
CLUSTER_SIZES = [4, 8, 16]  # GPUs for the what-if: the same calibrated GPU, more or fewer of them (at most
# TP x prompts per step, or some engines get no prompt group)
SPEC_RUN = None  # a run that speculated (its folder with .hydra/config.yaml) and its metrics file, as a pair
# (CONFIG, METRICS) of Paths; None: section 6 writes one as verl would, the example run with MTP rollout on
DRIFT = 0.02  # section 6's made-up run: accepted length (tokens per verify) its frozen MTP heads lose each RL step

# %%
# %matplotlib inline
import json
import warnings
from dataclasses import replace

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm in a notebook without widgets, on import

import matplotlib.pyplot as plt
import pandas as pd

from tltsim import config as configmod
from tltsim.analysis.calibration import apply, calibrate
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import stats
from tltsim.trace.tokens import token_counter
from tltsim.trace.verl import read_rollout_dump
from tltsim.verl_config import read_verl_config
from tltsim.verl_metrics import read_metrics

pd.set_option("display.precision", 3)
pd.set_option("display.width", 160)

# %% [markdown]
# ## 1. The three files, as verl writes them
#
# One line of the dump (texts shortened), one line of the metrics, and the config keys the simulator reads.

# %%
first = json.loads(sorted(DUMP.glob("*.jsonl"), key=lambda p: int(p.stem))[0].read_text().splitlines()[0])
print({k: (v[:60] + "..." if isinstance(v, str) and len(v) > 60 else v) for k, v in first.items()})
metric_lines = [json.loads(x) for x in METRICS.read_text().splitlines() if x.strip()]
print(next(x for x in metric_lines if "timing_s/gen" in x["data"]))
verl = read_verl_config(CONFIG)
print({k: v for k, v in vars(verl).items() if k != "path"})

# %% [markdown]
# ## 2. The dump as a trace
#
# The dump keeps texts, so the run's tokenizer counts them. verl's `balance_batch` (on by default)
# shuffles a batch across data-parallel ranks before dumping it, so a prompt's samples are the lines
# of a step with the same input text. The dump's counts leave out the EOS token that verl's
# `response_length` metrics count: the two should differ by about one token a response.

# %%
trace = read_rollout_dump(DUMP, token_counter(str(TOKENIZER)), tokenizer=str(TOKENIZER))
metrics = read_metrics(METRICS)
st = pd.DataFrame(stats(trace)["per_step"]).set_index("step")[["responses", "mean", "median", "p90", "max", "tail_share"]]
st["verl response_length/mean"] = metrics["len_mean"]
print(f"{len(trace.df)} responses in {len(trace.steps)} steps, groups of {trace.meta.group_size}; "
      f"verl's mean length minus the dump's: {(st['verl response_length/mean'] - st['mean']).mean():.2f} tokens")
st

# %% [markdown]
# ## 3. The cluster from the config, and the calibration
#
# The config gives GPUs, TP, the engine's memory share and `max_num_seqs`; the GPU type comes from
# the parameter. The simulator replays the trace under the verl baseline on that cluster, and each
# step's predicted phases go beside verl's timers for them. Each phase's factor is the median of measured
# over predicted, so a step slowed by a checkpoint save does not move it. Beside the rollout's factor a fixed
# cost a step (replica wake-up and sleep, agent-loop bookkeeping, a reward the agent loop scores) is fitted
# where the steps determine it: at least 6 steps whose rollouts differ enough (the fit says which it made).

# %%
cfg = configmod.override(configmod.SimConfig(), **verl.overrides(), **{"cluster.gpu": GPU})
trace, notes = verl.check_trace(trace)
cal = calibrate(trace, cfg, metrics)
for note in verl.notes() + notes + cal.notes:
    print("note:", note)
c = cfg.cluster
print(f"cluster: {c.gpus} x {c.gpu}, TP {c.tp} ({c.gpus // c.tp} engines), {c.model}, max_running {c.max_running}, "
      f"memory share {cfg.cost.mem_fraction}")
print(f"rollout: {cal.rollout_fit}; the cluster ran it {cal.phases.rollout:.2f}x as long as the model says")
print(f"median per-step rollout error {cal.error_before:.1%} as modelled, {cal.error_after:.1%} calibrated "
      f"(whole step: {cal.step_error_before:.1%} -> {cal.step_error_after:.1%})")
cal.phase_table()

# %%
cal.per_step[["step", "measured_gen_s", "predicted_gen_s", "calibrated_gen_s", "gen_error_before", "gen_error_after",
              "measured_step_s", "calibrated_step_s", "fitted"]]

# %%
fig, ax = plt.subplots(1, 2, figsize=(10, 3.2))
d = cal.per_step
for col, style in (("measured_gen_s", "ko-"), ("predicted_gen_s", "C0s--"), ("calibrated_gen_s", "C1^-")):
    ax[0].plot(d.step, d[col], style, label=col.replace("_gen_s", ""))
ax[0].set(xlabel="step", ylabel="rollout seconds (timing_s/gen)", title="rollout time per step")
ax[0].legend()
for col, style in (("measured_step_s", "ko-"), ("predicted_step_s", "C0s--"), ("calibrated_step_s", "C1^-")):
    ax[1].plot(d.step, d[col], style, label=col.replace("_step_s", ""))
ax[1].set(xlabel="step", ylabel="step seconds (timing_s/step)", title="whole step per step")
ax[1].legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. Every policy on the calibrated cluster
#
# The calibrated cluster is the model's cluster with each phase's times multiplied by its factor and the
# fixed costs and the reward's seconds added (`SimConfig.calibration` and `rl.reward_s`, what
# `tltsim compare --calibration cal.json` sets: `apply` is what the CLI calls). Each policy replays the same
# trace on it, ranked by `saved_per_step_s`, the mean step time it saves over the baseline. The baseline's
# calibrated step is the one the calibration reported, step for step.

# %%
calibrated = apply(cal.to_json(), cfg)


def compare(cfg_, trace_, policies):
    rows = []
    for name in policies:
        s = Simulator(trace_, replace(cfg_, policy=name), make_policy(name, {})).run().summary
        rows.append({"policy": name, "mean_step_s": s["mean_step_s"], "mean_rollout_s": s["mean_rollout_s"],
                     "idle_fraction": s["idle_fraction"], "staleness_mean": s["staleness_mean"]})
    table = pd.DataFrame(rows).set_index("policy")
    table["saved_per_step_s"] = table.loc[policies[0], "mean_step_s"] - table["mean_step_s"]
    table["saved_share"] = table["saved_per_step_s"] / table.loc[policies[0], "mean_step_s"]
    return table


table = compare(calibrated, trace, POLICIES)
print(f"{POLICIES[0]}'s mean step: {table.loc[POLICIES[0], 'mean_step_s']:.3f} s simulated on the calibrated cluster, "
      f"{cal.per_step.loc[cal.per_step.fitted, 'calibrated_step_s'].mean():.3f} s calibrated by the fit")
table = pd.concat([table.iloc[:1], table.iloc[1:].sort_values("saved_per_step_s", ascending=False)])
best = table.drop(POLICIES[0])["saved_per_step_s"].idxmax()
print(f"on this cluster a {POLICIES[0]} step takes {table.loc[POLICIES[0], 'mean_step_s']:.2f} s; {best} saves the most: "
      f"{table.loc[best, 'saved_per_step_s']:.2f} s a step ({table.loc[best, 'saved_share']:.0%}), "
      f"tlt {table.loc['tlt', 'saved_per_step_s']:.2f} s ({table.loc['tlt', 'saved_share']:.0%}) "
      f"with no staleness (mean {table.loc['tlt', 'staleness_mean']:.2f})")
table

# %%
ax = table.drop(POLICIES[0])["saved_per_step_s"].plot.barh(figsize=(6, 2.6), color="C1")
ax.set(xlabel=f"seconds saved per step over {POLICIES[0]} (calibrated)", ylabel="")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 5. The same run on other cluster sizes
#
# The trace records what the model generated, not where; the simulator splits each step's responses
# over however many engines the cluster has (contiguous chunks of prompt groups, as verl does), so the
# run can be replayed on a cluster of another size with the calibrated GPU.

# %%
sizes = []
for gpus in CLUSTER_SIZES:
    t = compare(configmod.override(calibrated, **{"cluster.gpus": gpus}), trace, [POLICIES[0], "tlt"])
    sizes.append({"gpus": gpus, f"{POLICIES[0]}_step_s": t.loc[POLICIES[0], "mean_step_s"],
                  "tlt_step_s": t.loc["tlt", "mean_step_s"], "tlt_saved_per_step_s": t.loc["tlt", "saved_per_step_s"],
                  "tlt_saved_share": t.loc["tlt", "saved_share"]})
sizes = pd.DataFrame(sizes).set_index("gpus")
lo, hi = sizes["tlt_saved_share"].idxmin(), sizes["tlt_saved_share"].idxmax()
print(f"tlt saves {sizes.loc[lo, 'tlt_saved_share']:.0%} of a step at {lo} GPUs and {sizes.loc[hi, 'tlt_saved_share']:.0%} "
      f"at {hi} GPUs")
sizes

# %% [markdown]
# ## 6. A run that speculates: its drafter's drift, and is co-training worth it?
#
# verl can speculate in rollout itself, drafting with the model's MTP heads
# (`actor_rollout_ref.model.mtp.enable_rollout`; `enable_train` co-trains them in the actor update), and then logs
# each step's accepted length, `rollout/spec_accept_length` (`compute_spec_decode_metrics`). How fast that falls
# over the steps, for a drafter that is not retrained, is the drift that decides between freezing the drafter,
# co-training it, spot-training it on idle GPUs (TLT) and drafting from history. Without `SPEC_RUN` this section
# writes what such a run writes: the example's config with MTP rollout on, its metrics with a frozen drafter losing
# `DRIFT` tokens per verify a step (made up, in a temporary folder).

# %%
import tempfile

import yaml
from IPython.display import Markdown

from tltsim.analysis.calibration import drafter_overrides
from tltsim.analysis.drafter.calibrate import calibrate_drafter
from tltsim.analysis.drafter.drift_sensitivity import answer, drift_sensitivity
from tltsim.verl_config import read_speculation

if SPEC_RUN is None:
    made = Path(tempfile.mkdtemp())
    conf = yaml.safe_load((CONFIG / ".hydra" / "config.yaml").read_text())
    conf["actor_rollout_ref"]["model"]["mtp"] = {"enable": True, "enable_rollout": True, "num_speculative_tokens": 3}
    (made / "run" / ".hydra").mkdir(parents=True)
    (made / "run" / ".hydra" / "config.yaml").write_text(yaml.safe_dump(conf))
    lines = []
    for line in METRICS.read_text().splitlines():
        rec = json.loads(line)
        if "timing_s/gen" in rec["data"]:  # a training step: the accepted length its frozen heads reached
            rec["data"]["rollout/spec_accept_length"] = round(3.2 - DRIFT * (rec["step"] - 1), 4)
        lines.append(json.dumps(rec))
    (made / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    SPEC_RUN = (made / "run", made / "metrics.jsonl")
spec = read_speculation(SPEC_RUN[0])
fit = calibrate_drafter(spec, read_metrics(SPEC_RUN[1]))
print(f"drafter: {fit.method} ({spec.engine}, draft tree {fit.strategy}), training {fit.training}; {fit.fit}")
print(f"drift_per_step: {fit.drift_per_step:.4f} tokens per verify lost per RL step")
fit.per_step

# %% [markdown]
# The ways to get a drafter side by side (`compare --json`'s `drift_sensitivity`, the report's section "Is
# co-training worth it for this run?"): each simulated on the calibrated cluster, over the drifts of the public
# evidence and the run's own (`fitted`).

# %%
from tltsim.analysis.report.plots.drift import drift_sensitivity as drift_plot
from tltsim.control import Strategy

with_drafter = configmod.override(calibrated, **drafter_overrides(fit.to_json()))
rows = drift_sensitivity(trace, with_drafter, Strategy.parse(fit.strategy), fit.drift_per_step)
drift_plot(rows)

# %%
Markdown(" ".join(answer(rows)))

# %%
pd.DataFrame(rows).pivot_table(index="way", columns="drift", values="saved_per_step_s", sort=False)

# %% [markdown]
# ## The same from the command line
#
# ```bash
# tltsim trace convert examples/verl/rollout out/run.parquet --tokenizer examples/verl/tokenizer
# tltsim calibrate --verl-metrics examples/verl/metrics.jsonl --trace out/run.parquet \
#     --verl-config examples/verl/run --gpu h100 --save-calibration out/cal.json
# tltsim compare --trace out/run.parquet --verl-config examples/verl/run --gpu h100 \
#     --calibration out/cal.json --policies verl,tlt,tlt-base,partial,tail-batching -o out/my_cluster
# tltsim compare --trace out/run.parquet --verl-config examples/verl/run --gpu h100 --gpus 32 \
#     --calibration out/cal.json --policies verl,tlt -o out/my_cluster_x4
# ```
