"""Would longer history drafts pay on the long tail? Tokens a call of the history drafter, by chain depth and batch,
on a run's recorded answers, as a run replaying them (`tltsim real run --answers`) would accept them.

    python docs/investigations/history_depth.py [--run traces/runs/real_verl_smollm2_longtail] [--depths 4,8,12,16]

SuffixDecoding drafts long where its match is long, and a capped long-tail answer repeats itself (59% of its
tokens repeat a 4-gram: draft_acceptance.md), so a deeper chain than 4_1_4 might take whole repeated
stretches in one call. This replays the run's rollouts with no model: each step, each engine's rows (trace.parquet's
`engine`) advance together, every iteration speculative; each row drafts `depth` tokens from its engine's
real.drafters.suffix history (its prompt, its in-flight siblings, earlier steps' responses of every engine, as a run feeds
it), padded to `depth` as the engine pads it (real.drafters.suffix.chain), and keeps the drafts that equal its recorded
continuation (real.engine.sampling.recorded_table), plus one: the replay's acceptance rule (real.engine.sampling.verify_chosen),
which needs no target. Printed: tokens per call (accepted + 1) overall and at each batch size (rows still
running), and row-iterations at each. What it leaves out: the cost of a verify, which grows with depth (on a
CPU at batch 4-8 a verify of 5 tokens a row already costs 1.4-1.8x a decode step), so a depth pays only where its
tokens a call grow faster than that cost. Recorded: history_depth.txt, read by history_depth.md.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

import model_free_and_switch  # beside this script: the replay of recorded answers with a drafter and no model
from tltsim.analysis.report.table import format_table


def replay(rows: pd.DataFrame, depth: int) -> dict[int, list[int]]:
    """Tokens per call of every row-iteration, by the batch it ran at, of `rows` (step, engine, prompt, tokens)
    replayed step by step with history drafts of `depth` tokens (module docstring): model_free_and_switch.py's
    replay with das's suffix drafter."""
    return model_free_and_switch.replay(rows, "suffix", depth)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="traces/runs/real_verl_smollm2_longtail")
    ap.add_argument("--model", default="smollm2-135m", help="whose tokenizer rebuilds the prompts")
    ap.add_argument("--depths", default="4,8,12,16")
    args = ap.parse_args(argv)
    rows = model_free_and_switch.recorded_rows(args.run, args.model)
    depths = [int(d) for d in args.depths.split(",")]
    by_depth = {d: replay(rows, d) for d in depths}
    batches = sorted({b for calls in by_depth.values() for b in calls})
    header = ["depth", "all"] + [f"b{b}" for b in batches]
    table = [[d, round(float(np.mean([x for v in calls.values() for x in v])), 3)]
             + [round(float(np.mean(calls[b])), 2) if calls.get(b) else None for b in batches]
             for d, calls in by_depth.items()]
    print(f"# {args.run}: {len(rows)} answers, {int(rows['tokens'].map(len).sum())} tokens; tokens per call "
          f"(accepted history drafts + 1), overall and at each batch (b<k>: k rows running)")
    print(format_table(header, table))
    print("# row-iterations at each batch")
    print(format_table(["depth", "all"] + header[2:],
                       [[d, sum(map(len, calls.values()))] + [len(calls.get(b, [])) for b in batches]
                        for d, calls in by_depth.items()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
