"""The draft tree the target verifies in one forward, and the strategies drafting can produce.

A strategy is the tuner's "depth_topk_verify" (tltsim.control.Strategy): the drafter runs `depth`
steps ahead, expanding the `topk` best tokens of each of the `topk` best nodes per step (EAGLE-2),
and the `verify` best draft nodes overall (by cumulative draft log-probability) go to the target
together with the root. "4_1_4" is a chain of 4 drafts. A row's tree has 1 + verify nodes; node 0 is the
root, the row's last committed token (the target has not seen it yet); a node at depth d sits at
position (root position + d), and attends to the committed prefix, its ancestors and itself. Drafters
(real.drafters) build these trees; nothing here knows how.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from real.checks import draftable  # noqa: F401  (torch-free, so real/cli.py checks --strategy before torch)


@dataclass
class DraftTree:
    """Per-row trees of equal size N. tokens, parents (-1 for the root), depth: long [B, N].
    `chain`: every row's tree is the chain 0 <- 1 <- ... <- N-1 (node i at depth i), which lets
    masking and greedy verification skip the tree walk."""

    tokens: torch.Tensor
    parents: torch.Tensor
    depth: torch.Tensor
    chain: bool = False

    @classmethod
    def root_only(cls, roots: torch.Tensor) -> "DraftTree":
        """The trivial tree of plain decoding: just the roots (long [B])."""
        zeros = torch.zeros_like(roots)[:, None]
        return cls(roots[:, None], zeros - 1, zeros, chain=True)

    @classmethod
    def chain_of(cls, roots: torch.Tensor, drafts: torch.Tensor) -> "DraftTree":
        """The chain root -> drafts[:, 0] -> drafts[:, 1] ... (roots long [B], drafts long [B, D])."""
        tokens = torch.cat([roots[:, None], drafts], dim=1)
        depth = torch.arange(tokens.shape[1], device=roots.device)[None].expand(tokens.shape)
        return cls(tokens, depth - 1, depth, chain=True)

    def visible(self) -> torch.Tensor:
        """bool [B, N, N]: node i attends node j iff j is i or an ancestor of i."""
        batch, n = self.tokens.shape
        device = self.tokens.device
        if self.chain:
            return torch.ones(n, n, dtype=torch.bool, device=device).tril().expand(batch, n, n)
        vis = torch.eye(n, dtype=torch.bool, device=device).repeat(batch, 1, 1)
        rows = torch.arange(batch, device=device)[:, None].expand(batch, n)
        nodes = torch.arange(n, device=device)[None].expand(batch, n)
        up = nodes  # each node's ancestor one level further up per pass (-1 past the root)
        for _ in range(int(self.depth.max())):
            up = torch.where(up >= 0, self.parents.gather(1, up.clamp(min=0)), up)
            hit = up >= 0
            vis[rows[hit], nodes[hit], up[hit]] = True
        return vis


def select_tree(tok, parent, score, depth, roots, verify: int) -> DraftTree:
    """Keep the `verify` best candidates per row (with their ancestors: a child never outscores its
    parent, and a stable sort keeps the earlier parent first on ties) and renumber them as a tree."""
    batch, n = tok.shape
    rows = torch.arange(batch, device=tok.device)[:, None]
    order = score.sort(dim=1, descending=True, stable=True).indices[:, :verify]
    chosen = order.sort(dim=1).values  # candidate order: parents before children
    node_of = torch.zeros(batch, n, dtype=torch.long, device=tok.device)
    node_of[rows, chosen] = torch.arange(1, verify + 1, device=tok.device)[None]
    par = parent[rows, chosen]
    par_node = torch.where(par < 0, 0, node_of[rows, par.clamp(min=0)])
    assert bool((par < 0).logical_or(node_of[rows, par.clamp(min=0)] > 0).all()), "selection closed under ancestors"
    return DraftTree(
        tokens=torch.cat([roots[:, None], tok[rows, chosen]], dim=1),
        parents=torch.cat([torch.full_like(roots[:, None], -1), par_node], dim=1),
        depth=torch.cat([torch.zeros_like(roots[:, None]), depth[rows, chosen]], dim=1),
    )
