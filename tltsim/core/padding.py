"""Padded micro-batches: how `tltsim real run`'s GRPO groups sequences for its forwards, and the tokens that
costs. Pure Python, so the simulator counts what the real backend computes."""
from __future__ import annotations

import numpy as np


def micro_batches(lengths: list[int], budget: int) -> list[list[int]]:
    """Row indices grouped for padded forwards: sorted by length, each group's rows x longest <= budget
    (a row longer than the budget alone)."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if groups and (len(groups[-1]) + 1) * lengths[i] <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def padded_tokens(lengths, budget: int) -> tuple[float, float]:
    """(tokens, sum of squared sequence lengths) that the padded forwards of micro_batches(lengths, budget)
    process: every row of a group counts as long as the group's longest. budget 0: no padding (each
    sequence as it is)."""
    lengths = np.asarray(lengths, dtype=float)
    if budget <= 0:
        return float(lengths.sum()), float((lengths**2).sum())
    longest = [(len(g), lengths[g[-1]]) for g in micro_batches(lengths.tolist(), budget)]
    return float(sum(n * w for n, w in longest)), float(sum(n * w * w for n, w in longest))
