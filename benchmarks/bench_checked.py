"""The simulator checked against every shipped pair of real runs: each pair (verl and a policy, traces/runs/) replayed
by `tltsim validate` with its profile, at one machine speed; writes tltsim/analysis/validation/data/checked.csv, which
the report's ranking reads ("checked against a run"), and prints the table.

    python benchmarks/bench_checked.py | tee benchmarks/results/bench_checked.txt

A pair is listed here with the profile its README names; a new shipped pair joins the list and the benchmark is
rerun. Target: every predicted speedup within 10% of the measured one.
"""
from __future__ import annotations

import time
from pathlib import Path

from tltsim.analysis.report.table import format_table
from tltsim.analysis.validation.checked import SHIPPED, check_pairs
from tltsim.core.io import atomic_path

ROOT = Path(__file__).resolve().parents[1]
RUNS, PROFILES = ROOT / "traces" / "runs", ROOT / "traces" / "profiles"
PAIRS = [  # (verl run, policy run, profile), as traces/README.md lists them
    ("real_verl_cpu", "real_tlt_cpu", "real_cpu_profile"),
    ("real_verl_smollm2", "real_tlt_smollm2", "smollm2_cpu_profile"),
    ("real_verl_smollm2_b", "real_tlt_auto_smollm2", "smollm2_cpu_profile"),
    ("real_verl_smollm2_b", "real_das_smollm2", "smollm2_cpu_profile"),
    ("real_verl_smollm2_longtail", "real_tlt_smollm2_longtail", "smollm2_longtail_cpu_profile"),
    ("real_verl_smollm2_longtail", "real_das_smollm2_longtail", "smollm2_longtail_cpu_profile"),
    ("real_verl_smollm2_longtail", "real_das_tlt_smollm2_longtail", "smollm2_longtail_cpu_profile"),
    ("real_verl_smollm2_longtail_interleaved", "real_tlt_smollm2_longtail_interleaved",
     "smollm2_longtail_interleaved_cpu_profile"),
    ("real_verl_smollm2_agentic", "real_tlt_smollm2_agentic", "smollm2_agentic_cpu_profile"),
    ("real_verl_smollm2_sampled", "real_partial_smollm2_sampled", "smollm2_sampled_cpu_profile"),
    ("real_verl_smollm2_sampled", "real_tail_batching_smollm2_sampled", "smollm2_sampled_cpu_profile"),
    ("real_verl_smollm2_sampled", "real_async_smollm2_sampled", "smollm2_sampled_cpu_profile"),
    ("real_verl_smollm2_sampled", "real_async_tlt_smollm2_sampled", "smollm2_sampled_cpu_profile"),
    ("real_verl_smollm2_sampled", "real_migrate_smollm2_sampled", "smollm2_sampled_cpu_profile"),
    ("real_verl_smollm2_repeated", "real_longest_first_smollm2_repeated", "smollm2_repeated_cpu_profile"),
]


def main() -> None:
    t = time.perf_counter()
    pairs = [(RUNS / a, RUNS / b, PROFILES / f"{p}.csv") for a, b, p in PAIRS]
    checks = check_pairs(pairs)
    with atomic_path(SHIPPED) as tmp:
        checks.to_csv(tmp, index=False, float_format="%.6g")
    print(format_table(list(checks.columns), checks.values.tolist()))
    within = (checks["error"].abs() <= 0.10).sum()
    print(f"\n{within} of {len(checks)} predicted speedups within 10% of the measured one (target: all); "
          f"wrote {SHIPPED.relative_to(ROOT)} in {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
