"""What published suffix-drafting acceptance on RL rollouts says about das's history model (tltsim.drafter.history_quality).

    python docs/investigations/suffix_acceptance.py | tee docs/investigations/suffix_acceptance.txt

(suffix_acceptance.md reads its output.) Seer (arXiv 2511.14617v3, section 4.4.2, Figure 11) gives the mean acceptance
length tau (tokens a verify, the bonus token included) of suffix drafting during a rollout iteration on veRL:
SuffixDecoding without group context (a chain of up to 16) on Moonlight, and Seer's grouped suffix trees (a chain
of up to 8) on Moonlight, Qwen2-VL-72B and Kimi-K2; Table 3 gives each workload's requests, group size, cap and mean
length (`history_quality.SEER_TAU` holds them).

For each published figure: what the history model gives on that workload (`seer_tau`: every response of a group in
flight together, its q from the model, its tokens a verify on the chain, the iteration's tokens over its verifies),
with the constants fitted to real/'s SmolLM2 rows (`fit`) and with the stored ones (`fit_published`: Q_PROMPT to the
ungrouped figure, PER_SIBLING by least squares to the three grouped ones, IN_FLIGHT and H_MAX as the rows fit them).
The lengths are drawn lognormal (`seer_trace`: the spread of math rollouts) to Table 3's mean under its cap; only
the siblings' finish order and the tokens' weights come from them. Then what the two give das's rows of
docs/fidelity.md. Deterministic (seeded draws, the fast path).
"""
from __future__ import annotations

import tltsim.policies.tlt as tlt_policy
from tltsim.config import ClusterConfig, SimConfig
from tltsim.control.strategy import Strategy
from tltsim.drafter import history_quality as hq
from tltsim.drafter.acceptance import AcceptanceModel, invert_quality
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import load


def rollout_tokens_per_s(s: dict) -> float:
    return s["tokens_per_s"] * s["makespan_s"] / s["rollout_s"]


def rows_with(model: hq.HistoryQuality) -> list[tuple[str, float, float]]:
    """das's rows of docs/fidelity.md, run with `model` as das's history model: (row, gain, tau)."""
    real = tlt_policy.HistoryQuality
    tlt_policy.HistoryQuality = lambda: model  # the one place a policy builds its history model
    try:
        out = []
        dapo = load("traces/synthetic/dapo_like.parquet")
        small = ClusterConfig(gpus=8, tp=1, gpu="h100", model="qwen2.5-7b")
        seer = hq.seer_trace(next(f for f in hq.SEER_TAU if f.workload == "Qwen2-VL-72B"), steps=5)
        big = ClusterConfig(gpus=128, tp=8, gpu="h100", model="qwen2-72b")
        for name, trace, cluster, steps, policy, knobs in (
                ("DAS abstract: rollout speedup", dapo, small, "10", "das", {}),
                ("Seer Figure 11: rollout throughput", seer, big, "", "das", {"sd": "learned"}),
                ("Seer Table 4: rollout throughput", seer, big, "", "longest-first+das", {"predictor": "oracle"})):
            cfg = SimConfig(cluster=cluster, steps=steps)
            base = Simulator(trace, cfg, make_policy("verl")).run().summary
            got = Simulator(trace, cfg, make_policy(policy, knobs)).run().summary
            gain = (base["rollout_s"] / got["rollout_s"] if name.startswith("DAS") else
                    rollout_tokens_per_s(got) / rollout_tokens_per_s(base))
            out.append((name, gain, got["mean_accepted"]))
        return out
    finally:
        tlt_policy.HistoryQuality = real


def main() -> None:
    rows_fit, stored, fitted = hq.fit(hq.read_rows()), hq.HistoryQuality(), hq.fit_published()
    print("# Seer Figure 11's tau of suffix drafting beside the history model's on the same workload (Table 3)")
    print(f"# real/'s rows' fit: Q_PROMPT {rows_fit.q_prompt:.5f}  PER_SIBLING {rows_fit.per_sibling:.6f}  IN_FLIGHT "
          f"{rows_fit.in_flight:.5f}  H_MAX {rows_fit.h_max:.1f}")
    print(f"# fit to Seer:       Q_PROMPT {fitted.q_prompt}  PER_SIBLING {fitted.per_sibling}  (IN_FLIGHT, H_MAX as the "
          f"rows fit them)")
    print(f"# stored:            Q_PROMPT {stored.q_prompt}  PER_SIBLING {stored.per_sibling}")
    print(f"{'workload':<14}{'drafter':<30}{'chain':>6}{'tau':>7}{'rows fit':>10}{'err':>8}{'stored':>8}{'err':>8}"
          f"{'q implied':>11}")
    for f in hq.SEER_TAU:
        a, b = hq.seer_tau(rows_fit, f), hq.seer_tau(stored, f)
        drafter = "Seer's grouped suffix trees" if f.grouped else "SuffixDecoding, no group"
        print(f"{f.workload:<14}{drafter:<30}{f.chain:>6}{f.tau:>7.2f}{a:>10.3f}{a / f.tau - 1:>+8.1%}{b:>8.3f}"
              f"{b / f.tau - 1:>+8.1%}{invert_quality(AcceptanceModel(), Strategy.chain(f.chain), f.tau):>11.3f}")
    print()
    print("# das's rows of docs/fidelity.md, their setups as bench_fidelity runs them: rows fit / stored")
    print(f"{'row':<36}{'gain':>8}{'tau':>8}{'gain':>8}{'tau':>8}")
    for (name, g0, t0), (_, g1, t1) in zip(rows_with(rows_fit), rows_with(stored)):
        print(f"{name:<36}{g0:>8.3f}{t0:>8.3f}{g1:>8.3f}{t1:>8.3f}")


if __name__ == "__main__":
    main()
