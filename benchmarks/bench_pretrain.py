"""The default target's pretrain: time, loss, accuracy band, and the lengths of its own responses.

    python benchmarks/bench_pretrain.py [--out DIR | --target DIR] [--problems 200] [--groups 100]
    # record: ... | tee benchmarks/results/bench_pretrain.txt

Runs `tltsim real pretrain`'s default config (the same as `PretrainConfig()`), or
takes an existing checkpoint (--target, e.g. the shipped one), then evaluates on
held-out problems: greedy accuracy (overall and by chain length) and
sampled groups of 8 at temperature 1 (accuracy, and how often a group is mixed, i.e.
gives GRPO a non-zero advantage), with the response-length distribution of the
model's own generations beside that of the reference solutions. CPU seconds are
reported beside wall seconds: where other work shares the cores, wall time overstates the cost.
When the shipped checkpoint (real/assets/) exists, says whether the fresh weights equal it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from real.tasks.evaluate import evaluate
from real.models.targets import load_target
from real.settings import SHIPPED_TARGET
from real.settings import PretrainConfig
from real.models.pretrain import PRETRAIN_FILE, pretrain
from real.tasks.gcd import GcdTask

BUCKETS = [(0, 5), (5, 15), (15, 30), (30, 65)]  # solution lines (subtraction steps)


def lengths(xs) -> str:
    x = np.asarray(xs)
    return (f"median {np.median(x):.0f}  p90 {np.percentile(x, 90):.0f}  p99 {np.percentile(x, 99):.0f}  "
            f"max {x.max()}  at the cap {np.mean(x >= GcdTask().max_response_tokens):.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/bench_pretrain/target", help="checkpoint directory to write")
    parser.add_argument("--target", help="evaluate this checkpoint instead of pretraining one")
    parser.add_argument("--problems", type=int, default=200, help="held-out problems for greedy accuracy")
    parser.add_argument("--groups", type=int, default=100, help="held-out problems sampled 8 times each")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{args.threads} threads")
    target = args.target or args.out
    if args.target:
        record = json.loads((Path(target) / PRETRAIN_FILE).read_text())
        made = {k: v for k, v in record.items() if k != "provenance"}  # its free text: real/assets/README.md
        print(f"# target {target}, made by: {json.dumps(made)}")
    else:
        config = PretrainConfig()
        print(f"# command: tltsim real pretrain -o {args.out}   (config: {config})")
        wall, cpu = time.perf_counter(), time.process_time()
        result = pretrain(config, args.out, log=lambda s, loss: print(f"step {s:4d}  loss {loss:.4f}", flush=True)
                          if s % 100 == 0 else None)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"pretrain: {result.steps} steps, wall {wall:.0f} s, CPU {cpu:.0f} s "
              f"(CPU / threads = {cpu / args.threads:.0f} s), loss {np.mean(result.losses[:10]):.3f} -> "
              f"{np.mean(result.losses[-10:]):.3f} (mean of first / last 10 steps)")

    model, task = load_target(target), GcdTask.load(target)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {model.config.model_type}, {params / 1e6:.2f} M parameters")
    if (SHIPPED_TARGET / "config.json").is_file() and Path(target).resolve() != SHIPPED_TARGET.resolve():
        shipped = load_target(SHIPPED_TARGET)
        diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), shipped.parameters()))
        print(f"weights vs the shipped {SHIPPED_TARGET.name}: max abs difference {diff:.3g}")

    held_out = task.sample(np.random.default_rng(12345), max(args.problems, args.groups), split="test")
    steps = np.array([task.num_steps(p) for p in held_out])
    print(f"reference solutions of the {len(held_out)} held-out problems: {lengths([len(task.solution_ids(p)) for p in held_out])}")

    t = time.perf_counter()
    greedy = evaluate(model, task, held_out[: args.problems], greedy=True)
    print(f"greedy, {args.problems} problems ({time.perf_counter() - t:.0f} s): accuracy {greedy.accuracy:.3f}")
    for lo, hi in BUCKETS:
        m = (steps[: args.problems] >= lo) & (steps[: args.problems] < hi)
        print(f"  {lo:2d}-{hi - 1:2d} steps: {m.sum():3d} problems, accuracy {greedy.rewards[m].mean():.3f}")
    print(f"  response lengths: {lengths(greedy.lengths)}")

    t = time.perf_counter()
    sampled = evaluate(model, task, held_out[: args.groups], greedy=False, temperature=1.0, samples=8, seed=0)
    per_group = sampled.rewards.mean(axis=1)
    print(f"sampled, temperature 1, {args.groups} groups of 8 ({time.perf_counter() - t:.0f} s): "
          f"accuracy {sampled.accuracy:.3f}, mixed groups {sampled.mixed_fraction:.1%}, "
          f"all right {np.mean(per_group == 1):.1%}, all wrong {np.mean(per_group == 0):.1%}")
    print(f"  response lengths: {lengths(sampled.lengths)}")


if __name__ == "__main__":
    main()
