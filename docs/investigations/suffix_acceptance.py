"""What published suffix-drafting acceptance on RL rollouts says about das's history model (tltsim.drafter.history_quality).

    python docs/investigations/suffix_acceptance.py | tee docs/investigations/suffix_acceptance.txt

(suffix_acceptance.md reads its output.) Seer (arXiv 2511.14617, section 4.4.2, Figure 11) gives the mean acceptance
length tau (tokens a verify, the bonus token included) of suffix drafting during a rollout iteration on veRL:
SuffixDecoding without group context (a chain of up to 16) on Moonlight, and Seer's grouped suffix trees (a chain of
up to 8) on Moonlight, Qwen2-VL-72B and Kimi-K2; Table 3 gives each workload's group size, cap and mean length
(`history_quality.SEER_TAU` holds them).

For each published figure: what the history model gives on that workload (`iteration_tau`: every response of a
group in flight together, its q from the model, its tokens a verify on the chain, the iteration's tokens over its
verifies), with the constants fitted to real/'s SmolLM2 rows and with the stored ones, which this script fits:
Q_PROMPT to the ungrouped figure, PER_SIBLING by least squares to the three grouped ones, IN_FLIGHT and H_MAX as
the rows fit them. The lengths are drawn lognormal (`seer_workload`: sigma 1.08, the spread bench_fidelity
assumes for math rollouts) with the median set to Table 3's mean under its cap; only the siblings' finish order and
the tokens' weights come from them. Then what the two give das's rows of docs/fidelity.md. Deterministic (seeded draws, the
fast path).
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar

import tltsim.policies.tlt as tlt_policy
from tltsim.config import ClusterConfig, SimConfig
from tltsim.control.strategy import Strategy
from tltsim.drafter import history_quality as hq
from tltsim.drafter.acceptance import AcceptanceModel, invert_quality
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import load, synth
from tltsim.trace.synth import lognormal_median

ROWS_FIT = hq.HistoryQuality(0.27778, 0.015592, hq.IN_FLIGHT, hq.H_MAX)  # fit(read_rows()): history_model_fit.txt


def refit() -> hq.HistoryQuality:
    """Q_PROMPT from the ungrouped figure (no history but the request's own), PER_SIBLING least squares on the grouped
    ones."""
    ungrouped = [r for r in hq.SEER_TAU if not r[4]]
    grouped = [r for r in hq.SEER_TAU if r[4]]
    q_prompt = float(np.mean([invert_quality(AcceptanceModel(), Strategy.chain(r[5]), r[6]) for r in ungrouped]))

    def loss(per_sibling: float) -> float:
        m = hq.HistoryQuality(q_prompt, per_sibling, hq.IN_FLIGHT, hq.H_MAX)
        return sum((hq.seer_tau(m, r) - r[6]) ** 2 for r in grouped)

    best = minimize_scalar(loss, bounds=(0.0, 0.1), method="bounded", options={"xatol": 1e-7})
    return hq.HistoryQuality(round(q_prompt, 5), round(float(best.x), 6), hq.IN_FLIGHT, hq.H_MAX)


def rows_with(model: hq.HistoryQuality) -> list[tuple[str, float, float]]:
    """das's rows of docs/fidelity.md, run with `model` as das's history model: (row, gain, tau)."""
    real = tlt_policy.HistoryQuality
    tlt_policy.HistoryQuality = lambda: model  # the one place a policy builds its history model
    try:
        out = []
        dapo = load("traces/synthetic/dapo_like.parquet")
        small = ClusterConfig(gpus=8, tp=1, gpu="h100", model="qwen2.5-7b")
        seer = synth("lognormal", 5, 600, 16, 40960, 0, median=lognormal_median(7615, 40960, hq.SEER_SIGMA),
                     sigma=hq.SEER_SIGMA)
        big = ClusterConfig(gpus=128, tp=8, gpu="h100", model="qwen2-72b")
        for name, trace, cluster, steps, policy, knobs, metric in (
                ("DAS abstract: rollout speedup", dapo, small, "10", "das", {}, "rollout"),
                ("Seer Table 4: rollout throughput", seer, big, "", "longest-first+das", {"predictor": "oracle"},
                 "throughput")):
            cfg = SimConfig(cluster=cluster, steps=steps)
            base = Simulator(trace, cfg, make_policy("verl")).run().summary
            got = Simulator(trace, cfg, make_policy(policy, knobs)).run().summary
            if metric == "rollout":
                gain = base["rollout_s"] / got["rollout_s"]
            else:
                tps = lambda s: s["tokens_per_s"] * s["makespan_s"] / s["rollout_s"]  # noqa: E731
                gain = tps(got) / tps(base)
            out.append((name, gain, got["mean_accepted"]))
        return out
    finally:
        tlt_policy.HistoryQuality = real


def main() -> None:
    stored, fitted = hq.HistoryQuality(), refit()
    print("# Seer Figure 11's tau of suffix drafting beside the history model's on the same workload (Table 3)")
    print(f"# real/'s rows' fit: Q_PROMPT {ROWS_FIT.q_prompt}  PER_SIBLING {ROWS_FIT.per_sibling}  IN_FLIGHT "
          f"{ROWS_FIT.in_flight}  H_MAX {ROWS_FIT.h_max}")
    print(f"# refit to Seer:     Q_PROMPT {fitted.q_prompt}  PER_SIBLING {fitted.per_sibling}  (IN_FLIGHT, H_MAX as the "
          f"rows fit them)")
    print(f"# stored:            Q_PROMPT {stored.q_prompt}  PER_SIBLING {stored.per_sibling}")
    print(f"{'workload':<14}{'drafter':<30}{'chain':>6}{'tau':>7}{'rows fit':>10}{'err':>8}{'stored':>8}{'err':>8}"
          f"{'q implied':>11}")
    for row in hq.SEER_TAU:
        w, *_, grouped, chain, t = row
        a, b = hq.seer_tau(ROWS_FIT, row), hq.seer_tau(stored, row)
        drafter = "Seer's grouped suffix trees" if grouped else "SuffixDecoding, no group"
        print(f"{w:<14}{drafter:<30}{chain:>6}{t:>7.2f}{a:>10.3f}{a / t - 1:>+8.1%}{b:>8.3f}{b / t - 1:>+8.1%}"
              f"{invert_quality(AcceptanceModel(), Strategy.chain(chain), t):>11.3f}")
    print()
    print("# das's rows of docs/fidelity.md, their setups as bench_fidelity runs them: rows fit / stored")
    print(f"{'row':<36}{'gain':>8}{'tau':>8}{'gain':>8}{'tau':>8}")
    for (name, g0, t0), (_, g1, t1) in zip(rows_with(ROWS_FIT), rows_with(stored)):
        print(f"{name:<36}{g0:>8.3f}{t0:>8.3f}{g1:>8.3f}{t1:>8.3f}")


if __name__ == "__main__":
    main()
