"""Simulator speed: simulated responses per wall-second, and fast path vs --exact, in one run.

    python benchmarks/bench_sim.py            # writes nothing; record with: ... | tee benchmarks/results/bench_sim.txt

Cases: paper scale (Qwen2.5-7B, 64 H100, TP 4, 512 responses a step, 100 steps);
large (1,024 GPUs, 16,384 responses a step, 200 steps); fast/exact ratio on the paper-scale case
(exact on 2 steps, compared per step).
"""
from __future__ import annotations

import platform
import time

from tltsim.config import ClusterConfig, SimConfig
from tltsim.sim.simulator import simulate
from tltsim.trace import synth


def timed(trace, cfg):
    t = time.perf_counter()
    res = simulate(trace, cfg)
    return time.perf_counter() - t, res


def main() -> None:
    print(f"python {platform.python_version()} on {platform.machine()}, one process")
    paper = synth("dapo", steps=100, prompts=64, group=8, max_len=8192, seed=0)
    cfg = SimConfig(cluster=ClusterConfig(gpus=64, tp=4, gpu="h100", model="qwen2.5-7b"))
    wall, res = timed(paper, cfg)
    n = len(paper.df)
    print(f"paper scale  : {n:>9,} responses, 100 steps, 64 GPUs   {wall:7.2f} s  {n / wall:>10,.0f} responses/s"
          f"  (target: 100 steps < 5 s)")

    large = synth("dapo", steps=200, prompts=2048, group=8, max_len=8192, seed=0)
    cfg_l = SimConfig(cluster=ClusterConfig(gpus=1024, tp=4, gpu="h100", model="qwen2.5-7b"))
    wall_l, _ = timed(large, cfg_l)
    n_l = len(large.df)
    print(f"large        : {n_l:>9,} responses, 200 steps, 1024 GPUs {wall_l:7.2f} s  {n_l / wall_l:>10,.0f} responses/s"
          f"  (target: > 100,000 responses/s)")

    two = paper.select_steps([0, 1])
    wall_f, fast = timed(two, cfg)
    wall_e, exact = timed(two, SimConfig(cluster=cfg.cluster, exact=True))
    err = abs(fast.summary["makespan_s"] / exact.summary["makespan_s"] - 1)
    print(f"fast vs exact: 2 steps paper scale: fast {wall_f:.3f} s, exact {wall_e:.2f} s, "
          f"ratio {wall_e / wall_f:,.0f}x (target >= 100x); makespan difference {err:.2e}")


if __name__ == "__main__":
    main()
