"""History drafting where it is sure, the trained drafter elsewhere (the drafter kind "hybrid").

Per row and per speculative iteration: the history draft (real.drafters.suffix) where its match is long (a context
suffix of at least `min_match` tokens) and confident (at least `min_expected` draft tokens expected to be
accepted, from its match counts), else the trained drafter's (real.drafters.eagle, TLT's). Both propose `verify`
draft nodes, so the rows share one tree of 1 + verify nodes (a row's history chain where the trained drafter
builds a tree). The trained drafter runs only when some row needs it: its catch-up waits until then (it feeds
every token it has not seen, so nothing is lost), so an iteration where every row drafts from history costs
no drafter forward. The output keeps the target's distribution, as with either drafter (real.drafters).
"""
from __future__ import annotations

import torch

from real import drafters
from real.engine.spec import DraftTree
from real.drafters.suffix import SuffixDrafter, chain
from tltsim.control.strategy import Strategy

MIN_MATCH = 4  # context suffix tokens the history draft must start from
MIN_EXPECTED = 1.0  # draft tokens the history draft must expect to get accepted


def sure(match, min_match: int = MIN_MATCH, min_expected: float = MIN_EXPECTED) -> bool:
    """Whether a row drafts from history: its match (real.drafters.suffix.Match) is long and confident enough."""
    return match.length >= min_match and match.expected >= min_expected


class HybridDrafter:
    """See the module docstring. `history_rows` / `trained_rows`: rows drafted by each, summed over iterations."""

    kind = "hybrid"
    features = "hidden"  # the trained drafter's

    def __init__(self, trained: drafters.Drafting, history: SuffixDrafter, min_match: int = MIN_MATCH,
                 min_expected: float = MIN_EXPECTED):
        self.trained, self.history = trained, history
        self.min_match, self.min_expected = min_match, min_expected
        self.history_rows = self.trained_rows = 0

    @classmethod
    def build(cls, target, model) -> "HybridDrafter":
        """The trained drafter shipped for `model` with a fresh history."""
        return cls(drafters.load(drafters.SHIPPED, target, model), SuffixDrafter())

    def session(self) -> "HybridSession":
        return HybridSession(self)

    def target_updated(self) -> None:
        self.trained.target_updated()
        self.history.target_updated()


class HybridSession:
    def __init__(self, drafter: HybridDrafter):
        self.drafter = drafter
        self.trained, self.history = drafter.trained.session(), drafter.history.session()
        self.pending = None  # (tokens, features) of the last catch-up, not yet fed to the trained drafter

    def add(self, prompts: list[list[int]]) -> None:
        self.trained.add(prompts)
        self.history.add(prompts)

    def select(self, keep: list[int], done: list[list[int]]) -> None:
        self.trained.select(keep, done)
        self.history.select(keep, done)

    def catch_up(self, tokens: list[list[int]], features) -> None:
        self.history.catch_up(tokens)
        self.pending = (tokens, features)

    def draft(self, roots: torch.Tensor, positions: torch.Tensor, strategy: Strategy) -> DraftTree:
        d = self.drafter
        matches = self.history.matches(strategy.verify)
        use = [sure(m, d.min_match, d.min_expected) for m in matches]
        d.history_rows += sum(use)
        d.trained_rows += len(use) - sum(use)
        if all(use):
            return chain(roots, matches, strategy.verify)
        self.trained.catch_up(*self.pending)
        tree = self.trained.draft(roots, positions, strategy)
        if not any(use):
            return tree
        hist = chain(roots, matches, strategy.verify)
        rows = torch.tensor(use, device=roots.device)[:, None]
        return DraftTree(torch.where(rows, hist.tokens, tree.tokens), torch.where(rows, hist.parents, tree.parents),
                         torch.where(rows, hist.depth, tree.depth), chain=tree.chain)
