"""The EAGLE drafter's session (real.drafters.eagle): a KV cache per running row over its committed tokens,
kept in step with the engine's rows, and the drafts it makes from it: a chain where top-k is 1, else EAGLE-2's
tree search (real.engine.spec.select_tree keeps the best nodes)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from real.engine.kvcache import RaggedCache
from real.engine.spec import DraftTree, select_tree
from tltsim.control.strategy import Strategy

if TYPE_CHECKING:  # the drafter module imports this one
    from real.drafters.eagle import Drafter


class EagleSession:
    """The drafter's per-row KV cache over the committed tokens, and drafting from it (real.drafters.DraftSession).

    Row b has ingested its first `cache.lens[b]` tokens (input i is (x_i, f_{i-1})); `catch_up`
    feeds the rest of the committed tokens, `draft` then builds the tree and rolls the drafter's
    speculative entries back, so only committed tokens stay in its cache. Both run in inference mode
    (cheaper per operation): what they return, the draft tree included, cannot enter autograd.
    """

    def __init__(self, drafter: Drafter):
        self.drafter = drafter
        self.cache = self._cache(0)
        self.g_last = None  # g at each row's last committed token [B, H], after `catch_up`

    def _cache(self, batch: int) -> RaggedCache:
        attn, key = self.drafter.layer.self_attn, self.drafter.fc.weight
        return RaggedCache(1, batch, attn.config.num_key_value_heads, attn.head_dim, key.dtype, key.device)

    def add(self, prompts: list[list[int]]) -> None:
        self.cache.extend(self._cache(len(prompts)))

    def select(self, keep: list[int], done: list[list[int]]) -> None:
        self.cache.select(torch.tensor(keep, dtype=torch.long, device=self.cache.lens.device))

    def catch_up(self, tokens: list[list[int]], features: torch.Tensor) -> None:
        """Feed each row's committed tokens not yet seen (see `ingest`)."""
        self.g_last = self.ingest(tokens, features)

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

    def draft(self, roots: torch.Tensor, root_pos: torch.Tensor, strategy: Strategy) -> DraftTree:
        """EAGLE-2 drafting from each row's root (token long [B], position long [B]), after `catch_up`."""
        if strategy.topk == 1:
            return self._chain(roots, self.g_last, root_pos, strategy.verify)
        return self._tree(roots, self.g_last, root_pos, strategy)

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
        return select_tree(torch.cat(cand_tok, 1), torch.cat(cand_parent, 1), torch.cat(cand_score, 1),
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
