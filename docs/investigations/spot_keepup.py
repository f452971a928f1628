"""Does spot training keep the drafter ahead while the target moves? A `tlt` run of >= 8 steps with
--probe-static, one step at a time (each step a `--resume` of the run with --steps one higher, as a user would
run it), and after each step a measure of how far the target has moved from where it started.

    python docs/investigations/spot_keepup.py OUT_DIR [--steps 8] [--config JSON] [--warm STEPS] [--kl-prompts 16]

Per step (the run's steps.parquet): drafter_accepted (the spot-trained drafter's probe) and
static_drafter_accepted (the starting drafter, never trained), both greedy with the run's current target
(the target after the step before), mean_reward, drafter_train_batches, grpo_loss; and, measured here from the
checkpointed target that the step's probe decoded with:
  kl_to_start     mean per-token KL(initial target || current target) over the response positions of fixed
                  sequences (--kl-prompts held-out prompts, each with the initial target's sampled answer at the
                  run's temperature); the full next-token distributions, so it is >= 0 and 0 for an unmoved target
  greedy_changed  fraction of the probe's prompts whose greedy answer differs from the initial target's: what the
                  static drafter was fitted to predict is no longer what the target says there
A last row, "end", probes both drafters with the final target (after the last step's update), as the run's
probe would before a next step.

Targets: the spot probe never falls more than 5% below its first value; at the end it beats
the static drafter by >= 0.2 tokens per call; the target moved (kl_to_start > 0 and greedy answers changed).

--config overrides RunConfig fields (JSON; "grpo" takes GRPOConfig's fields). --warm STEPS warms a drafter up
before the run (STEPS AdamW steps on the initial target's sampled answers to 64 training prompts, at the
warm-up's learning rate) and starts the run from it (--drafter), so spot training runs at
real.run.config.WARM_SPOT_LR unless "spot_lr" is set: the case of a shipped drafter. One thread per worker.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import transformers

from real import drafters
from real.tasks.evaluate import accepted_tokens, token_kl
from real.engine.generate import generate
from real.models.targets import load_target
from real.run.launch import RunConfig, launch
from real.run.config import WARM_SPOT_LR
from real.settings import SHIPPED_TARGET, GenerateSettings, GRPOConfig, SamplingParams
from real.drafters.warmup import find_shipped_drafter
from real.run.problems import mixed_seed

# the shipped tiny target's spot-vs-static setting (docs/investigations/spot_vs_static.py): worker 1 (one group of three)
# finishes about halfway through each rollout and spot-trains for the rest
SETTING = {"workers": 2, "model": str(SHIPPED_TARGET), "prompts": 3, "group": 8, "max_running": 2,
           "max_new_tokens": 96, "warmup_steps": 10, "warmup_prompts": 16, "probe": 8, "drafter_batch": 4,
           "probe_static": True, "speed_probe": 0,
           "knobs": {"threshold": 4, "patience": 2, "arms": "4_2_8,4_1_4", "buffer_steps": 2}}


def config_of(overrides: dict) -> RunConfig:
    d = {**SETTING, **overrides}
    if isinstance(d.get("grpo"), dict):
        d["grpo"] = GRPOConfig(**d["grpo"])
    return RunConfig(**d).checked()


def greedy_answers(target, task, problems, cap: int) -> list[list[int]]:
    gen = generate(target, [task.prompt_ids(p) for p in problems], settings=GenerateSettings(max_new_tokens=cap))
    return [f.tokens for f in gen.finished]


def warm_drafter(cfg: RunConfig, steps: int, path: Path) -> None:
    """A drafter fitted before the run on the initial target's sampled answers to 64 training prompts."""
    target, task = load_target(cfg.model), cfg.make_task()
    problems = task.sample(np.random.default_rng(mixed_seed(cfg.seed, 997)), 64)
    gen = generate(target, [task.prompt_ids(p) for p in problems], settings=GenerateSettings(
        sampling=SamplingParams(cfg.greedy, cfg.temperature), max_new_tokens=cfg.max_new_tokens, seed=cfg.seed,
        collect_features=True))
    drafter = drafters.kind("eagle").for_target(target, seed=cfg.seed)
    drafter.fit([(torch.tensor(f.prompt + f.tokens), f.features) for f in gen.finished], steps, cfg.drafter_batch,
                cfg.drafter_lr, seed=cfg.seed)
    drafter.save(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--config", default="{}", help="RunConfig overrides (JSON)")
    ap.add_argument("--warm", type=int, default=0, help="warm a drafter up before the run for this many steps")
    ap.add_argument("--kl-prompts", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    t_start = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    run = args.out / "run"
    shutil.rmtree(run, ignore_errors=True)
    cfg = config_of(json.loads(args.config))
    if args.warm:
        warm_drafter(cfg, args.warm, args.out / "warm_drafter.pt")
        cfg = replace(cfg, drafter=str(args.out / "warm_drafter.pt"))
    task = cfg.make_task()
    start = load_target(cfg.model)
    kl_problems = task.sample(np.random.default_rng(mixed_seed(cfg.seed, 996)), args.kl_prompts, split="test")
    kl_prompts = [task.prompt_ids(p) for p in kl_problems]
    gen = generate(start, kl_prompts, settings=GenerateSettings(
        sampling=SamplingParams(False, cfg.temperature), max_new_tokens=cfg.max_new_tokens, seed=cfg.seed))
    sequences = [(f.prompt, f.tokens) for f in gen.finished]
    probe = task.sample(np.random.default_rng(mixed_seed(cfg.seed, 999)), cfg.probe, split="test")  # real.run.worker's
    start_greedy = greedy_answers(start, task, probe, cfg.max_new_tokens)

    def moved(target) -> dict:
        changed = [a != b for a, b in zip(greedy_answers(target, task, probe, cfg.max_new_tokens), start_greedy)]
        return {"kl_to_start": token_kl(start, target, sequences), "greedy_changed": float(np.mean(changed))}

    spot_lr = cfg.spot_lr or (WARM_SPOT_LR if cfg.drafter or find_shipped_drafter(cfg.model) else cfg.drafter_lr)
    print(f"# {' '.join(sys.argv)}", flush=True)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"grpo lr {cfg.grpo.lr}, spot lr {spot_lr}, drafter_batch {cfg.drafter_batch}, probe {cfg.probe}, "
          f"{cfg.prompts} prompts x {cfg.group}, cap {cfg.max_new_tokens}", flush=True)
    rows = [{"step": 0, **moved(start)}]
    for step in range(args.steps):
        launch(replace(cfg, steps=step + 1), run, resume=step > 0)
        target = load_target(run / "checkpoint" / "target")
        rows.append({"step": step + 1, **moved(target)})  # the target of step + 1's probe
        st = pd.read_parquet(run / "steps.parquet")
        r = {**st.iloc[step][["drafter_accepted", "static_drafter_accepted", "mean_reward", "drafter_train_batches",
                              "grpo_loss"]].to_dict(), **rows[step]}
        print(json.dumps({k: round(float(v), 4) if k != "step" else int(v) for k, v in r.items()}), flush=True)
    # the end: both drafters with the final target, on the probe's prompts
    spot = drafters.load(run / "checkpoint" / "drafter.pt", target)
    static = drafters.load(cfg.drafter or run / "drafter_init.pt", target)
    end = {**rows[-1], "step": "end", "drafter_accepted": float(accepted_tokens(target, spot, task, probe,
                                                                      max_new_tokens=cfg.max_new_tokens).mean()),
           "static_drafter_accepted": float(accepted_tokens(target, static, task, probe,
                                                            max_new_tokens=cfg.max_new_tokens).mean())}
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in end.items()}), flush=True)
    st = pd.read_parquet(run / "steps.parquet")
    spot_probe = list(st["drafter_accepted"]) + [end["drafter_accepted"]]
    floor = min(spot_probe) / spot_probe[0] - 1
    margin = end["drafter_accepted"] - end["static_drafter_accepted"]
    print(f"# spot probe's lowest vs its first: {floor:+.1%} (target >= -5%): {'PASS' if floor >= -0.05 else 'FAIL'}")
    print(f"# end: spot - static = {margin:+.3f} tokens per call (target >= +0.2): "
          f"{'PASS' if margin >= 0.2 else 'FAIL'}")
    moved_ok = end["kl_to_start"] > 0 and end["greedy_changed"] > 0
    print(f"# target moved: kl_to_start {end['kl_to_start']:.4f} at the end, greedy answers changed on "
          f"{end['greedy_changed']:.0%} of the probe's prompts: {'PASS' if moved_ok else 'FAIL'}")
    print(f"# {time.time() - t_start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
