"""AdamW on fp32 master weights of a low-precision model: mixed-precision training as real RL runs it.

A bf16 weight holds 8 significant bits, so an AdamW step smaller than about 1/256 of the weight rounds away
and the weight does not move: at a drafter's spot-training learning rate (1e-5) most bf16 weights of a warm
drafter never change (docs/investigations/bf16_updates.py measures how many). Real runs therefore keep an fp32
copy of every low-precision parameter (the master weights), let the optimizer step the copy, and write it
back, rounded, into the model that computes in bf16. `MasterWeightAdamW` does that for any parameters whose
dtype is narrower than fp32; a parameter already fp32 (or fp64) is its own master and is stepped in place,
exactly as plain `torch.optim.AdamW` would.

The masters are the weights: `masters` gives them to whatever averages weights across workers (write the
average into them, then `write_back`), and `state_dict` carries them with the moments, so a resumed run
continues from the unrounded weights.
"""
from __future__ import annotations

import torch


def master_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a parameter of `dtype` is stepped in: at least fp32."""
    return torch.promote_types(dtype, torch.float32)


class MasterWeightAdamW:
    """`torch.optim.AdamW` over fp32 master copies of `params` (those narrower than fp32; the rest are their own)."""

    def __init__(self, params, lr: float):
        self.params = list(params)
        self.masters = [p if p.dtype == master_dtype(p.dtype)
                        else p.detach().to(master_dtype(p.dtype)).requires_grad_(True) for p in self.params]
        self.optimizer = torch.optim.AdamW(self.masters, lr=lr)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Step the masters on the model's gradients, then write them back into the model."""
        for p, m in zip(self.params, self.masters):
            if m is not p:
                m.grad = None if p.grad is None else p.grad.to(m.dtype)
        self.optimizer.step()
        self.write_back()

    @torch.no_grad()
    def write_back(self) -> None:
        """Round the masters into the model's parameters (after a step, or after the masters were averaged)."""
        for p, m in zip(self.params, self.masters):
            if m is not p:
                p.copy_(m)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(),
                "masters": [m.detach().clone() for m in self.masters]}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        """Restore the moments and the masters; a plain AdamW state (a checkpoint written before master
        weights) restores the moments, and the masters stay the model's weights as loaded."""
        if "masters" not in state:
            self.optimizer.load_state_dict(state)
            return
        self.optimizer.load_state_dict(state["optimizer"])
        for m, saved in zip(self.masters, state["masters"], strict=True):
            m.copy_(saved)
        self.write_back()
