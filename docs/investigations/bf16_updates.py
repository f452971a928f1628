"""Which of a drafter's weights an optimiser step of a given size can move when the weights are bfloat16.

    python docs/investigations/bf16_updates.py

These counts are why spot training steps fp32 master weights of the drafter (real.drafters.master_weights)
rather than plain AdamW over the drafter's own parameters in the target's dtype. Adam's step on a
weight is about the learning rate in size, whatever the gradient's scale, so in bfloat16 (8 significant bits)
a step of lr leaves a weight unchanged wherever lr is under half the spacing of the bf16 values around it.
This counts, for the shipped drafter's weights (or a checkpoint given), the share a step of +lr and of -lr
changes, at each learning rate; no timing, the same output every run.

With `--data FILE` (the answers `tltsim real drafter --data FILE` collected and kept), it also takes `--steps`
plain AdamW steps of spot training (train_step, lr `--lr`, real.run.config.WARM_SPOT_LR by default: a warm
drafter's spot learning rate) on the checkpoint's drafter over the first 8 answers (up to 400 tokens each),
with the target and drafter in bfloat16 and then in float32, and counts the weights that changed.

    python docs/investigations/bf16_updates.py --data answers.pt
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

LRS = (1e-6, 1e-5, 1e-4, 1e-3)


def moved_share(weights: list[torch.Tensor], lr: float) -> float:
    """Share of the bf16 weights that a step of +lr or of -lr changes (either: Adam steps both ways)."""
    n = m = 0
    for w in weights:
        w = w.to(torch.bfloat16)
        m += int((((w + lr) != w) | ((w - lr) != w)).sum())
        n += w.numel()
    return m / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", nargs="?", type=Path, default=Path("real/assets/smollm2-135m-drafter.pt"),
                    help="a drafter checkpoint (tltsim real drafter -o); default: the shipped SmolLM2 drafter")
    ap.add_argument("--data", type=Path, help="answers kept by `tltsim real drafter --data` (tokens, features)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=None, help="default: real.run.config.WARM_SPOT_LR")
    args = ap.parse_args(argv)
    payload = torch.load(args.checkpoint, weights_only=True)
    weights = [v for v in payload["state"].values() if v.is_floating_point()]
    print(f"checkpoint: {args.checkpoint}  weights: {sum(w.numel() for w in weights):,}  "
          f"median |w|: {torch.cat([w.float().abs().flatten() for w in weights]).median().item():.4g}")
    print("lr        share of bf16 weights a step of lr moves")
    for lr in LRS:
        print(f"{lr:<9g} {moved_share(weights, lr):.4f}")
    if args.data:
        fit_check(args.checkpoint, payload["meta"]["model"], args.data, args.steps, args.lr)
    return 0


def fit_check(checkpoint: Path, model: str, data: Path, steps: int, lr: float | None) -> None:
    from real import drafters
    from real.models.targets import load_target
    from real.run.config import WARM_SPOT_LR

    lr = WARM_SPOT_LR if lr is None else lr
    torch.manual_seed(0)
    pairs = [(t[:400], f[:399]) for t, f in torch.load(data, weights_only=True)["pairs"][:8]]
    for dtype in ("bfloat16", "float32"):
        target = load_target(model, dtype=dtype)
        drafter = drafters.load(checkpoint, target)
        before = [p.detach().clone() for p in drafter.parameters()]
        optimizer = torch.optim.AdamW(drafter.parameters(), lr=lr)
        for _ in range(steps):
            drafter.train_step([(t, f.to(getattr(torch, dtype))) for t, f in pairs], optimizer)
        changed = sum(int((p.detach() != b).sum()) for p, b in zip(drafter.parameters(), before))
        print(f"{dtype}: {changed / sum(b.numel() for b in before):.4f} of the weights changed after {steps} "
              f"AdamW steps at lr {lr:g} (8 answers, up to 400 tokens each)")


if __name__ == "__main__":
    raise SystemExit(main())
