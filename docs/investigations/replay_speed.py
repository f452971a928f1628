"""What bounds the replay's speed? The fast executors profiled on the workloads of benchmarks/bench_sim.py (single
turn) and benchmarks/bench_agentic.py (multi-turn).

    python docs/investigations/replay_speed.py [--steps 10]

Single turn: bench_sim's paper scale (Qwen2.5-7B on 64 H100 at TP 4, 64 prompts x 8 a step: 16 engines of 32
responses) and its large case (1,024 GPUs, 2,048 prompts x 8 a step: 256 engines of 64), verl. Multi-turn:
bench_agentic's workload (256 prompts x 8 trajectories a step, Intern-S1's tool-calling fits, on the paper-scale
cluster), verl and tlt. Each case is run once untimed (imports, caches), once timed, once timed with the garbage
collector at Python's default threshold (a run raises it: tltsim.sim.simulator.fewer_collections) and once under
cProfile; it prints the wall times per 100 steps and per unit of work (an engine's rollout of a step, single turn; a
turn or tool call, multi-turn), the profile's own time by where it is spent, and the functions with the most of it.
cProfile charges every Python call a fixed cost, so code of many small calls shows larger in its shares than it
runs.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import re
import time
from pathlib import Path

import tltsim
from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim import simulator
from tltsim.sim.simulator import Simulator
from tltsim.trace import synth

TOP = 10
PYTHON_DEFAULT = gc.get_threshold()[0]  # the collector's threshold outside a run, which a run raises
PACKAGE = str(Path(tltsim.__file__).resolve().parent) + "/"  # its files' paths in the profile begin so


def cluster(gpus: int) -> SimConfig:
    return SimConfig(cluster=ClusterConfig(gpus=gpus, tp=4, gpu="h100", model="qwen2.5-7b"))


def profile_case(label: str, trace, cfg: SimConfig, policy: str, steps: int, units: int, unit: str) -> None:
    Simulator(trace, cfg, make_policy(policy)).run()
    t = time.perf_counter()
    Simulator(trace, cfg, make_policy(policy)).run()
    wall = time.perf_counter() - t
    young, simulator.GC_YOUNG = simulator.GC_YOUNG, PYTHON_DEFAULT
    t = time.perf_counter()
    Simulator(trace, cfg, make_policy(policy)).run()
    wall_default = time.perf_counter() - t
    simulator.GC_YOUNG = young
    profile = cProfile.Profile()
    profile.enable()
    Simulator(trace, cfg, make_policy(policy)).run()
    profile.disable()
    stats = pstats.Stats(profile)
    total = stats.total_tt
    print(f"\n{label}, {policy}: {wall / steps * 100:.2f} s / 100 steps, {len(trace.df) / wall:,.0f} responses/s, "
          f"{wall / units * 1e6:.1f} us {unit}; {wall_default / steps * 100:.2f} s / 100 steps at Python's default "
          f"garbage-collector threshold; under cProfile {total:.2f} s, {stats.total_calls:,} calls")
    areas: dict[str, float] = {}
    for (path, _, _), (_, _, own, _, _) in stats.stats.items():
        area = "/".join(path[len(PACKAGE):].split("/")[:2]) if path.startswith(PACKAGE) else "outside tltsim"
        area = area if "/" in area or area == "outside tltsim" else "tltsim (top level)"
        areas[area] = areas.get(area, 0.0) + own
    print("own time by where: " + ", ".join(f"{a} {t / total:.0%}" for a, t in
                                             sorted(areas.items(), key=lambda kv: -kv[1]) if t / total >= 0.005))
    print(f"{'own s':>7} {'share':>6} {'calls':>10}  function")
    for (path, line, name), (_, calls, own, _, _) in sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:TOP]:
        where = path[len(PACKAGE):] if path.startswith(PACKAGE) else path.rsplit("/", 1)[-1]
        name = re.sub(r" at 0x[0-9a-f]+", "", name)  # a built-in's address: not the same from run to run
        print(f"{own:>7.3f} {own / total:>6.1%} {calls:>10,}  {where}:{line}({name})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="RL steps of the agentic and large cases (default 10)")
    args = ap.parse_args()
    paper = synth("dapo", steps=100, prompts=64, group=8, max_len=8192, seed=0)
    profile_case("single turn, paper scale (16 engines)", paper, cluster(64), "verl", 100, 100 * 16,
                 "an engine's rollout")
    large = synth("dapo", steps=args.steps, prompts=2048, group=8, max_len=8192, seed=0)
    profile_case("single turn, large (256 engines)", large, cluster(1024), "verl", args.steps, args.steps * 256,
                 "an engine's rollout")
    agentic = synth("agentic", steps=args.steps, prompts=256, group=8, max_len=32768, seed=0)
    turns = int(agentic.df["turn_response_len"].map(len).sum())
    calls = int(agentic.df["tool_latency_s"].map(lambda v: sum(x is not None and x == x for x in v)).sum())
    print(f"\nagentic: {len(agentic.df):,} trajectories, {args.steps} steps: {turns:,} turns, {calls:,} tool calls")
    for policy in ("verl", "tlt"):
        profile_case("agentic (16 engines)", agentic, cluster(64), policy, args.steps, turns + calls,
                     "a turn or tool call")


if __name__ == "__main__":
    main()
