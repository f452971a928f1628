"""Which experts a mixture-of-experts iteration reads: the expected distinct experts its routed tokens hit.

An iteration routes each of its q query tokens (batch for a decode, batch x verify tokens for a verify, the
prompt tokens for a prefill) to `top_k` of a layer's `experts` experts. Under uniform routing a token misses
a given expert with probability 1 - top_k / experts, independently of the other tokens, so the expected number
of distinct experts the iteration hits in a layer is

    experts x (1 - (1 - top_k / experts) ** q)

top_k at q = 1, rising towards every expert as q grows (docs/design.md#mixture-of-experts-decode). The
roofline (tltsim.cost.roofline) reads the weights of those experts, besides the attention and embeddings
that every iteration reads; its compute is that of the experts each token uses (ModelSpec.active_params).
Real routers are not uniform: skewed routing hits fewer distinct experts at a given q, so this is an upper
bound on the expert bytes of a batch and exact at q = 1.
"""
from __future__ import annotations

import numpy as np


def expected_experts(tokens, experts: int, top_k: int):
    """Expected distinct experts hit in one layer by `tokens` tokens each routed to `top_k` of `experts`
    uniformly (arrays broadcast; 0 tokens hit none)."""
    tokens = np.asarray(tokens, dtype=float)
    if top_k >= experts:  # every token reads every expert
        return np.where(tokens > 0, float(experts), 0.0)
    return experts * -np.expm1(tokens * np.log1p(-top_k / experts))
