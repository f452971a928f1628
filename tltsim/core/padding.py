"""Padded forwards: how `tltsim real run`'s GRPO groups sequences for its forwards, how its rollout engine
prefills, and the tokens each costs. Pure Python, so the simulator counts what the real backend computes."""
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


def prefill_load(new, cached=None, padded: bool = False) -> tuple[float, float]:
    """(tokens, sum of squared lengths, less the cached part's) of one prefill forward that feeds row i its
    `new[i]` tokens after its `cached[i]` cached ones (default none), as a cost model's `prefill_time` takes them.
    `padded`: the forward runs every row as wide as its widest, after as many cached tokens as the most any row
    has, as real/'s engine does (real.engine.generate: one padded forward over the rows it admits or resumes)."""
    new = np.asarray(new, dtype=float)
    cached = np.zeros_like(new) if cached is None else np.asarray(cached, dtype=float)
    if not len(new):
        return 0.0, 0.0
    if padded:
        width, before = float(new.max()), float(cached.max())
        return len(new) * width, len(new) * ((before + width) ** 2 - before**2)
    return float(new.sum()), float(((cached + new) ** 2 - cached**2).sum())
