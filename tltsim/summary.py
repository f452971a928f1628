"""The summary of a run from its timeline and steps: one definition for the simulator and `real/`.

Every worker is accounted for from the first step's start to the last step's end, so
busy + idle = gpu_seconds = gpus x makespan (each timeline worker stands for `gpus_per_worker`
GPUs, a TP group). Needs the steps columns rollout_s, reward_s, train_s, sync_s, tail_s,
response_tokens and sd_share; mean_accepted is summarised when present.
"""
from __future__ import annotations

import pandas as pd


def summarize(timeline: pd.DataFrame, steps: pd.DataFrame, makespan: float, gpus: int,
              gpus_per_worker: int = 1) -> dict:
    """The run-level figures (seconds, shares, tokens per second) of a Result's summary."""
    dur = timeline["t_end"] - timeline["t_start"]
    idle = float(dur[timeline["state"] == "idle"].sum()) * gpus_per_worker
    gpu_s = makespan * gpus
    rollout = float(steps["rollout_s"].sum())
    out = {
        "steps": len(steps),
        "makespan_s": makespan,
        "mean_step_s": makespan / max(len(steps), 1),
        "rollout_s": rollout,
        "reward_s": float(steps["reward_s"].sum()),
        "train_s": float(steps["train_s"].sum()),
        "sync_s": float(steps["sync_s"].sum()),
        "rollout_share": rollout / makespan if makespan else 0.0,
        "gpu_seconds": gpu_s,
        "idle_gpu_seconds": idle,
        "idle_fraction": idle / gpu_s if gpu_s else 0.0,
        "busy_gpu_seconds": float(dur[timeline["state"] != "idle"].sum()) * gpus_per_worker,
        "tail_share": float(steps["tail_s"].sum()) / rollout if rollout else 0.0,
        "tokens_per_s": float(steps["response_tokens"].sum()) / makespan if makespan else 0.0,
        "sd_share": float((steps["sd_share"] * steps["rollout_s"]).sum()) / rollout if rollout else 0.0,
        "drafter_train_gpu_seconds": float(dur[timeline["state"] == "drafter_train"].sum()) * gpus_per_worker,
    }
    if "mean_accepted" in steps and steps["mean_accepted"].notna().any():
        out["mean_accepted"] = float(steps["mean_accepted"].mean())
    return out
