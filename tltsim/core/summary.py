"""The summary of a run from its timeline and steps: one definition for the simulator and `real/`.

Every worker is accounted for from the first step's start to the last step's end, so
busy + idle = gpu_seconds = gpus x makespan (each timeline worker stands for `gpus_per_worker`
GPUs, a TP group). Needs the steps columns rollout_s, reward_s, train_s, sync_s, tail_s,
response_tokens and sd_share; mean_accepted is summarised when present. `rollout_overlap` says
how far a run's rollout ran beside its training; above OVERLAPS its rollout_s is not comparable
with a synchronous run's.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tltsim.core.records import IDLE_STATES

GENERATION = ("prefill", "decode", "spec_decode")  # the timeline states that generate tokens
TRAINING = ("reward", "train")  # the trainer's stages (reward and log-prob forwards, the update)
OVERLAPS = 0.5  # a rollout_overlap above this: rollout_s is only the wait for responses, not a rollout time


def summarize(timeline: pd.DataFrame, steps: pd.DataFrame, makespan: float, gpus: int,
              gpus_per_worker: int = 1) -> dict:
    """The run-level figures (seconds, shares, tokens per second) of a Result's summary."""
    dur = timeline["t_end"] - timeline["t_start"]
    idle_rows = timeline["state"].isin(IDLE_STATES)
    idle = float(dur[idle_rows].sum()) * gpus_per_worker
    gpu_s = makespan * gpus
    rollout = float(steps["rollout_s"].sum())
    out = {
        "steps": len(steps),
        "makespan_s": makespan,
        "mean_step_s": makespan / max(len(steps), 1),
        "rollout_s": rollout,
        "mean_rollout_s": rollout / max(len(steps), 1),
        "reward_s": float(steps["reward_s"].sum()),
        "train_s": float(steps["train_s"].sum()),
        "sync_s": float(steps["sync_s"].sum()),
        "rollout_share": rollout / makespan if makespan else 0.0,
        "gpu_seconds": gpu_s,
        "idle_gpu_seconds": idle,
        "idle_fraction": idle / gpu_s if gpu_s else 0.0,
        "busy_gpu_seconds": float(dur[~idle_rows].sum()) * gpus_per_worker,
        "tail_share": float(steps["tail_s"].sum()) / rollout if rollout else 0.0,
        "tokens_per_s": float(steps["response_tokens"].sum()) / makespan if makespan else 0.0,
        "sd_share": float((steps["sd_share"] * steps["rollout_s"]).sum()) / rollout if rollout else 0.0,
        "drafter_train_gpu_seconds": float(dur[timeline["state"] == "drafter_train"].sum()) * gpus_per_worker,
    }
    if "turns" in steps:  # a multi-turn trace's run
        out["turns_per_trajectory"] = float(steps["turns"].sum()) / max(float(steps["trajectories"].sum()), 1.0)
        out["tool_wait_share"] = float((steps["tool_wait_share"] * steps["rollout_s"]).sum()) / rollout if rollout else 0.0
    if "mean_accepted" in steps and steps["mean_accepted"].notna().any():
        out["mean_accepted"] = float(steps["mean_accepted"].mean())
    return out


def rollout_overlap(tl: pd.DataFrame) -> float:
    """Share of a timeline's generation time (prefill, decode, spec_decode rows) during which some worker ran
    a training stage (reward or train): 0 for a synchronous step loop, near 1 where rollout runs beside
    training (async), so its rollout_s is only the time training waited for responses."""
    train = tl[tl["state"].isin(TRAINING)]
    gen = tl[tl["state"].isin(GENERATION)]
    total = float((gen["t_end"] - gen["t_start"]).sum())
    if train.empty or total <= 0:
        return 0.0
    # covered(t): length of the union of training intervals before t, piecewise linear between merged ends
    order = np.argsort(train["t_start"].to_numpy(float), kind="stable")
    starts, ends = train["t_start"].to_numpy(float)[order], train["t_end"].to_numpy(float)[order]
    ends = np.maximum.accumulate(ends)
    new = np.concatenate([[True], starts[1:] > ends[:-1]])  # a merged interval begins where a gap ends
    m_start, m_end = starts[new], np.maximum.reduceat(ends, np.flatnonzero(new))
    before = np.concatenate([[0.0], np.cumsum(m_end - m_start)[:-1]])
    xs = np.column_stack([m_start, m_end]).ravel()
    ys = np.column_stack([before, before + m_end - m_start]).ravel()

    def covered(t):
        return np.interp(t, xs, ys, left=0.0, right=ys[-1])

    inside = covered(gen["t_end"].to_numpy(float)) - covered(gen["t_start"].to_numpy(float))
    return max(0.0, float(inside.sum()) / total)
