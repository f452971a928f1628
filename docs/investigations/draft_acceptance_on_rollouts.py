"""Does training on the rollouts' own sampled answers close the drafter's gap to the target?

    python docs/investigations/draft_acceptance_on_rollouts.py [--lr 3e-4] [--rounds 1]

Continues the long-tail drafter (real/assets/smollm2-135m-longtail-drafter.pt, warmed on greedy answers) on the
shipped verl run's sampled answers of steps 0-2 (behind their own prompts, as draft_acceptance.py puts
them), ROUNDS x 100 AdamW steps of 8 answers at LR, and measures the first draft's
acceptance (draft_acceptance.first_draft_acceptance) on 8 answers of steps 3-5 before and after each round.
float32, 2 threads. Its figures: draft_acceptance.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from draft_acceptance import first_draft_acceptance, per_token_means, recorded_prompts
from real import drafters
from real.models.targets import load_target, load_task

ROOT = Path(__file__).resolve().parents[2]  # the repository
TEMPERATURE = 0.7
STEPS = 100  # AdamW steps a round


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    target = load_target("smollm2-135m", dtype="float32")
    task = load_task("smollm2-135m", "longtail")
    run = ROOT / "traces" / "runs" / "real_verl_smollm2_longtail"
    answers = pd.read_parquet(f"{run}/answers.parquet")
    train, test = answers[answers.step <= 2], answers[answers.step >= 3].iloc[::4][:8]
    train_prompts, test_prompts = recorded_prompts(run, task, train), recorded_prompts(run, task, test)
    drafter = drafters.load(ROOT / "real" / "assets" / "smollm2-135m-longtail-drafter.pt", target)
    drafter.eval()

    def evaluate(label: str) -> None:
        results = [first_draft_acceptance(target, drafter, p, [int(t) for t in a], TEMPERATURE)
                   for a, p in zip(test.tokens, test_prompts)]
        print(label, {k: round(v, 3) for k, v in per_token_means(results).items()}, flush=True)

    evaluate("before")
    t0 = time.time()
    pairs = []
    with torch.no_grad():
        for a, p in zip(train.tokens, train_prompts):
            x = torch.tensor(p + [int(t) for t in a])
            pairs.append((x, target.model(input_ids=x[None]).last_hidden_state[0, :-1]))
    print("features", round(time.time() - t0), "s", sum(len(x) for x, _ in pairs), "tokens", flush=True)
    for _ in range(args.rounds):
        t0 = time.time()
        losses = drafter.fit(pairs, steps=STEPS, batch_size=8, lr=args.lr, seed=0)
        print("fit", STEPS, round(time.time() - t0), "s loss", round(np.mean(losses[:10]), 3), "->",
              round(np.mean(losses[-10:]), 3), flush=True)
        evaluate(f"after +{STEPS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
