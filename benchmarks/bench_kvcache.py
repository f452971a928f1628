"""The engine's plain decoding step with this tree's KV cache against an earlier revision's, side by side.

    python benchmarks/bench_kvcache.py [--baseline 7ffc472] [--batch 16] [--contexts 16,256,768] [--repeats 5]

The baseline (default: the last revision whose cache was a `transformers.DynamicCache`, which concatenates every
layer's whole cache at every step) is read with `git show REV:real/kvcache.py`, so this runs in a git checkout.
The current cache writes new keys and values into preallocated storage. For each context length and for an
aligned batch (every row the same length: plain commits move nothing) and a ragged one (three lengths, as after
speculative iterations accepted different counts: every commit moves the shorter rows' new slot), it prints the
median engine step of each cache, interleaved, with the shipped target on one thread.
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

from real.generate import Engine
from real.models import SHIPPED_TARGET, load_target

ROOT = Path(__file__).resolve().parent.parent


def baseline_cache(rev: str):
    """RaggedCache of `rev`'s real/kvcache.py, imported from a temporary copy."""
    source = subprocess.run(["git", "show", f"{rev}:real/kvcache.py"], cwd=ROOT, capture_output=True, text=True)
    if source.returncode != 0:
        sys.exit(f"bench_kvcache: cannot read real/kvcache.py at {rev!r} ({source.stderr.strip()}); "
                 "run in a git checkout, or pass --baseline with a revision that has it")
    path = Path(tempfile.mkdtemp()) / "baseline_kvcache.py"
    path.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location("baseline_kvcache", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RaggedCache


def median_step(target, rows: list[list[int]], cache_cls, iterations: int) -> float:
    engine = Engine(target, max_new_tokens=iterations + 1, eos_token_id=[])
    generate_module = sys.modules[Engine.__module__]
    current, generate_module.RaggedCache = generate_module.RaggedCache, cache_cls
    try:
        engine.cache = engine._new_cache(0)
        engine.add(rows)
        return float(np.median([engine.step().wall_s for _ in range(iterations)]))
    finally:
        generate_module.RaggedCache = current


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default="7ffc472")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--contexts", default="16,256,768")
    p.add_argument("--iterations", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    caches = {"baseline": baseline_cache(args.baseline), "current": sys.modules[Engine.__module__].RaggedCache}
    target = load_target(SHIPPED_TARGET, "cpu")
    vocab = target.config.vocab_size
    gen = np.random.default_rng(0)
    print(f"batch {args.batch}, {args.iterations} plain iterations after a prompt of the given length, "
          f"best of {args.repeats} interleaved repeats; baseline = {args.baseline}")
    print("context  batch    baseline ms  current ms  current/baseline")
    for context in (int(c) for c in args.contexts.split(",")):
        prompt = gen.integers(3, vocab, size=context).tolist()
        batches = {"aligned": [prompt] * args.batch,
                   "ragged": [prompt[: context - i % 3] for i in range(args.batch)]}
        best = {}
        for _ in range(args.repeats):
            for name, rows in batches.items():
                for kind, cls in caches.items():
                    t = median_step(target, rows, cls, args.iterations)
                    best[name, kind] = min(best.get((name, kind), np.inf), t)
        for name in batches:
            b, c = best[name, "baseline"], best[name, "current"]
            print(f"{context:7d}  {name:7s}  {b * 1e3:11.3f}  {c * 1e3:10.3f}  {c / b:16.3f}")


if __name__ == "__main__":
    main()
