"""Drafting (chain and EAGLE-2 tree) and the tree the target verifies in one forward.

A strategy is the tuner's "depth_topk_verify" (tltsim.control.Strategy): the drafter runs `depth`
steps ahead, expanding the `topk` best tokens of each of the `topk` best nodes per step (EAGLE-2),
and the `verify` best draft nodes overall (by cumulative draft log-probability) go to the target
together with the root. "4_1_4" is a chain of 4 drafts. A row's tree has 1 + verify nodes; node 0 is the
root, the row's last committed token (the target has not seen it yet); a node at depth d sits at
position (root position + d), and attends to the committed prefix, its ancestors and itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from real.kvcache import RaggedCache
from tltsim.errors import TltsimError
from tltsim.control.strategy import Strategy


def draftable(strategy: str | Strategy) -> Strategy:
    """The strategy (a "depth_topk_verify" string or a Strategy), checked against what drafting can produce."""
    strategy = Strategy.parse(strategy)
    most = strategy.topk + (strategy.depth - 1) * strategy.topk**2
    if strategy.verify > most:
        raise TltsimError(f"strategy {strategy}: verify={strategy.verify} exceeds the {most} nodes that depth "
                          f"{strategy.depth} and top-k {strategy.topk} draft; lower verify")
    return strategy


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


class DraftState:
    """The drafter's per-row KV cache over the committed tokens, and drafting from it.

    Row b has ingested its first `cache.lens[b]` tokens (input i is (x_i, f_{i-1})); `ingest`
    feeds the rest of the committed tokens, `draft` then builds the tree and rolls the drafter's
    speculative entries back, so only committed tokens stay in its cache. Both run in inference mode
    (cheaper per operation): what they return, the draft tree included, cannot enter autograd.
    """

    def __init__(self, drafter, batch: int):
        self.drafter = drafter
        attn = drafter.layer.self_attn
        key = drafter.fc.weight
        self.cache = RaggedCache(1, batch, attn.config.num_key_value_heads, attn.head_dim, key.dtype, key.device)

    @torch.inference_mode()
    def ingest(self, tokens: list[list[int]], features: torch.Tensor) -> torch.Tensor:
        """Feed each row's committed tokens not yet seen; return g at its last token [B, H].

        tokens: per row, all committed tokens x_0 .. x_{n-1}. features [B, S, H]: f_i at slot i for
        i < n - 1 (the target's feature cache).
        """
        device = features.device
        start = self.cache.lens.tolist()
        counts = [len(t) - s for t, s in zip(tokens, start)]
        assert min(counts) >= 1, "every row has a new committed token"
        batch, width = len(tokens), max(counts)
        x = torch.tensor([t[s:] + [0] * (width - c) for t, s, c in zip(tokens, start, counts)], device=device)
        idx = self.cache.lens[:, None] + torch.arange(width, device=device)  # token index i of each input
        slot = (idx - 1).clamp(min=0, max=max(features.shape[1] - 1, 0))  # f_{i-1} sits at slot i - 1
        prev = features.gather(1, slot[:, :, None].expand(-1, -1, features.shape[2])) if features.shape[1] else \
            features.new_zeros(batch, width, features.shape[2])
        prev = prev * (idx > 0)[:, :, None]  # f_{-1} = 0
        visible = torch.ones(width, width, dtype=torch.bool, device=device).tril()[None].expand(batch, width, width)
        counts_t = torch.tensor(counts, device=device)
        if min(counts) < width:  # padding inputs are seen by none, and see only themselves
            valid = torch.arange(width, device=device)[None, :] < counts_t[:, None]
            visible = (visible & valid[:, None, :]) | torch.eye(width, dtype=torch.bool, device=device)[None]
        g = self.drafter(x, prev, idx, self.cache.mask(visible), self.cache.cache)
        if min(counts) == width and not self.cache.ragged:  # every input is kept where it is
            self.cache.commit_all()
            return g[:, -1]
        self.cache.commit(torch.arange(width, device=device)[None].expand(batch, width), counts_t)
        return g[torch.arange(batch, device=device), counts_t - 1]

    def draft(self, roots: torch.Tensor, g_root: torch.Tensor, root_pos: torch.Tensor, strategy: Strategy) -> DraftTree:
        """EAGLE-2 drafting from each row's root (token long [B], g [B, H], position long [B])."""
        if strategy.topk == 1:
            return self._chain(roots, g_root, root_pos, strategy.verify)
        return self._tree(roots, g_root, root_pos, strategy)

    @torch.inference_mode()
    def _tree(self, roots: torch.Tensor, g_root: torch.Tensor, root_pos: torch.Tensor, strategy: Strategy) -> DraftTree:
        """The EAGLE-2 tree search of `draft`, for any top-k."""
        batch, k, device = roots.shape[0], strategy.topk, roots.device
        rows = torch.arange(batch, device=device)[:, None]
        logp = torch.log_softmax(self.drafter.head(g_root).float(), dim=-1)
        score, tok = logp.topk(k, dim=-1)  # [B, k]
        tok = self.drafter.to_target(tok)
        cand_tok, cand_parent, cand_score, cand_depth = [tok], [torch.full_like(tok, -1)], [score], [torch.ones_like(tok)]
        frontier = torch.arange(k, device=device)[None].expand(batch, k)  # candidate ids
        g_parent = g_root[:, None].expand(batch, k, -1)
        ancestors = torch.zeros(batch, k, 0, dtype=torch.bool, device=device)  # pending slots each frontier node sees
        n_cand = k
        for d in range(1, strategy.depth):
            visible = torch.cat([ancestors, torch.eye(k, dtype=torch.bool, device=device).expand(batch, k, k)], dim=2)
            pos = (root_pos + d)[:, None].expand(batch, k)
            g = self.drafter(tok, g_parent, pos, self.cache.mask(visible), self.cache.cache)  # [B, k, H]
            logp = torch.log_softmax(self.drafter.head(g).float(), dim=-1)
            child_lp, child_tok = logp.topk(k, dim=-1)  # [B, k, k]
            child_tok = self.drafter.to_target(child_tok)
            child_score = (score[:, :, None] + child_lp).reshape(batch, k * k)
            cand_tok.append(child_tok.reshape(batch, k * k))
            cand_parent.append(frontier[:, :, None].expand(batch, k, k).reshape(batch, k * k))
            cand_score.append(child_score)
            cand_depth.append(torch.full_like(child_score, d + 1, dtype=torch.long))
            score, best = child_score.topk(k, dim=-1)  # next frontier, [B, k] indices into the k*k children
            via = best // k  # which frontier node each one came from
            tok = cand_tok[-1][rows, best]
            frontier = n_cand + best
            g_parent = g[rows, via]
            ancestors = visible[rows, via]  # a child sees what its parent saw, and the parent
            n_cand += k * k
        self.cache.rollback()
        return _select(torch.cat(cand_tok, 1), torch.cat(cand_parent, 1), torch.cat(cand_score, 1),
                       torch.cat(cand_depth, 1), roots, strategy.verify)

    @torch.inference_mode()
    def _chain(self, roots: torch.Tensor, g: torch.Tensor, root_pos: torch.Tensor, length: int) -> DraftTree:
        """Top-k 1: each row's chain of `length` argmax drafts. The tree search would build the same
        chain (with one candidate per depth, the `verify` best are the first `verify`), so only as
        many drafter steps run as drafts are kept, and no scores are needed."""
        tok = self.drafter.to_target(self.drafter.head(g).argmax(dim=-1))  # [B]
        drafts = [tok]
        for d in range(1, length):  # a node sees its ancestors (every pending slot) and itself
            g = self.drafter(tok[:, None], g[:, None], (root_pos + d)[:, None], self.cache.mask_one(),
                             self.cache.cache)[:, 0]
            tok = self.drafter.to_target(self.drafter.head(g).argmax(dim=-1))
            drafts.append(tok)
        self.cache.rollback()
        return DraftTree.chain_of(roots, torch.stack(drafts, dim=1))


def _select(tok, parent, score, depth, roots, verify: int) -> DraftTree:
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
