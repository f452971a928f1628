"""Simulator speed on multi-turn trajectories: a Search-R1-sized agentic workload (256 prompts x 8 trajectories a
step, Intern-S1's tool-calling fits, `trace synth agentic`) on 64 H100 (Qwen2.5-7B, TP 4), verl and tlt, beside
the same responses as single turns (each trajectory's tokens as one response, no tools), in one run.

    python benchmarks/bench_agentic.py [--steps N]   # writes nothing; record with: ... | tee benchmarks/results/bench_agentic.txt

Each trajectory's turns are events (a turn's end, a tool's return, a prefill), so a multi-turn step costs the
event-driven executor (tltsim/sim/agentic/) more than a single-turn step costs the fast path's closed form;
the ratio says how much. The same steps by the reference executor (agentic.reference.Run, every row scanned at every
event) give the fast one's speed-up, and on the shipped trace (traces/synthetic/agentic.parquet) the two
executors' makespans are compared.
"""
from __future__ import annotations

import argparse
import platform
import time

from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import Trace, load, synth
from tltsim.trace.schema import TURN_LISTS

SHIPPED = "traces/synthetic/agentic.parquet"


def timed(trace, cfg, policy: str, reference: bool = False) -> tuple[float, dict]:
    t = time.perf_counter()
    sim = Simulator(trace, cfg, make_policy(policy))
    sim.agentic_reference = reference
    res = sim.run()
    return time.perf_counter() - t, res.summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="RL steps simulated (default 5)")
    args = ap.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, one process")
    trace = synth("agentic", steps=args.steps, prompts=256, group=8, max_len=32768, seed=0)
    single = Trace(trace.df.drop(columns=[c for c in (*TURN_LISTS, "turn_gen_s") if c in trace.df]), trace.meta)
    cfg = SimConfig(cluster=ClusterConfig(gpus=64, tp=4, gpu="h100", model="qwen2.5-7b"))
    n = len(trace.df)
    print(f"{n:,} trajectories ({n // args.steps:,} a step), {args.steps} steps, 64 GPUs")
    print(f"{'policy':<6} {'turns':>6} {'wall s':>8} {'s / 100 steps':>14} {'trajectories/s':>15} {'vs single turn':>15} "
          f"{'reference s / 100 steps':>24} {'speed-up':>9}")
    for policy in ("verl", "tlt"):
        wall, summary = timed(trace, cfg, policy)
        wall_1, _ = timed(single, cfg, policy)
        wall_ref, _ = timed(trace, cfg, policy, reference=True)
        print(f"{policy:<6} {summary['turns_per_trajectory']:>6.2f} {wall:>8.2f} {wall / args.steps * 100:>14.1f} "
              f"{n / wall:>15,.0f} {wall / wall_1:>14.1f}x {wall_ref / args.steps * 100:>24.1f} {wall_ref / wall:>8.1f}x")
    print("target: 100 steps in under 2 s (verl), under 4 s (tlt)")
    shipped = load(SHIPPED)
    steps = shipped.df["step"].nunique()
    print(f"{SHIPPED} ({len(shipped.df):,} trajectories, {steps} steps), fast vs reference executor:")
    print(f"{'policy':<6} {'makespan s':>14} {'reference':>14} {'difference':>11}")
    for policy in ("verl", "tlt"):
        _, fast = timed(shipped, cfg, policy)
        _, ref = timed(shipped, cfg, policy, reference=True)
        print(f"{policy:<6} {fast['makespan_s']:>14.6f} {ref['makespan_s']:>14.6f} "
              f"{fast['makespan_s'] / ref['makespan_s'] - 1:>+11.1e}")


if __name__ == "__main__":
    main()
