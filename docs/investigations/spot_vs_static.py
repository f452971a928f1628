"""Spot-trained vs static drafter after RL updates, over seeds: the trials behind the spot-training test.

    python docs/investigations/spot_vs_static.py OUT_DIR 0,1,2,3,4,5,6,7,8,9 ['{"prompts": 6, ...}']

For each seed: a `tlt` run of the shipped target (2 workers, 3 steps, the setting of tests/real/test_run.py::
test_spot_training_keeps_the_drafter_ahead_of_a_static_one), then the run's final (RL-updated) target decodes
32 held-out prompts greedily with chain 4_1_4, once with the warm-up drafter (what static-sd keeps) and once
with the spot-trained one; prints their mean accepted lengths (bonus included), the spot batches, mean
reward per step and whether GRPO updated the target that step (some group had mixed rewards). The optional
JSON argument overrides RunConfig fields.
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from real.drafters.eagle import Drafter
from real.tasks.evaluate import accepted_length
from real.models.targets import load_target
from real.settings import SHIPPED_TARGET
from real.run.launch import RunConfig, launch
from real.tasks.gcd import GcdTask

# 3 prompt groups of 8 on 2 workers (worker 0 serves two, worker 1 one) with at most 2 rows running per engine:
# worker 1 finishes about halfway through each rollout and spot-trains for the rest
SETTING = {"workers": 2, "steps": 3, "model": str(SHIPPED_TARGET), "prompts": 3, "group": 8, "max_running": 2,
           "max_new_tokens": 96, "warmup_steps": 10, "warmup_prompts": 16, "probe": 4, "drafter_batch": 4,
           "knobs": {"threshold": 4, "patience": 2, "arms": "4_2_8,4_1_4", "buffer_steps": 2}}


def accepted(target, drafter, task):
    return accepted_length(target, drafter, task, task.sample(np.random.default_rng(12345), 32, split="test"),
                           "4_1_4", max_new_tokens=64)


def main():
    torch.set_num_threads(1)
    root = Path(sys.argv[1])
    root.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in sys.argv[2].split(",")]
    extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    for seed in seeds:
        out = root / f"tlt{seed}"
        shutil.rmtree(out, ignore_errors=True)
        config = RunConfig(**{**SETTING, "seed": seed, **extra})
        launch(config, out)
        task = GcdTask.load(config.model)
        target = load_target(out / "checkpoint" / "target", "cpu")
        static = Drafter.load(out / "drafter_init.pt", target)
        spot = Drafter.load(out / "checkpoint" / "drafter.pt", target)
        st = pd.read_parquet(out / "steps.parquet")
        print(json.dumps({"seed": seed, "static": round(accepted(target, static, task), 3),
                          "spot": round(accepted(target, spot, task), 3),
                          "batches": st["drafter_train_batches"].tolist(),
                          "reward": st["mean_reward"].round(3).tolist(),
                          "updated": st["grpo_loss"].ne(0).tolist()}), flush=True)


if __name__ == "__main__":
    main()
