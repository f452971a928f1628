"""The guard's trial on a recorded run: how many iterations decided each refusal, and what a trial would
have delivered on the run's own speculative rewards.

    python docs/investigations/guard_refusals.py traces/runs/real_das_tlt_smollm2_longtail

(the three shipped long-tail runs' output: guard_refusals.txt, read by guard_refusals.md)

Reads a run's iterations frame as it was recorded. Part 1 replays each worker's iterations, in order, into a
SpeculationGuard judging after every iteration (trial=1: `guard_trial` 1, the rule of a run that records no
`guard_trial`), a rollout per step, and counts the refusals (a speculative iteration after which the guard refuses) by the
iterations in the window that decided them. The replay's reward leaves the drafter's catch-up in (the frame
does not record it), so it is checked against the run: the share of iterations after the switch fired where
the replayed guard's answer (speculate or not) is what the run did.

Part 2, per batch size: the tokens per second a guard with each trial would deliver there, fed in turn the
run's speculative rewards at that batch in their recorded order and its plain iterations' seconds, over as
many iterations as the run decoded there, each worker's in turn (a counterfactual: the run's rewards did not
depend on the guard's choices, which holds for the target's tokens but not for a history drafter's history).
Beside it, plain decoding's and speculation's delivered rates there.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from guard_ceiling import batches, decoding, load_run, run_parser
from tltsim.control import SpeculationGuard


def with_rewards(iterations: pd.DataFrame) -> pd.DataFrame:
    """A run's decode iterations with the guard's reward (tokens gained a second) on speculative ones."""
    d = decoding(iterations).copy()
    d["reward"] = d["accepted"] * d["batch_size"] / d["wall_s"]
    return d


def replay_refusals(d: pd.DataFrame) -> tuple[pd.Series, float]:
    """Refusals by the window count that decided them, and the replay's agreement with the run."""
    decided, agree, n = [], 0, 0
    for _, w in d.groupby("worker", sort=True):
        guard = SpeculationGuard(trial=1)
        in_window: dict[int, int] = {}  # batch -> speculative iterations in the guard's window there
        for _, s in w.groupby("step", sort=True):
            guard.begin_rollout()
            switched = False
            for b, mode, seconds, reward in s[["batch_size", "mode", "wall_s", "reward"]].itertuples(index=False):
                switched |= mode == "spec_decode"
                if switched:
                    agree += guard.pays(b) == (mode == "spec_decode")
                    n += 1
                if mode == "spec_decode":
                    fresh = not guard.tried(b)  # observe_spec starts a fresh window
                    guard.observe_spec(b, reward)
                    in_window[b] = 1 if fresh else min(in_window[b] + 1, guard.window)
                    if not guard.pays(b):
                        decided.append(in_window[b])
                else:
                    guard.observe_plain(b, seconds)
    counts = pd.Series(decided, dtype=int).value_counts().sort_index()
    return counts, agree / max(n, 1)


def delivered(spec: np.ndarray, plain_s: np.ndarray, batch: int, iterations: int, trial: int) -> float:
    """Tokens per second at `batch` of a guard with `trial`, fed the speculative iterations `spec` (rows of
    tokens gained, seconds) and plain iterations' seconds `plain_s` in turn, each cycled."""
    guard, specs, plains = SpeculationGuard(trial=trial), itertools.cycle(spec), itertools.cycle(plain_s)
    guard.observe_plain(batch, float(plain_s[0]))
    tokens = seconds = 0.0
    for _ in range(iterations):
        if guard.pays(batch):
            gained, s = next(specs)
            guard.observe_spec(batch, gained / s)
        else:
            gained, s = batch, next(plains)
            guard.observe_plain(batch, s)
        tokens, seconds = tokens + gained, seconds + s
    return tokens / seconds


def trial_table(d: pd.DataFrame, trials: list[int], max_batch: int) -> pd.DataFrame:
    rows = []
    for b, g, plain, spec in batches(d, max_batch):
        row = {"batch": int(b), "iterations": len(g), "plain_tok_s": b / plain["wall_s"].median(),
               "spec_tok_s": (spec["accepted"] * b).sum() / spec["wall_s"].sum()}
        pairs = np.column_stack([spec["accepted"] * b, spec["wall_s"]])
        for t in trials:
            row[f"trial_{t}"] = delivered(pairs, plain["wall_s"].to_numpy(), int(b), len(g), t)
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = run_parser(__doc__)
    ap.add_argument("--trials", default="1,2,4,8", help="trial lengths to compare (comma-separated)")
    args = ap.parse_args(argv)
    result = load_run(args.run, "guard_refusals")
    if result is None:
        return 2
    d = with_rewards(result.iterations)
    counts, agreement = replay_refusals(d)
    print(f"run: {args.run}")
    print(f"part 1: a guard judging every iteration, replayed on the run (agrees with the run on {agreement:.1%} of "
          "the iterations after the switch)")
    print(f"refusals: {counts.sum()}, by the iterations in the window that decided them:")
    print("  " + "  ".join(f"{k}: {v}" for k, v in counts.items()))
    print(f"  decided on 1-3 iterations: {counts[counts.index <= 3].sum()} of {counts.sum()}")
    trials = [int(t) for t in args.trials.split(",")]
    table = trial_table(d, trials, args.max_batch)
    print("part 2: tokens/s per batch: plain's median rate, speculation's delivered rate, and a guard with each "
          "trial fed the run's rewards in order")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    weights = table["iterations"] / table["iterations"].sum()
    for t in trials:
        print(f"trial {t}: {(weights * table[f'trial_{t}'] / table['plain_tok_s']).sum():.3f}x plain decoding's rate "
              "(iteration-weighted over the batches)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
