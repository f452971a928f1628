"""Spot-trained vs static drafter after RL updates, over seeds: the trials behind the spot-training test.

    python benchmarks/spot_vs_static.py OUT_DIR 0,1,2,3,4,5,6,7,8,9 '{"prompts": 6, "knobs": {...}}'

For each seed: a `tlt` run (2 workers, 3 steps) on a small test target (test-llama, pretrained here for
120 steps into OUT_DIR/../target on first use), then the run's final (RL-updated) target decodes 32
held-out prompts greedily with chain 4_1_4, once with the warm-up drafter (what static-sd keeps) and once
with the spot-trained one; prints their mean accepted lengths (bonus included) and the spot batches per
step. The JSON argument overrides RunConfig fields of tests/real/test_run.py's setting.
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from real.drafter import Drafter
from real.generate import generate
from real.models import load_target
from real.pretrain import PretrainConfig, save_checkpoint, train
from real.run import RunConfig, launch
from real.task import GcdTask, TaskConfig


def accepted(target, drafter, task, n=32, max_new=64):
    problems = task.sample(np.random.default_rng(12345), n, split="test")
    gen = generate(target, [task.prompt_ids(p) for p in problems], drafter, "4_1_4", max_new_tokens=max_new)
    return float(np.mean([a + 1 for it in gen.iterations if it.mode == "spec" for a in it.accepted]))


def main():
    torch.set_num_threads(1)
    root = Path(sys.argv[1])
    root.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in sys.argv[2].split(",")]
    extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    tdir = Path(extra.pop("model")) if "model" in extra else root.parent / "target" / "test-llama"
    if not tdir.exists():
        config = PretrainConfig(preset="test-llama", steps=120, batch_tokens=2048, lr=1e-2, warmup=10,
                                task=TaskConfig(max_steps=12))
        model, task, _ = train(config)
        save_checkpoint(model, task, tdir, {})
    for seed in seeds:
        kw = {"workers": 2, "steps": 3, "model": str(tdir), "prompts": 3, "group": 4, "max_new_tokens": 64,
              "warmup_steps": 10, "warmup_prompts": 16, "probe": 4, "drafter_batch": 4, "seed": seed,
              "knobs": {"threshold": 4, "patience": 2, "arms": "4_2_8,4_1_4"}}
        kw.update(extra)
        out = root / f"tlt{seed}"
        shutil.rmtree(out, ignore_errors=True)
        launch(RunConfig(**kw), out)
        task = GcdTask.load(tdir)
        target = load_target(out / "checkpoint" / "target", "cpu")
        d0 = Drafter.load(out / "drafter_init.pt", target)
        d1 = Drafter.load(out / "checkpoint" / "drafter.pt", target)
        st = pd.read_parquet(out / "steps.parquet")
        print(json.dumps({"seed": seed, "static": round(accepted(target, d0, task), 3),
                          "spot": round(accepted(target, d1, task), 3),
                          "batches": st["drafter_train_batches"].tolist(),
                          "probe": st["drafter_accepted"].round(3).tolist()}), flush=True)


if __name__ == "__main__":
    main()
