"""Fit the simulator's history-drafting model to the drafter benchmark's rows, and show it beside them.

    python docs/investigations/history_model_fit.py [ROWS.jsonl] [--speed benchmarks/results/bench_drafters.txt]
    # recorded: ... > docs/investigations/history_model_fit.txt

ROWS (default tltsim/drafter/data/history_rows.jsonl, the rows tltsim ships) are what `benchmarks/bench_drafters.py
--parts acceptance --rows` writes. Printed: the fitted constants of tltsim.drafter.history_quality (all tasks pooled,
the module's IN_FLIGHT and H_MAX; then each task alone) beside the stored ones (Q_PROMPT and PER_SIBLING fitted to
published acceptance instead: suffix_acceptance.py); per (task, group, arrangement, pass, finish rank) the measured q
(each row's tokens per call inverted through the acceptance model at its strategy, mean weighted by calls,
1 a row without a count)
beside the model's; the lookup's share of a target forward per batch beside its fit; and the hybrid's combination rule
(per row the better q of the two drafters) against the speed part's hybrid rows recorded in --speed.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from tltsim.control.strategy import Strategy
from tltsim.drafter import history_quality as hq
from tltsim.drafter.acceptance import AcceptanceModel, invert_quality

ROOT = Path(__file__).resolve().parents[2]  # the repository


def constants(m: hq.HistoryQuality) -> str:
    return (f"Q_PROMPT = {m.q_prompt:.5f}  PER_SIBLING = {m.per_sibling:.5f}  IN_FLIGHT = {m.in_flight:.5f}  "
            f"H_MAX = {m.h_max:.5f}")


def cells(rows: list[dict], model: hq.HistoryQuality) -> pd.DataFrame:
    acc = [r for r in rows if r.get("kind") == "acceptance"]
    df = pd.DataFrame(acc)
    parts = np.array([hq.history_of(r) for r in acc], float)
    df["h"] = model.history(*parts.T)
    df["q"] = [hq.measured_quality(r) for r in acc]
    df["weight"] = hq.weights(acc)
    df["qw"] = df.q * df.weight
    g = df.groupby(["task", "group", "arrangement", "pass", "rank"])
    out = pd.DataFrame({"rows": g.size(), "weight": g.weight.sum(), "h": g.h.mean(), "q": g.qw.sum() / g.weight.sum()})
    out["model q"] = model.quality(out.h)
    out["tokens_per_call"] = g.apply(lambda x: float(np.average(x.tokens_per_call, weights=x.weight)),
                                     include_groups=False)
    am = AcceptanceModel()
    out["model tokens_per_call"] = [am.mean(Strategy.parse(acc[0]["strategy"]), q) for q in out["model q"]]
    return out.round(3)


def hybrid_check(path: Path) -> str:
    """The speed part's rows of `path` (its JSON line): per batch each drafter's q, the rule's, the hybrid's."""
    line = next((x for x in path.read_text().splitlines() if x.startswith('[{"batch"')), None)
    if line is None:
        return f"(no speed rows in {path})"
    am, out = AcceptanceModel(), []
    for b, g in pd.DataFrame(json.loads(line)).groupby("batch"):
        q = {r.drafter: invert_quality(am, Strategy.parse(r.strategy), r.tokens_per_call)
             for r in g.itertuples() if r.drafter}
        rule = float(hq.hybrid(q["suffix"], q["shipped"]))
        out.append({"batch": b, "q shipped": q["shipped"], "q suffix": q["suffix"], "q hybrid (measured)": q["hybrid"],
                    "q hybrid (rule: the better)": rule, "rule / measured - 1": rule / q["hybrid"] - 1})
    return pd.DataFrame(out).round(3).to_string(index=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows", nargs="?", default=str(hq.ROWS))
    ap.add_argument("--speed", default=str(ROOT / "benchmarks" / "results" / "bench_drafters.txt"))
    args = ap.parse_args()
    rows = hq.read_rows(args.rows)
    fitted = hq.fit(rows)
    print(f"# rows: {os.path.relpath(args.rows)}")
    print(f"fitted (all tasks): {constants(fitted)}")
    print(f"stored:             {constants(hq.HistoryQuality())}")
    for task in sorted({r["task"] for r in rows if r.get("kind") == "acceptance"}):
        print(f"fitted ({task}): {constants(hq.fit(rows, task))}")
    print(f"\nlookup fitted: LOOKUP_FRACTION = {hq.fit_lookup(rows):.3e}; stored: {hq.LOOKUP_FRACTION:.3e}")
    lk = pd.DataFrame([r for r in rows if r.get("kind") == "lookup"])
    print(lk[["task", "batch", "iterations", "draft_ms", "target_ms", "lookup/forward"]].to_string(index=False))
    print("\n# measured q (calls-weighted mean over prompts) beside the fitted model's, per finish rank")
    print(cells(rows, fitted).to_string())
    print(f"\n# the hybrid's rule against the speed rows of {os.path.relpath(args.speed)}")
    print(hybrid_check(Path(args.speed)))


if __name__ == "__main__":
    main()
