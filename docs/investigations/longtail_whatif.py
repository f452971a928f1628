"""What would TLT have made of a real verl run's responses on this machine, with a better drafter?

    python docs/investigations/longtail_whatif.py [--verl RUN] [--tlt RUN] [--profile PROFILE.csv] [--accepted A,B,..]

The simulator replays the verl run's responses (every response on the worker that served it, as `tltsim validate`
does) under tlt with the tlt run's knobs, on the cost model fitted from PROFILE.csv, once with the drafter the tlt
run measured (its accepted length per step) and once for each accepted length A (tokens per target call of chain
4_1_4, the same at every step); and the same with speculation from the first token (`sd=always`). The speedups are
over the replayed verl run, both at one machine speed (no drift). It answers: what drafter does a win need here,
and does the switch or the per-batch cost of verifying hold it back? Recorded: longtail_whatif.txt, read by
longtail_whatif.md.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from tltsim.analysis.validation.validate import measured_qualities, recorded_knobs, replay
from tltsim.control import Strategy
from tltsim.cost.profiled import Profiled
from tltsim.core.records import Result
from tltsim.drafter.acceptance import AcceptanceModel, invert_quality
from tltsim.sim.speculation import speculative_iteration_time
from tltsim.analysis.report.table import format_table

CHAIN = Strategy.parse("4_1_4")


def speculation_rates(cost, batches=(1, 2, 4, 8), context=600, accepted=(1.8, 2.2, 2.6)) -> list[list]:
    """Per batch, plain tokens/s and a 4_1_4 iteration's tokens/s at each accepted length, at `context` tokens a
    row: the cost model's view of where speculation pays."""
    rows = []
    for b in batches:
        plain = b / cost.decode_time(b, b * context)
        spec_s = speculative_iteration_time(cost, b, CHAIN, b * context)
        rows.append([b, plain, *[b * a / spec_s / plain for a in accepted]])
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verl", default="traces/runs/real_verl_smollm2_longtail")
    ap.add_argument("--tlt", default="traces/runs/real_tlt_smollm2_longtail")
    ap.add_argument("--profile", default="traces/profiles/smollm2_longtail_cpu_profile.csv")
    ap.add_argument("--accepted", default="1.8,2.0,2.2,2.4,2.6,3.0")
    args = ap.parse_args(argv)
    cost = Profiled.fit(args.profile)
    tlt = Result.load(args.tlt)
    knobs = recorded_knobs(tlt.config)
    steps = sorted(int(s) for s in tlt.steps["step"])
    model = AcceptanceModel()
    _, verl = replay(args.verl, cost)
    base = verl.summary["makespan_s"]
    drafters = [("as the tlt run measured", measured_qualities(tlt))]
    for a in (float(x) for x in args.accepted.split(",")):
        drafters.append((f"{a:.1f} a call", {s: invert_quality(model, CHAIN, a) for s in steps}))
    rows = []
    for label, qualities in drafters:
        row = [label, float(np.mean([model.mean(CHAIN, q) for q in qualities.values()]))]
        for variant in ({}, {"sd": "always"}):
            _, pred = replay(args.verl, cost, policy="tlt", knobs={**knobs, **variant}, qualities=qualities)
            row += [base / pred.summary["makespan_s"], pred.summary.get("sd_share", 0.0)]
        rows.append(row)
        print(f"  {label}", file=sys.stderr, flush=True)
    print(f"# python docs/investigations/longtail_whatif.py --verl {args.verl} --tlt {args.tlt} --profile {args.profile} "
          f"--accepted {args.accepted}")
    print(f"# tlt's knobs (the tlt run's): {knobs}; verl replayed: makespan {base:.1f} s, rollout share "
          f"{verl.summary['rollout_s'] / base:.2f}")
    print("\npredicted speedup over verl on the verl run's responses (sd_share: share of decode time speculating)")
    print(format_table(["drafter", "accepted (4_1_4)", "tlt", "sd_share", "sd from the first token", "sd_share"],
                       rows))
    accepted = (1.8, 2.2, 2.6)
    print("\nthe cost model's speculation at 600 tokens a row: a 4_1_4 iteration's tokens/s over plain decoding's")
    print(format_table(["batch", "plain tok/s", *[f"x at {a}" for a in accepted]],
                       speculation_rates(cost, accepted=accepted)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
