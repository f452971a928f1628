"""Does replaying each response at its own acceptance predict the shipped real pairs better than one quality a step?

    python docs/investigations/row_quality.py

For every shipped pair of real runs (a verl run and a speculative one, each with the profile it is validated
against), `tltsim validate`'s replay two ways, with `--speed`'s per-step scaling of the profile:

- each row its own: the replay `tltsim validate` runs, every response drafted for at the quality its response
  accepted in the run (`tltsim.analysis.validation.work_domain.request_acceptance`);
- one quality a step: every row of a step at the step's quality (the replay before per-response qualities),
  through the what-if path of `replay` with the run's own knobs and per-step qualities.

Per pair: the speedup measured and as each replay predicts it, and the tokens each side emitted while a single
row ran (the tail that rows falling behind make). No timing is taken: the replays are deterministic, so this
records the simulator, not the machine. Recorded: row_quality.txt, read by row_quality.md.
"""
from __future__ import annotations

from pathlib import Path

from tltsim.analysis.report.table import format_table
from tltsim.analysis.validation.validate import measured_qualities, recorded_knobs, replay
from tltsim.analysis.validation.work_domain import request_acceptance, tokens_alone
from tltsim.cost.profiled import Profiled
from tltsim.core.records import Result

TRACES = Path(__file__).resolve().parents[2] / "traces"
PAIRS = [  # (baseline run, speculative run, profile), as traces/README.md lists them
    ("real_verl_smollm2_longtail_interleaved", "real_tlt_smollm2_longtail_interleaved",
     "smollm2_longtail_interleaved_cpu_profile"),
    ("real_verl_smollm2_longtail_interleaved", "real_tlt_smollm2_longtail_interleaved", "smollm2_longtail_cpu_profile"),
    ("real_verl_smollm2_longtail", "real_tlt_smollm2_longtail", "smollm2_longtail_cpu_profile"),
    ("real_verl_smollm2_longtail", "real_das_smollm2_longtail", "smollm2_longtail_cpu_profile"),
    ("real_verl_smollm2_longtail", "real_das_tlt_smollm2_longtail", "smollm2_longtail_cpu_profile"),
    ("real_verl_smollm2", "real_tlt_smollm2", "smollm2_cpu_profile"),
    ("real_verl_cpu", "real_tlt_cpu", "real_cpu_profile"),
]


def main() -> None:
    rows = []
    for base, spec, profile in PAIRS:
        cost = Profiled.fit(TRACES / "profiles" / f"{profile}.csv")
        run = Result.load(TRACES / "runs" / spec)
        _, verl = replay(TRACES / "runs" / base, cost, speed=True)
        _, own = replay(TRACES / "runs" / spec, cost, speed=True)
        _, alike = replay(TRACES / "runs" / spec, cost, speed=True, policy=run.config.get("policy"),
                          knobs=recorded_knobs(run.config), qualities=measured_qualities(run))
        measured = Result.load(TRACES / "runs" / base).summary["makespan_s"] / run.summary["makespan_s"]
        own_x, alike_x = (verl.summary["makespan_s"] / r.summary["makespan_s"] for r in (own, alike))
        spread = request_acceptance(run)["accepted"]
        rows.append([spec, profile, f"{spread.min():.2f}-{spread.max():.2f}", f"{measured:.3f}",
                     f"{own_x:.3f} ({own_x / measured - 1:+.1%})", f"{alike_x:.3f} ({alike_x / measured - 1:+.1%})",
                     tokens_alone(run), tokens_alone(own), tokens_alone(alike)])
    print(format_table(["run", "profile", "accepted per response", "speedup measured", "predicted, each row its own",
                        "predicted, one quality a step", "tokens alone: run", "each row its own",
                        "one quality a step"], rows))


if __name__ == "__main__":
    main()
