"""The problems a run poses, and the prompt behind each recorded answer. A run records no prompt text: its
answers' (step, prompt_id) find the problem again from the run's seed.

    step_problems(task, seed, step, prompts)   the `prompts` problems of step `step` (verl's, longest-first's)
    stream_problem(task, seed, prompts, k)     problem k of the prompt stream (a partial run's group k)
    recorded_prompts(run, task, answers)       each recorded answer's prompt token ids
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tltsim.control.groups import streamed


def mixed_seed(*parts: int) -> int:
    """A 63-bit seed mixed from integers."""
    return int(np.random.SeedSequence(list(parts)).generate_state(2, np.uint64)[0] >> np.uint64(1))


def step_problems(task, seed: int, step: int, prompts: int, repeat: bool = False) -> list:
    """The `prompts` problems a run with `seed` poses at `step` (`repeat`: step 0's, at every step). A run records no
    prompt text, but its answers' `prompt_id` (answers.parquet, trace.parquet) indexes this list, so a recorded
    answer's prompt is `task.prompt_ids(step_problems(task, config["seed"], step, config["prompts"],
    config.get("repeat_prompts", False))[prompt_id])`."""
    return task.sample(np.random.default_rng(mixed_seed(seed, 0 if repeat else step)), prompts)


def stream_problem(task, seed: int, prompts: int, k: int, repeat: bool = False):
    """Problem k of a run's prompt stream: the run's steps' problems one after another, as a data loader serves them
    (problem k % prompts of step k // prompts's), which partial and tail-batching draw their groups from
    (real/run/stream.py)."""
    return step_problems(task, seed, k // prompts, prompts, repeat)[k % prompts]


def recorded_prompts(run: str | Path, task, answers) -> list[list[int]]:
    """The prompt token ids each row of a run's `answers` (answers.parquet's rows: step, prompt_id) was answering.
    A run of a policy that draws from the prompt stream (partial, tail-batching) numbers its groups by it
    (`stream_problem`)."""
    config = json.loads((Path(run) / "config.json").read_text())
    seed, prompts, repeat = config["seed"], config["prompts"], config.get("repeat_prompts", False)
    drawn = streamed(config["policy"])
    problems = {int(step): step_problems(task, seed, int(step), prompts, repeat) for step in answers["step"].unique()}
    return [task.prompt_ids(stream_problem(task, seed, prompts, p, repeat) if drawn else problems[a][p])
            for a, p in zip(answers["step"].astype(int), answers["prompt_id"].astype(int))]
