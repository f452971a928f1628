"""Tokens per target call of drafters on the held-out problems `tltsim real drafter` measures on.

    python benchmarks/bench_drafter_heldout.py real/assets/smollm2-135m-drafter.pt \
        real/assets/smollm2-135m-longtail-drafter.pt | tee benchmarks/results/bench_drafter_heldout.txt

The same problems and settings as a checkpoint's `heldout_tokens_per_call_4_1_4` (real.drafters.warmup.heldout_tokens_per_call:
the task's test split drawn with seed + 1, greedy, chain 4_1_4, batch 8), at the given cap and dtype; so drafters
warmed on different data are compared on one set. Counts, no timing: the same output every run.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("drafters", nargs="+", type=Path, help="drafter checkpoints (tltsim real drafter -o)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="longtail")
    ap.add_argument("--heldout", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=1024)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    from real import drafters
    from real.models.targets import load_target, load_task
    from real.drafters.warmup import heldout_tokens_per_call

    torch.set_num_threads(args.threads)
    target, task = load_target(args.model, dtype=args.dtype), load_task(args.model, args.task)
    print(f"model {args.model}  task {args.task}  held-out problems {args.heldout} (seed {args.seed + 1}, test split)  "
          f"cap {args.max_new_tokens}  {args.dtype}  greedy, chain 4_1_4, batch 8")
    print("tokens_per_call  drafter")
    for path in args.drafters:
        drafter = drafters.load(path, target)
        tpc = heldout_tokens_per_call(target, drafter, task, args.heldout, args.seed, args.max_new_tokens)
        print(f"{tpc:15.3f}  {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
