"""`tltsim real speed` on a real model with its shipped drafter, recorded with the machine's state.

    python benchmarks/bench_real_speed.py [--model smollm2-135m] [--batches 1,4,16] [--rounds 3] [--threads 2]
    # record: ... | tee benchmarks/results/bench_real_speed.txt

Target: at batch 1 on a 2-core CPU, speculation with the shipped drafter at least 1.5x plain;
batch 4 and 16 as they come. Plain and speculative runs alternate (real.tools.speed), so a change of load
hits both; the table's draft/target/overhead columns are the measured breakdown of an iteration.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from real.cli import main as real_main  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, {args.threads} threads",
          flush=True)
    words = ["speed", "--model", args.model, "--batches", args.batches, "--rounds", str(args.rounds),
             "--max-new-tokens", str(args.max_new_tokens), "--threads", str(args.threads)]
    print("# tltsim real " + " ".join(words), flush=True)
    real_main(words)


if __name__ == "__main__":
    main()
