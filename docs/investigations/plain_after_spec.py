"""Does a speculative engine decode plainly as fast as a plain one? Three engines side by side in one process.

    python docs/investigations/plain_after_spec.py [--batch 1] [--context 800] [--iterations 40]

A run's plain iterations in a speculative policy (tlt, das+tlt) are the guard's fallbacks, at other steps and
contexts than verl's, so comparing a pair's iterations mixes the engine with the machine's drift and the context.
Here one prompt set (random tokens, `context` +- 10 a row) is decoded by three engines, one iteration of each in
turn so that drift falls on all alike: without a drafter (verl's), with the sampled-answer long-tail drafter and
its target features kept (tlt's: `collect_features`) decoding plainly only, and the same with a 4_1_4 speculative
iteration before each plain one. It prints each engine's median plain iteration and minor page faults per
iteration (an allocator that maps fresh pages for the speculative iterations' other shapes would show there), and
the speculative iterations' median. One torch thread, the run's dtype and sampling (temperature 0.7).
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import torch

from real import drafters
from real.engine.generate import Engine
from real.models.targets import load_target
from real.settings import SamplingParams

DRAFTER = Path(__file__).resolve().parents[2] / "real" / "assets" / "smollm2-135m-longtail-sampled-drafter.pt"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=800)
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    target = load_target(args.model, dtype=args.dtype)
    drafter = drafters.load(DRAFTER, target, args.model)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, target.config.vocab_size - 100, (args.context + 10 * i,), generator=gen).tolist()
               for i in range(args.batch)]

    def engine(d, features):
        return Engine(target, d, sampling=SamplingParams(greedy=False, temperature=0.7),
                      max_new_tokens=10 * args.iterations + 10, eos_token_id=[], seed=0, collect_features=features)

    engines = {"no drafter": engine(None, False), "drafter, plain only": engine(drafter, True),
               "drafter, spec between": engine(drafter, True)}
    for e in engines.values():
        e.add(prompts)
    plain = {name: [] for name in engines}
    faults = {name: [] for name in engines}
    spec = []
    for _ in range(args.iterations):
        for name, e in engines.items():
            if name == "drafter, spec between":
                spec.append(e.step("spec_decode", "4_1_4").wall_s)
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            plain[name].append(e.step("decode").wall_s)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    skip = min(5, args.iterations // 4)  # warm-up iterations left out of the medians
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.model} in {args.dtype}, one thread, batch "
          f"{args.batch}, context {args.context}, medians of {args.iterations - skip} iterations")
    print("engine                 plain ms  minor faults/iteration  ratio to no drafter")
    base = statistics.median(plain["no drafter"][skip:])
    for name in engines:
        ms = statistics.median(plain[name][skip:])
        print(f"{name:21s}  {ms * 1000:8.1f}  {statistics.median(faults[name][skip:]):22.0f}  {ms / base:19.3f}")
    print(f"speculative iteration (4_1_4): {statistics.median(spec[skip:]) * 1000:.1f} ms, "
          f"{statistics.median(spec[skip:]) / base:.2f} plain iterations of the engine without a drafter")


if __name__ == "__main__":
    main()
