"""What the other worker's work costs a decoding worker on a shared CPU: one worker decodes while the other
idles, decodes too, or spot-trains the drafter.

    python benchmarks/bench_spot_interference.py [--model smollm2-135m] [--dtype bfloat16]
        [--drafter CKPT] [--train-tokens 1024] [--batches 1,4,8] [--rounds 3] [--iterations 8] \
        | tee benchmarks/results/bench_spot_interference.txt

Two worker processes, one torch thread each, as `tltsim real run --workers 2` places them. Worker 0 times
`--iterations` plain decode iterations at each batch (real.tools.profile.speed_probe's loop: prompts of random
tokens, the rollout loop as a run calls it) while worker 1, in the same window:
  idle            sleeps (verl's idle worker at the tail of a rollout)
  decode          decodes at the same batch (both engines busy: what `tltsim real profile` times, every process at once)
  drafter_train   runs the drafter's spot-training step (real.drafters.eagle.Drafter.train_step, fp32 master weights,
                  learning rate 0: the cost, not the learning) on batches of 8 answers of --train-tokens tokens
                  (tlt's idle worker)
The three conditions take turns within every round, so the machine's drift reaches each alike. Printed: the
median seconds a decode iteration at each batch and condition, and each over idle's. On GPUs each worker has
its own device and this is 1.0 by construction; on a CPU the workers share the memory bus and caches.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CONDITIONS = ("idle", "decode", "drafter_train")


def _worker(rank: int, args, port: int, out: str) -> None:
    from real import drafters
    from real.run.grpo import barrier
    from real.drafters.master_weights import MasterWeightAdamW
    from real.models.targets import load_target
    from real.tools.profile import _rollout
    from real.settings import RUN_SAMPLING
    from tltsim.core.records import SPEED_CONTEXT

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    store = dist.distributed_c10d._get_default_store()
    target = load_target(args.model, dtype=args.dtype)
    vocab = target.get_output_embeddings().weight.shape[0]
    rng = np.random.default_rng(rank)
    drafter = drafters.load(args.drafter or drafters.SHIPPED, target, args.model) if rank == 1 else None
    if drafter is not None:
        optimizer = MasterWeightAdamW(drafter.parameters(), lr=0.0)  # AdamW's decay is lr-scaled: none either
        dtype = next(target.parameters()).dtype
        pairs = [(torch.tensor(t := rng.integers(3, vocab, size=args.train_tokens).tolist()),
                  torch.randn(len(t) - 1, target.config.hidden_size, dtype=dtype)) for _ in range(8)]
    rows = []
    for rnd in range(args.rounds):
        for condition in CONDITIONS:
            for batch in args.batches:
                key = f"{rnd}/{condition}/{batch}/done"
                prompts = rng.integers(3, vocab, size=(batch, SPEED_CONTEXT)).tolist()
                barrier()
                if rank == 0:
                    calls = _rollout(target, None, prompts, args.iterations + 1, None, rnd, RUN_SAMPLING)
                    rows.append((rnd, condition, batch, float(np.median([s for _, s in calls[2:]]))))
                    store.set(key, "1")
                else:
                    while not store.check([key]):
                        if condition == "idle":
                            time.sleep(0.002)
                        elif condition == "decode":
                            _rollout(target, None, prompts, 2, None, rnd, RUN_SAMPLING)
                        else:
                            drafter.train_step(pairs, optimizer)
                if rank == 0:
                    print(f"# round {rnd + 1}/{args.rounds} {condition:>13} batch {batch}: "
                          f"{rows[-1][3] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    if rank == 0:
        import pandas as pd
        pd.DataFrame(rows, columns=["round", "condition", "batch", "seconds"]).to_csv(out, index=False)
    barrier()  # rank 0 holds the store: it leaves last
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    import tempfile

    import pandas as pd

    from real.run.grpo import free_port
    from real.run.processes import start_workers

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batches", default="1,4,8", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--drafter", help="drafter checkpoint worker 1 trains (default: the one shipped for --model)")
    ap.add_argument("--train-tokens", type=int, default=1024,
                    help="tokens of each of the 8 answers a train step takes (default: the long-tail cap)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=8)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "rows.csv")
        start_workers(_worker, (args, free_port(), out), 2)
        rows = pd.read_csv(out)
    print(f"# python benchmarks/bench_spot_interference.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {args.model} in {args.dtype}, one thread a "
          f"worker, {args.rounds} rounds x {args.iterations} decode iterations; worker 1 trains "
          f"{args.drafter or 'the shipped drafter'} on 8 x {args.train_tokens} tokens; {os.cpu_count()} CPUs")
    table = rows.groupby(["batch", "condition"])["seconds"].median().unstack("condition")[list(CONDITIONS)]
    for c in CONDITIONS[1:]:
        table[f"{c}/idle"] = table[c] / table["idle"]
    print("median seconds of worker 0's plain decode iteration, by what worker 1 does meanwhile")
    print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
