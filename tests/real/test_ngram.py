"""Prompt-lookup drafting (real.drafters.ngram): what it drafts from a row's own text, and greedy speculation with it
token-identical to plain decoding on the tiny targets (its sampled law: tests/real/test_suffix.py, beside history
drafting's)."""
from __future__ import annotations

import pytest
import torch
from tiny_lm import MAX_NEW, PROMPTS, ragged_eos, reference, target

from real import drafters
from real.drafters.ngram import MAX_N, NgramDrafter, lookup
from real.engine.generate import generate
from real.settings import GenerateSettings
from tltsim.control.strategy import Strategy


@pytest.mark.parametrize("context, n, drafted, length", [
    ([5, 6, 7, 8, 5, 6], 3, [7, 8, 5], 2),  # the last 2 tokens seen before: what followed them
    ([5, 6, 7, 9, 6, 7, 8, 1, 6, 7], 2, [8, 1], 2),  # the most recent earlier occurrence, not the first
    ([1, 2, 3, 8, 5, 3, 9, 2, 3], 2, [8, 5], 2),  # the longest suffix seen before ("3" alone: 9 2)
    ([1, 2, 3, 9, 1, 2, 3], 5, [9, 1, 2, 3], 3),  # fewer than asked where the text ends
    ([1, 2, 3, 4, 5, 7, 1, 2, 3, 4, 5], 2, [7, 1], MAX_N),  # no longer than MAX_N
    ([1, 2, 3], 4, [], 0),  # nothing seen before
    ([4], 4, [], 0),
])
def test_a_row_drafts_what_followed_its_last_tokens_earlier_in_its_text(context, n, drafted, length):
    match = lookup(context, n)
    assert (match.tokens, match.length) == (drafted, length)


def test_a_session_drafts_each_row_from_its_own_text_alone():
    session = NgramDrafter().session()
    session.add([[1, 2, 3, 1], [7, 8]])
    session.catch_up([[1, 2, 3, 1, 2], [7, 8, 1, 2]])  # row 1's "1 2" is row 0's, not its own
    tree = session.draft(torch.tensor([2, 2]), torch.tensor([4, 3]), Strategy.parse("2_1_2"))
    assert tree.tokens[:, 1:].tolist() == [[3, 1], [2, 2]]  # row 1 has no match: its chain repeats the root
    session.select([1], [[1, 2, 3, 1, 2]])
    assert session.tokens == [[7, 8, 1, 2]]


def test_the_registry_builds_it_by_its_kind():
    drafter = drafters.kind("ngram").build(None, None)
    assert isinstance(drafter, NgramDrafter) and drafter.features == "none"


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("kind", ["random", "trained"])
def test_greedy_prompt_lookup_speculation_is_lossless(arch, kind):
    """A ragged batch (rows end at different steps): the target's own tokens, drafts from each row's text accepted."""
    settings = GenerateSettings(strategy="4_1_4", max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(arch, kind))
    gen = generate(target(arch, kind), PROMPTS[kind], NgramDrafter(), settings)
    assert tuple(map(tuple, gen.tokens)) == reference(arch, kind)
    assert max(a for it in gen.iterations if it.mode == "spec_decode" for a in it.accepted) >= 1
