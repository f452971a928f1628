"""Drafter quality over RL steps: staleness when the policy moves, recovery with training.

A drafter's quality q (the top-1 acceptance at the first drafted position; see
`acceptance`) decides the accepted length. TLT (ASPLOS 2026) shows a drafter
trained once goes stale as RL updates the policy (accepted length 4.59 during
RL) while its adaptive drafter, trained online on idle GPUs, keeps up (6.53).
This module models that with two rules:

* every policy update lowers q by `drift`, never below `q_floor`;
* training on s samples closes part of the gap to `q_max` along a learning
  curve in samples: ``q += (q_max - q) * (1 - exp(-s / tau_samples))``. Training
  in pieces gives the same q as training on their sum at once, so the caller
  may feed samples in any chunking.

The model takes samples, not seconds: the caller converts harvested GPU time
into samples with its cost model's drafter-training throughput, and charges
`load_s` each time training starts on a worker.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tltsim.core.errors import TltsimError
from tltsim.drafter.acceptance import Q_ADAPTIVE_RL, Q_STATIC_RL, Q_TRAINED

# Quality of a model-free n-gram (prompt-lookup) drafter: chosen, not fitted, so
# that the default strategy 8_4_48 accepts 2.0 tokens per verify (one drafted
# token plus the bonus), about what n-gram drafters give on reasoning text. A
# knob of NgramDrafter.
Q_NGRAM = 0.39676


@dataclass(frozen=True)
class DrafterConfig:
    """Parameters of the drafter-quality model (defaults: a well-trained EAGLE drafter)."""

    q_start: float = Q_TRAINED    # quality when RL starts: drafter trained before RL (docs/design.md#accepted-length)
    q_max: float = Q_TRAINED      # learning-curve asymptote: training cannot beat the pre-RL drafter
    drift: float = 0.01           # quality lost per policy update (assumed; no per-step data in TLT)
    q_floor: float = Q_STATIC_RL  # a stale drafter settles here: TLT's static 4.59 at 8_4_48
    tau_samples: float = 2000.0   # samples that close 63% of the gap (assumed; see `tau_for`)
    load_s: float = 1.0           # seconds to load drafter + optimizer state when training
                                  # starts (assumed: ~1 GB bf16 layer + fp32 Adam over PCIe)

    def __post_init__(self) -> None:
        for name in ("q_start", "q_max", "q_floor"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise TltsimError(f"drafter {name}={getattr(self, name)!r}: must be in [0, 1]")
        if not self.q_floor <= self.q_max:
            raise TltsimError(f"drafter q_floor={self.q_floor} > q_max={self.q_max}: "
                              "the floor must not exceed the best quality")
        for name in ("drift", "load_s"):
            if not getattr(self, name) >= 0.0:
                raise TltsimError(f"drafter {name}={getattr(self, name)!r}: must be >= 0")
        if not self.tau_samples > 0.0:
            raise TltsimError(f"drafter tau_samples={self.tau_samples!r}: must be > 0")

    def steady_state(self, samples_per_step: float) -> float:
        """Quality right after training, once drift and training balance each step.

        Each step: drift, then train on `samples_per_step`; with too few
        samples to keep up, the floor.
        """
        keep = math.exp(-samples_per_step / self.tau_samples)
        if keep >= 1.0:
            return self.q_floor
        return max(self.q_floor, self.q_max - self.drift * keep / (1.0 - keep))

    def tau_for(self, samples_per_step: float, q_target: float = Q_ADAPTIVE_RL) -> float:
        """The tau_samples that makes `steady_state(samples_per_step)` equal `q_target`.

        Calibration: with a simulator's typical harvested samples per step,
        this tau reproduces TLT's adaptive accepted length (6.53 at 8_4_48).
        """
        gap = self.q_max - q_target
        if not 0.0 < gap or self.drift <= 0.0:
            raise TltsimError(f"drafter tau_for: need q_target < q_max and drift > 0 "
                              f"(q_target={q_target}, q_max={self.q_max}, drift={self.drift})")
        keep = gap / (gap + self.drift)   # solves drift * keep / (1 - keep) = gap
        return samples_per_step / -math.log(keep)


class DrafterQuality:
    """The quality of one learned (EAGLE-style) drafter as RL proceeds.

    A static drafter (`trainable=False`, TLT's "trained once" baseline) only
    drifts; calling `train` on it raises ValueError.
    """

    model_free = False

    def __init__(self, config: DrafterConfig = DrafterConfig(), *, trainable: bool = True):
        self.config = config
        self.trainable = trainable
        self.quality = config.q_start     # current q
        self.samples_trained = 0.0        # total samples trained on so far

    def policy_update(self) -> float:
        """The policy changed (one RL update): lose `drift`, floored; returns the new quality."""
        c = self.config
        self.quality = max(self.quality - c.drift, min(self.quality, c.q_floor))
        return self.quality

    def train(self, samples: float) -> float:
        """Train on `samples` more samples; returns the new quality (never above q_max)."""
        if not self.trainable:
            raise ValueError("train: this drafter is static (trainable=False)")
        if samples < 0:
            raise ValueError(f"train(samples={samples}): must be >= 0")
        c = self.config
        if self.quality < c.q_max:
            self.quality += (c.q_max - self.quality) * -math.expm1(-samples / c.tau_samples)
        self.samples_trained += samples
        return self.quality


class NgramDrafter:
    """A model-free n-gram drafter (prompt lookup): low quality, no drift, nothing to train.

    It drafts by matching the recent tokens against the prompt and output so
    far, so a policy update does not make it stale; it has no weights (the
    caller charges no drafter forward passes and no training).
    """

    model_free = True
    trainable = False

    def __init__(self, quality: float = Q_NGRAM):
        if not 0.0 <= quality <= 1.0:
            raise TltsimError(f"n-gram drafter quality={quality!r}: must be in [0, 1]")
        self.quality = quality

    def policy_update(self) -> float:
        """No drift: returns the unchanged quality."""
        return self.quality

    def train(self, samples: float) -> float:
        raise ValueError("train: an n-gram drafter has nothing to train")
