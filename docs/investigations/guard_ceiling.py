"""How often a window of a run's speculative rewards, summarized by its median or by its mean, falls below
plain decoding's rate at the same batch: whether the guard's estimate would have refused a batch where
speculation was the faster.

    python docs/investigations/guard_ceiling.py traces/runs/real_tlt_smollm2_longtail_interleaved

(guard_ceiling.md reads its output on the shipped long-tail runs, guard_ceiling.txt.)

Reads a run's iterations frame as it was recorded. Per batch size: plain decoding's rate (the batch over the
median seconds of its plain iterations) and speculation's delivered rate (its tokens over its seconds), the
gains per speculative iteration, and, sliding the guard's window over the speculative iterations' rewards
(tokens / seconds, in their order), the share of windows whose median and whose mean lie below plain's rate.
The windows are those the run measured, under the guard it ran with; this reads them, it does not re-run it.

Where the decode time went: each batch's share of the run's decode seconds and the speculative share of
that batch's seconds; and the guard's ceiling, the decode seconds had every token at each batch come at the
faster of the two rates measured there (plain's median rate, speculation's delivered rate). The ceiling
bounds what a better guard could save with this drafter on this device; only a longer accepted length or a
cheaper verify lifts it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from tltsim.control.tuner import RewardWindow
from tltsim.core.records import Result


def windows_below(rewards: np.ndarray, plain: float, window: int) -> tuple[float, float]:
    """Share of the sliding windows (the guard's own RewardWindow, after each reward) whose median, and whose
    mean, is below `plain`."""
    w, below = RewardWindow(window), []
    for reward in rewards:
        w.add(float(reward))
        below.append((w.median() < plain, w.mean() < plain))
    return tuple(float(x) for x in np.mean(below, axis=0))


def decoding(iterations: pd.DataFrame) -> pd.DataFrame:
    """A run's decode iterations, plain and speculative."""
    return iterations[iterations["mode"].isin(["decode", "spec_decode"])]


def batches(decoding: pd.DataFrame, max_batch: int):
    """(batch, its iterations, the plain ones, the speculative ones) for each batch size up to `max_batch` where
    the run decoded both ways, in order."""
    for b, g in decoding[decoding["batch_size"] <= max_batch].groupby("batch_size", sort=True):
        plain, spec = g[g["mode"] == "decode"], g[g["mode"] == "spec_decode"]
        if not (plain.empty or spec.empty):
            yield b, g, plain, spec


def table(iterations: pd.DataFrame, window: int, max_batch: int) -> pd.DataFrame:
    rows = []
    d = decoding(iterations)
    total_s = d["wall_s"].sum()
    for b, g, plain, spec in batches(d, max_batch):
        plain_rate = b / plain["wall_s"].median()
        rewards = (spec["tokens"] / spec["wall_s"]).to_numpy()
        gains = (spec["tokens"] / b).to_numpy()
        median_below, mean_below = windows_below(rewards, plain_rate, window)
        spec_rate = spec["tokens"].sum() / spec["wall_s"].sum()
        rows.append({"batch": int(b), "plain_tok_s": plain_rate, "spec_tok_s": spec_rate,
                     "time_share": g["wall_s"].sum() / total_s, "spec_time_share": spec["wall_s"].sum() / g["wall_s"].sum(),
                     "ceiling_s": g["tokens"].sum() / max(plain_rate, spec_rate), "seconds": g["wall_s"].sum(),
                     "spec_iters": len(spec), "gain_1_share": float(np.mean(gains <= 1.0)),
                     "gain_max_share": float(np.mean(gains >= gains.max())), "median_below": median_below,
                     "mean_below": mean_below})
    return pd.DataFrame(rows)


def run_parser(doc: str) -> argparse.ArgumentParser:
    """The parser of a benchmark that reads one recorded run: its directory and the largest batch to show."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a recorded run directory (tltsim real run -o DIR)")
    ap.add_argument("--max-batch", type=int, default=8)
    return ap


def load_run(run: Path, prog: str) -> Result | None:
    """The recorded run in `run`, or None after one line on stderr saying what is missing."""
    if not (run / "iterations.parquet").is_file():
        print(f"{prog}: {run} has no iterations.parquet; give a directory `tltsim real run -o` wrote",
              file=sys.stderr)
        return None
    return Result.load(run)


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__)
    ap.add_argument("--window", type=int, default=8, help="the guard's window (SpeculationGuard's default: 8)")
    args = ap.parse_args(argv)
    result = load_run(args.run, "guard_ceiling")
    if result is None:
        return 2
    out = table(result.iterations, args.window, args.max_batch)
    print(f"run: {args.run}  window: {args.window}")
    print("gain_1_share: speculative iterations that gained one token a row; gain_max_share: the most a row gained")
    print("median_below / mean_below: share of windows whose median / mean reward is below plain's rate")
    print("time_share: the batch's share of all decode seconds; spec_time_share: speculative share of the batch's")
    print(out.drop(columns=["ceiling_s", "seconds"]).to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    seconds, ceiling = out["seconds"].sum(), out["ceiling_s"].sum()
    print(f"decode seconds at these batches: {seconds:.1f}; at the faster rate at every batch (the guard's ceiling): "
          f"{ceiling:.1f}, {seconds / ceiling:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
