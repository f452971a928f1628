"""Whether one FLOPs utilisation of the update phase puts veRL's step at every published rollout share: the
roofline's `train_mfu` as it ships, and refitted so that RollPacker's Table 1 setup comes out at its 72% rollout;
beside it, the other simple mend, a fixed cost every step (a calibration's `other_s`), fitted the same way.

    python docs/investigations/update_phase.py | tee docs/investigations/update_phase.txt

(update_phase.md reads its output.) For each of the two values, simulated veRL steps on the setups whose rollout
share a source publishes, and TLT's end-to-end speedup over veRL on the Intern-S1 mixture, which every other cost
of the step dilutes:
- RollPacker (NSDI '26), Table 1, Math: Qwen2.5-14B/16k (the qwen3-14b preset, 14.8B against 14.7B parameters)
  at TP 2, 128 prompts x 8 on 32 H800s (the h100 preset), lengths drawn as benchmarks/bench_fidelity.py draws them
  (lognormal, median 450, sigma 1.08): 72% rollout;
- NeMo-RL's speculative rollouts (arXiv 2604.26779), as summaries give its setup: Qwen3-8B on 32 GB200s (the b200
  preset) at TP 1, the shipped DAPO-like trace: generation 65-72% of a synchronous step;
- docs/design.md#the-problem-in-numbers: production traces of a 32B model, 128 GPUs, 85% rollout; assumed:
  Qwen2.5-32B on H100s at TP 4 on the shipped Intern-S1 mixture (production math rollouts), its first 4 steps;
- TLT's abstract: over 1.7x end-to-end over veRL; Qwen2.5-32B (TP 4) and Llama-3.3-70B (TP 8) on 64 H100s,
  the Intern-S1 mixture's first 4 steps.
Each refit is a bisection to RollPacker's share; deterministic (seeded traces, the fast path).
"""
from __future__ import annotations

from dataclasses import replace

from tltsim.config import ClusterConfig, SimConfig
from tltsim.cost.calibrated import PhaseCalibration
from tltsim.cost.roofline import CostParams
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import load, synth

DAPO = "traces/synthetic/dapo_like.parquet"
INTERN = "traces/synthetic/intern_s1_mixture.parquet"
ROLLPACKER = 0.72  # Table 1, Math: veRL's rollout share of a step


def summary(trace, cluster: ClusterConfig, steps: str, mend: tuple[float, float], policy: str = "verl") -> dict:
    """The run's summary with the update's utilisation and a fixed cost a step, `mend` = (train_mfu, other_s)."""
    mfu, fixed = mend
    cfg = SimConfig(cluster=cluster, steps=steps, cost=replace(CostParams(), train_mfu=mfu),
                    calibration=PhaseCalibration(other_s=fixed))
    return Simulator(trace, cfg, make_policy(policy)).run().summary


def bisect(share, lo: float, hi: float, rising: bool = True) -> float:
    """The value in [lo, hi] at which `share`, rising with it (or falling), is RollPacker's."""
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (share(mid) < ROLLPACKER) == rising else (lo, mid)
    return (lo + hi) / 2


def main() -> None:
    rollpacker = synth("lognormal", 10, 128, 8, 16384, 0, median=450, sigma=1.08)
    rp = ClusterConfig(gpus=32, tp=2, gpu="h100", model="qwen3-14b")
    shipped = CostParams().train_mfu
    fitted = round(bisect(lambda m: summary(rollpacker, rp, "", (m, 0.0))["rollout_share"], 0.01, shipped), 4)
    fixed = round(bisect(lambda x: summary(rollpacker, rp, "", (shipped, x))["rollout_share"], 0, 1000, False), 1)
    dapo, intern = load(DAPO), load(INTERN)
    shares = [("RollPacker Table 1, 14B/16k, 32 GPUs", "0.72", rollpacker, rp, ""),
              ("NeMo-RL, Qwen3-8B, 32 GB200s, DAPO-like", "0.65-0.72", dapo,
               ClusterConfig(gpus=32, tp=1, gpu="b200", model="qwen3-8b"), "0:10"),
              ("32B production, 128 GPUs, Intern-S1 mixture", "0.85", intern,
               ClusterConfig(gpus=128, tp=4, gpu="h100", model="qwen2.5-32b"), "0:4")]
    speedups = [("TLT, Qwen2.5-32B, TP 4, 64 H100s", ClusterConfig(gpus=64, tp=4, gpu="h100", model="qwen2.5-32b")),
                ("TLT, Llama-3.3-70B, TP 8, 64 H100s", ClusterConfig(gpus=64, tp=8, gpu="h100", model="llama-3.3-70b"))]
    values = [("shipped", (shipped, 0.0)), (f"mfu {fitted}", (fitted, 0.0)), (f"+{fixed} s", (shipped, fixed))]
    print(f"train_mfu: as shipped {shipped}, fitted to RollPacker's Table 1 share {fitted}; or, at {shipped}, a "
          f"fixed cost of {fixed} s a step fitted to it")
    print()
    head = " ".join(f"{v:>10}" for v, _ in values)
    print(f"{'veRL rollout share of a step':45s} {'published':>10s} {head}")
    for name, published, trace, cluster, steps in shares:
        got = [summary(trace, cluster, steps, m)["rollout_share"] for _, m in values]
        print(f"{name:45s} {published:>10s} " + " ".join(f"{g:10.3f}" for g in got))
    print()
    print(f"{'end-to-end speedup over veRL':45s} {'published':>10s} {head}")
    for name, cluster in speedups:
        makespan = {(p, v): summary(intern, cluster, "0:4", m, p)["makespan_s"]
                    for p in ("verl", "tlt") for v, m in values}
        got = [makespan["verl", v] / makespan["tlt", v] for v, _ in values]
        print(f"{name:45s} {'> 1.7':>10s} " + " ".join(f"{g:10.3f}" for g in got))


if __name__ == "__main__":
    main()
