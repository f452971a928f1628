"""What bounds the agentic replay's speed? The fast executor profiled on benchmarks/bench_agentic.py's workload.

    python docs/investigations/agentic_speed.py [--steps 10]

bench_agentic's workload (Search-R1-sized: 256 prompts x 8 trajectories a step, Intern-S1's tool-calling fits, on 64
H100 running Qwen2.5-7B at TP 4), verl and tlt: each run once untimed (imports, caches), once timed, once under
cProfile. Prints each run's wall time per 100 steps, its events (turn ends, tool returns and prefills: what the
fast executor's loop steps through), the time per event, and the functions with the most time of their own.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import re
import time

from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import synth

TOP = 12


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="RL steps simulated (default 10)")
    args = ap.parse_args()
    trace = synth("agentic", steps=args.steps, prompts=256, group=8, max_len=32768, seed=0)
    cfg = SimConfig(cluster=ClusterConfig(gpus=64, tp=4, gpu="h100", model="qwen2.5-7b"))
    turns = int(trace.df["turn_response_len"].map(len).sum())
    calls = int(trace.df["tool_latency_s"].map(lambda v: sum(x is not None and x == x for x in v)).sum())
    print(f"{len(trace.df):,} trajectories, {args.steps} steps: {turns:,} turns, {calls:,} tool calls")
    for policy in ("verl", "tlt"):
        Simulator(trace, cfg, make_policy(policy)).run()
        t = time.perf_counter()
        Simulator(trace, cfg, make_policy(policy)).run()
        wall = time.perf_counter() - t
        profile = cProfile.Profile()
        profile.enable()
        Simulator(trace, cfg, make_policy(policy)).run()
        profile.disable()
        stats = pstats.Stats(profile)
        total = stats.total_tt
        print(f"\n{policy}: {wall / args.steps * 100:.1f} s / 100 steps, {wall / (turns + calls) * 1e6:.1f} us a turn "
              f"or tool call; under cProfile {total:.2f} s, {stats.total_calls:,} calls")
        areas: dict[str, float] = {}
        for (path, _, _), (_, _, own, _, _) in stats.stats.items():
            area = "/".join(path.split("/tltsim/", 1)[1].split("/")[:2]) if "/tltsim/" in path else "outside tltsim"
            area = area if "/" in area or area == "outside tltsim" else "tltsim (top level)"
            areas[area] = areas.get(area, 0.0) + own
        print("own time by where: " + ", ".join(f"{a} {t / total:.0%}" for a, t in
                                                 sorted(areas.items(), key=lambda kv: -kv[1]) if t / total >= 0.005))
        print(f"{'own s':>7} {'share':>6} {'calls':>10}  function")
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:TOP]
        for (path, line, name), (_, calls_n, own, _, _) in rows:
            where = path.split("/tltsim/", 1)[-1] if "/tltsim/" in path else path.rsplit("/", 1)[-1]
            name = re.sub(r" at 0x[0-9a-f]+", "", name)  # a built-in's address: not the same from run to run
            print(f"{own:>7.3f} {own / total:>6.1%} {calls_n:>10,}  {where}:{line}({name})")


if __name__ == "__main__":
    main()
