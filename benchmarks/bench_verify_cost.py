"""What a speculative verify costs against a plain decode step, per dtype, batch and context: the ceiling of
speculation's speedup on this machine.

    python benchmarks/bench_verify_cost.py [--model smollm2-135m] [--batches 1,4,8] [--contexts 128,1024]

A chain of d drafts is verified by one target forward over d + 1 tokens a row (the last accepted token and the
drafts), from the KV cache, where a plain decode step is a forward over 1. Where decoding is bound by reading
the weights (a GPU at small batches), the d + 1 tokens cost about what 1 does and speculation gains nearly its
accepted length; where it is bound by arithmetic (a CPU core), they cost more, and speculation gains at most

    accepted length / (verify seconds / decode seconds)

before the drafter's own forwards are paid. For each dtype, batch and context this prints the median seconds
of forwards over 1 and over k = 2..5 tokens (interleaved, the cache cropped back after each), their ratio, and
that ceiling at accepted lengths 2 and 3 for a chain of k - 1. One torch thread, as a `tltsim real run`
worker computes on a CPU.

What it times is the model's forward over transformers' DynamicCache, not the engine's real.engine.kvcache.RaggedCache:
at long contexts the DynamicCache's own copies can weigh on a 1-token forward as much as on a 5-token one, so
read its long-context rows with care; `tltsim real profile` times the engine's own decode and verify iterations.
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch
from transformers import DynamicCache

from real.models.targets import load_target


def forward_seconds(model, batch: int, context: int, tokens: tuple[int, ...], repeats: int, seed: int) -> dict:
    """Median seconds of one forward over each of `tokens` new tokens a row, after a prefill of `context`."""
    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=torch.randint(3, vocab, (batch, context), generator=gen), cache=cache, use_cache=True)
        times = {k: [] for k in tokens}
        for _ in range(repeats):  # interleaved: a drift of the machine's speed touches every k alike
            for k in tokens:
                x = torch.randint(3, vocab, (batch, k), generator=gen)
                t = time.perf_counter()
                model(input_ids=x, cache=cache, use_cache=True)
                times[k].append(time.perf_counter() - t)
                cache.crop(-k)
    return {k: float(np.median(v)) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--contexts", default="128,1024")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, {args.threads} thread(s)")
    tokens = (1, 2, 3, 4, 5)
    base = load_target(args.model).eval()
    print("dtype     batch  context  decode_ms  " + "  ".join(f"x{k}_tokens" for k in tokens[1:])
          + "  ceiling_4_1_4@2  ceiling_4_1_4@3")
    for name in args.dtypes.split(","):
        model = base.to(getattr(torch, name))
        for b in (int(x) for x in args.batches.split(",")):
            for c in (int(x) for x in args.contexts.split(",")):
                s = forward_seconds(model, b, c, tokens, args.repeats, seed=b * 10_000 + c)
                ratio = {k: s[k] / s[1] for k in tokens}
                print(f"{name:<8}  {b:>5}  {c:>7}  {1000 * s[1]:9.1f}  "
                      + "  ".join(f"{ratio[k]:9.2f}" for k in tokens[1:])
                      + f"  {2 / ratio[5]:15.2f}  {3 / ratio[5]:15.2f}", flush=True)


if __name__ == "__main__":
    main()
