"""Why the spot-trained SmolLM2 drafter's probe fell (traces/runs/real_tlt_smollm2: 2.72 -> 2.45 -> 1.30 tokens per call):
spot training as that run did it, offline, with the target held fixed, one setting at a time.

    python docs/investigations/spot_lr.py     # its figures: spot_lr.md

Data: the run's step-0 rollout (2 training problems x 4 samples at temperature 0.6, cap 128, seeds as
real.run.worker's), with the target's features; the probe: real.run.worker's (4 held-out problems, greedy, chain 4_1_4,
real.tasks.evaluate.accepted_tokens). From the shipped drafter, each setting takes 30 AdamW batches of 8 of those
answers (the run trained 27 in step 0, 1 in step 1, 10 in step 2: traces/runs/real_tlt_smollm2/steps.parquet), with a
fresh optimizer as the run's first step has, then probes. The last row trains on greedy answers instead.
One thread; minutes on 2 idle CPU cores.
"""
import copy

import numpy as np
import torch

from real.drafters.eagle import Drafter, DrafterLoss
from real.tasks.evaluate import accepted_tokens
from real.engine.generate import generate
from real.models.targets import load_target, load_task
from real.drafters.warmup import shipped_drafter
from real.run.problems import mixed_seed

SETTINGS = [("lr 1e-3, unroll 1 (the run's)", 1e-3, 1), ("lr 1e-3, unroll 2", 1e-3, 2), ("lr 1e-4, unroll 1", 1e-4, 1),
            ("lr 1e-4, unroll 2", 1e-4, 2), ("lr 1e-5, unroll 2", 1e-5, 2)]


def main():
    torch.set_num_threads(1)
    target, task = load_target("smollm2-135m"), load_task("smollm2-135m")
    base = Drafter.load(shipped_drafter("smollm2-135m"), target)
    probe = task.sample(np.random.default_rng(mixed_seed(0, 999)), 4, split="test")

    def measure(drafter):
        return float(accepted_tokens(target, drafter, task, probe, max_new_tokens=128).mean())

    def answers(greedy):
        problems = task.sample(np.random.default_rng(mixed_seed(0, 0)), 2)
        prompts = [task.prompt_ids(p) for p in problems for _ in range(4)]
        gen = generate(target, prompts, greedy=greedy, temperature=0.6, max_new_tokens=128, seed=0,
                       collect_features=True)
        return [(torch.tensor(f.prompt + f.tokens), f.features) for f in gen.finished]

    def spot_trained(pairs, lr, unroll):
        drafter = copy.deepcopy(base)
        drafter._shared = base._shared  # the target's embedding and head, shared as in a run
        optimizer = torch.optim.AdamW(drafter.parameters(), lr=lr)
        rng, losses = np.random.default_rng(0), []
        for _ in range(30):
            batch = rng.choice(len(pairs), size=min(8, len(pairs)), replace=False)
            losses.append(drafter.train_step([pairs[i] for i in batch], optimizer, DrafterLoss(unroll=unroll)))
        return drafter.eval(), losses

    print(f"static (the shipped drafter): {measure(base):.3f} tokens per call", flush=True)
    sampled = answers(False)
    for name, lr, unroll in SETTINGS:
        drafter, losses = spot_trained(sampled, lr, unroll)
        print(f"{name}: {measure(drafter):.3f} (loss {losses[0]:.4f} -> {losses[-1]:.4f})", flush=True)
    drafter, losses = spot_trained(answers(True), 1e-3, 1)
    print(f"lr 1e-3, unroll 1, greedy answers: {measure(drafter):.3f} (loss {losses[0]:.4f} -> {losses[-1]:.4f})")


if __name__ == "__main__":
    main()
