"""Why a fixed switch threshold is wrong on some clusters: tlt (threshold 32), tlt at threshold 64, sd-always and
tlt-auto (the learned switch) on two clusters, from one command (docs/design.md#why-a-fixed-threshold-is-wrong-on-some-clusters).

    PYTHONPATH=$PWD python benchmarks/bench_switch.py | tee benchmarks/results/bench_switch.txt

The trace is synthesized here (no public 16k-token GRPO length log ships with tltsim): the lognormal family with
traces/synthetic/lognormal_drift.parquet's parameters (median 2000, sigma 0.8, rho 0.5, drift 0.05, cap 16384), 16 prompts
x 8 samples a step, 10 steps, seed 0: 128 responses a step, so on 8 GPUs with TP 4 two engines of 64 requests
each. Qwen2.5-7B (the default model) on 8 H100s, where speculation pays at every batch an engine runs, and on 8
H20s, where drafting is dear and it pays only at small batches; and on the H100s with a drafter so weak (quality 0:
--knob q_start=0.0 --knob q_max=0.0) that every verify loses. Makespans are simulated seconds (fast path);
the speedup is over verl on the same cluster. Deterministic: the same code gives the same output.
"""
from __future__ import annotations

from tltsim.analysis.report.table import format_table
from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import synth

RUNS = [("verl", "verl", {}), ("tlt", "tlt", {}), ("tlt --knob threshold=64", "tlt", {"threshold": 64}),
        ("sd-always", "sd-always", {}), ("tlt-auto", "tlt-auto", {})]
WEAK = {"q_start": 0.0, "q_max": 0.0}  # a drafter whose every draft is wrong: each verify gains one token, at a cost
SCENARIOS = {"8 x H100, TP 4": (ClusterConfig(gpus=8, tp=4, gpu="h100"), {}),
             "8 x H20, TP 4": (ClusterConfig(gpus=8, tp=4, gpu="h20"), {}),
             "8 x H100, weak drafter": (ClusterConfig(gpus=8, tp=4, gpu="h100"), WEAK)}


def main() -> None:
    trace = synth("lognormal", steps=10, prompts=16, group=8, max_len=16384, seed=0, median=2000, drift=0.05)
    rows = []
    for cluster_name, (cluster, world) in SCENARIOS.items():
        cfg = SimConfig(cluster=cluster)
        base = None
        for label, policy, knobs in RUNS:
            knobs = {**knobs, **world} if policy != "verl" else knobs
            s = Simulator(trace, cfg, make_policy(policy, knobs)).run().summary
            base = base or s["makespan_s"]
            learned = f"{s['sd_threshold']} ({', '.join(s['sd_buckets']) or 'none'})" if "sd_threshold" in s else ""
            rows.append([cluster_name, label, s["makespan_s"], base / s["makespan_s"], s["sd_share"], learned])
    print(f"# trace: synth lognormal, 10 steps x 16 prompts x 8, cap 16384, seed 0 "
          f"({len(trace.df) // 10} responses a step, 64 per engine)")
    print(format_table(["cluster", "policy", "makespan_s", "speedup", "sd_share", "learned threshold (buckets)"],
                       rows))


if __name__ == "__main__":
    main()
