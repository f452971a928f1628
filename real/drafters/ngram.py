"""Prompt-lookup drafting: draft the tokens that followed the row's last n tokens earlier in its own text, with no
model (the drafter kind "ngram": vLLM's `ngram` speculative method, TLT's model-free baseline `tlt-base`).

A row's text is its prompt and what it has generated so far. Per speculative iteration, for n from MAX_N down to
MIN_N, the row's last n tokens are sought earlier in that text; at the first n found, the draft is the tokens
that followed their most recent earlier occurrence (the text nearest the row's end, where a response repeating
itself, a number or a name from the prompt, most likely goes on as it went), up to the strategy's `verify`
tokens. Nothing else is read: not the row's siblings, not earlier steps (that is history drafting,
real.drafters.suffix), not the target's features. A row with no match, or a match too near its end to fill the
chain, has its chain padded as history drafting pads it (real.drafters.suffix.chain), and pays the verification
of `verify` tokens either way. Proposals are verified by real.engine.sampling's lossless rule like every drafter's
(real.drafters): the output keeps the target's distribution.
"""
from __future__ import annotations

import numpy as np
import torch

from real.drafters.suffix import Match, chain
from real.engine.spec import DraftTree
from tltsim.control.strategy import Strategy

MAX_N = 4  # longest suffix sought (vLLM's prompt_lookup_max in its examples)
MIN_N = 1  # shortest


class NgramDrafter:
    """Prompt-lookup drafting (see the module docstring); no state beyond each session's rows."""

    kind = "ngram"
    features = "none"

    @classmethod
    def build(cls, target, model) -> "NgramDrafter":
        return cls()

    def session(self) -> "NgramSession":
        return NgramSession()

    def target_updated(self) -> None:
        """Nothing: it has nothing of the target's."""


class NgramSession:
    """The rows of one engine: each row's committed tokens at the last catch-up (real.drafters.DraftSession)."""

    def __init__(self):
        self.tokens: list[list[int]] = []

    def add(self, prompts: list[list[int]]) -> None:
        self.tokens += [list(p) for p in prompts]

    def select(self, keep: list[int], done: list[list[int]]) -> None:
        self.tokens = [self.tokens[b] for b in keep]

    def catch_up(self, tokens: list[list[int]], features=None) -> None:
        self.tokens = [list(t) for t in tokens]

    def draft(self, roots: torch.Tensor, positions: torch.Tensor, strategy: Strategy) -> DraftTree:
        return chain(roots, [lookup(t, strategy.verify) for t in self.tokens], strategy.verify)


def lookup(context: list[int], n: int) -> Match:
    """Up to `n` tokens that followed the most recent earlier occurrence of the longest suffix of `context` (of
    MAX_N down to MIN_N tokens) found earlier in it; an empty match where none is."""
    text = np.asarray(context, dtype=np.int64)
    for size in range(min(MAX_N, len(text) - 1), MIN_N - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(text[:-1], size)  # every string of `size` but the last
        found = np.flatnonzero((windows == text[-size:]).all(axis=1))
        if len(found):
            start = int(found[-1]) + size  # what followed the most recent occurrence
            return Match(tokens=text[start: start + n].tolist(), probs=[], length=size)
    return Match()
