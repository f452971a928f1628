"""Sharing a step's drafter-training samples between workers: tensor all-gathers vs a pickled all_gather_object.

    python benchmarks/bench_share.py | tee benchmarks/results/bench_share.txt

Each of 2 gloo workers (one torch thread each, as `tltsim real run` starts them) holds the (tokens, features)
pairs of one step of the validation benchmark's runs: 16 responses of the default target, prompt 13 tokens plus
a response of 20-128, features of width 128 (float32). Both ways are timed alternately in one run (this machine
is shared and its speed drifts), after a barrier each; rank 0 prints the medians and their ratio.
"""
from __future__ import annotations

import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPEATS = 30


def worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}")
    from real.run.spot import all_gather_pairs

    g = torch.Generator().manual_seed(rank)
    lengths = (13 + torch.randint(20, 129, (16,), generator=g)).tolist()
    pairs = [(torch.randint(3, 19, (n,), generator=g), torch.randn(n - 1, 128, generator=g)) for n in lengths]
    ways = {"all_gather_object": lambda: dist.all_gather_object([None, None], pairs),
            "all_gather_pairs": lambda: all_gather_pairs(pairs, 128, torch.float32, torch.device("cpu"))}
    times = {k: [] for k in ways}
    for _ in range(REPEATS + 2):
        for name, fn in ways.items():
            dist.barrier()
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    if rank == 0:
        med = {k: statistics.median(v[2:]) for k, v in times.items()}  # the first two: warm-up
        kb = sum(n * 8 + (n - 1) * 128 * 4 for n in lengths) / 1024
        print(f"{len(pairs)} pairs a worker, {kb:.0f} KiB, medians of {REPEATS}:")
        for k, v in med.items():
            print(f"  {k:18s} {v * 1e3:7.2f} ms")
        print(f"  all_gather_pairs / all_gather_object: {med['all_gather_pairs'] / med['all_gather_object']:.3f}")
    dist.barrier()  # neither rank leaves while the other still talks
    dist.destroy_process_group()


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(worker, args=(port,), nprocs=2)


if __name__ == "__main__":
    main()
