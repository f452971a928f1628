"""The engine's decoding steps (plain and speculative) with this tree's KV cache against an older one's, side by side.

    python benchmarks/bench_kvcache.py [--baseline 7ffc472] [--batch 16] [--contexts 16,256,640] [--repeats 5]

The baseline (default: the last revision whose cache was a `transformers.DynamicCache`, which concatenates every
layer's whole cache at every step) is read with `git show REV:real/engine/kvcache.py`, so this runs in a git checkout.
The current cache writes new keys and values into preallocated storage. For each context length and for an
aligned batch (every row the same length: plain commits move nothing) and a ragged one (three lengths, as after
speculative iterations accepted different counts: every commit moves the shorter rows' new slot), it prints the
median engine step of each cache, plain and speculative (4_1_4, with an untrained drafter: the cost of an iteration,
not a speedup), interleaved, with the shipped target on one thread.
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from real.drafters.eagle import Drafter, EagleSession
from real.engine.generate import Engine
from real.models.targets import load_target
from real.settings import SHIPPED_TARGET

ROOT = Path(__file__).resolve().parent.parent


def baseline_cache(rev: str):
    """RaggedCache of `rev`'s real/engine/kvcache.py, imported from a temporary copy."""
    source = subprocess.run(["git", "show", f"{rev}:real/engine/kvcache.py"], cwd=ROOT, capture_output=True, text=True)
    if source.returncode != 0:
        sys.exit(f"bench_kvcache: cannot read real/engine/kvcache.py at {rev!r} ({source.stderr.strip()}); "
                 "run in a git checkout, or pass --baseline with a revision that has it")
    path = Path(tempfile.mkdtemp()) / "baseline_kvcache.py"
    path.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location("baseline_kvcache", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RaggedCache


def median_step(target, drafter, rows: list[list[int]], cache_cls, mode: str, iterations: int) -> float:
    """Median wall time of `iterations` engine steps in `mode` over `rows`, with `cache_cls` as the KV cache (the
    target's and the drafter's)."""
    modules = [sys.modules[Engine.__module__], sys.modules[EagleSession.__module__]]
    current = [m.RaggedCache for m in modules]
    for m in modules:
        m.RaggedCache = cache_cls
    try:
        engine = Engine(target, drafter, max_new_tokens=5 * iterations + 5, eos_token_id=())
        engine.add(rows)
        times = [engine.step(mode, "4_1_4").wall_s for _ in range(iterations + 1)]
        return float(np.median(times[1:]))  # the first speculative iteration builds the drafter's state
    finally:
        for m, cls in zip(modules, current):
            m.RaggedCache = cls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default="7ffc472")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--contexts", default="16,256,640")
    p.add_argument("--iterations", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    caches = {"baseline": baseline_cache(args.baseline), "current": sys.modules[Engine.__module__].RaggedCache}
    target = load_target(SHIPPED_TARGET, "cpu")
    drafter = Drafter.for_target(target, seed=0).eval()
    vocab = target.config.vocab_size
    gen = np.random.default_rng(0)
    print(f"batch {args.batch}, {args.iterations} iterations (after a warm one) from a prompt of the given length, "
          f"best of {args.repeats} interleaved repeats; baseline = {args.baseline}")
    print("context  batch    mode         baseline ms  current ms  current/baseline")
    for context in (int(c) for c in args.contexts.split(",")):
        prompt = gen.integers(3, vocab, size=context).tolist()
        batches = {"aligned": [prompt] * args.batch,
                   "ragged": [prompt[: context - i % 3] for i in range(args.batch)]}
        best = {}
        for _ in range(args.repeats):
            for name, rows in batches.items():
                for mode in ("decode", "spec_decode"):
                    for kind, cls in caches.items():
                        t = median_step(target, drafter, rows, cls, mode, args.iterations)
                        best[name, mode, kind] = min(best.get((name, mode, kind), np.inf), t)
        for name in batches:
            for mode in ("decode", "spec_decode"):
                b, c = best[name, mode, "baseline"], best[name, mode, "current"]
                print(f"{context:7d}  {name:7s}  {mode:11s}  {b * 1e3:11.3f}  {c * 1e3:10.3f}  {c / b:16.3f}")


if __name__ == "__main__":
    main()
