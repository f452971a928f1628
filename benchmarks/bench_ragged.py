"""Plain decoding of an aligned batch vs a ragged one (rows of different lengths), side by side.

    python benchmarks/bench_ragged.py [--batch 16] [--iterations 120] [--repeats 5]

After a speculative iteration accepts different counts per row, the engine's batch is ragged for the rest of
the rollout: every later plain commit moves each shorter row's new KV slot down to its length, in every layer
(real/kvcache.py). An aligned batch (the task's prompts all have one length, so plain decoding keeps it aligned)
commits in place. This prints the median engine step and the commit's share of it for both, interleaved,
with the shipped target on one thread.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import real.kvcache as kvcache
from real.generate import Engine
from real.models import SHIPPED_TARGET, load_target
from real.task import GcdTask


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--iterations", type=int, default=120)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    target, task = load_target(SHIPPED_TARGET, "cpu"), GcdTask.load(SHIPPED_TARGET)
    prompts = [task.prompt_ids(q) for q in task.sample(np.random.default_rng(0), args.batch)]
    short = min(map(len, prompts))
    batches = {"aligned": [q[:short] for q in prompts],  # one length: commits stay in place
               "ragged": [q[: short - i % 3] for i, q in enumerate(prompts)]}  # 3 lengths: commits move slots
    commit, spent = kvcache.RaggedCache.commit, [0.0]

    def timed_commit(self, *a, **kw):
        t = time.perf_counter()
        commit(self, *a, **kw)
        spent[0] += time.perf_counter() - t

    kvcache.RaggedCache.commit = timed_commit
    out = {name: ([], []) for name in batches}
    for _ in range(args.repeats):
        for name, rows in batches.items():
            engine = Engine(target, max_new_tokens=args.iterations + 1, eos_token_id=[])
            engine.add(rows)
            spent[0] = 0.0
            steps = [engine.step().wall_s for _ in range(args.iterations)]
            out[name][0].append(np.median(steps))
            out[name][1].append(spent[0] / args.iterations)
    print(f"batch {args.batch}, {args.iterations} plain iterations, best of {args.repeats} interleaved repeats")
    print("batch    step ms  commit ms")
    for name, (steps, commits) in out.items():
        print(f"{name:7s}  {min(steps) * 1e3:7.3f}  {min(commits) * 1e3:9.3f}")
    print(f"ragged / aligned: step {min(out['ragged'][0]) / min(out['aligned'][0]):.3f}x, "
          f"commit {min(out['ragged'][1]) / min(out['aligned'][1]):.3f}x")


if __name__ == "__main__":
    main()
