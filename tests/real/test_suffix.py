"""History drafting (real.drafters.suffix) and its hybrid with the trained drafter (real.drafters.hybrid): the index, and
lossless speculation with both on the tiny targets (greedy token-identical, sampling the target's law)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from test_sampling import _chi2_pvalue, _reference_probs
from tiny_lm import MAX_NEW, PROMPTS, ragged_eos, reference, target, tiny_target

from real import drafters
from real.drafters.eagle import Drafter
from real.engine.generate import Engine, generate
from real.drafters.hybrid import HybridDrafter
from real.drafters.ngram import NgramDrafter
from real.settings import GenerateSettings, SamplingParams
from real.drafters.suffix import DEPTH, SuffixDrafter
from tltsim.core.errors import TltsimError


def _trie(node) -> dict:
    return {tok: (child.count, _trie(child)) for tok, child in node.children.items()}


def _session(drafter, prompts):
    session = drafter.session()
    session.add(prompts)
    return session


def test_a_row_drafts_what_a_sibling_wrote_after_the_same_context():
    prompt = [1, 2, 3]
    session = _session(SuffixDrafter(), [prompt, prompt])
    session.catch_up([prompt + [7, 8, 9, 10, 11], prompt + [7, 8]], None)
    ahead, behind = session.matches(4)
    assert behind.tokens == [9, 10, 11] and behind.length == 5  # "1 2 3 7 8" seen once, continued
    assert behind.probs == [0.5, 0.5, 0.5] and behind.expected == pytest.approx(0.5 + 0.25 + 0.125)
    assert ahead.tokens == [] and ahead.length == 0  # nothing was written after its last tokens


def test_more_agreeing_siblings_mean_more_confidence_and_the_majority_wins():
    prompt = [5, 6]
    session = _session(SuffixDrafter(), [prompt] * 5)
    session.catch_up([prompt + [1, 2]] * 3 + [prompt + [1, 3], prompt], None)
    draft = session.matches(2)[-1]
    assert draft.tokens == [1, 2] and draft.probs == [4 / 5, 3 / 5]  # 4 of 4 went on with 1, then 3 of 4 with 2


def test_finished_responses_of_a_prompt_are_drafted_from_in_a_later_engine():
    drafter, prompt = SuffixDrafter(), [4, 4, 9]
    first = _session(drafter, [prompt])
    first.catch_up([prompt + [3, 1]], None)
    first.select([], [prompt + [3, 1, 4, 1, 5]])  # the row finished with three more tokens
    later = _session(drafter, [prompt])
    later.catch_up([prompt + [3]], None)
    assert later.matches(4)[0].tokens == [1, 4, 1, 5]
    other = _session(drafter, [[8, 8]])  # another prompt sees none of it
    other.catch_up([[8, 8, 3]], None)
    assert other.matches(4)[0].tokens == []


def test_the_history_cap_evicts_the_oldest_response_exactly():
    """Past the cap the oldest finished response leaves, and the trie is the one the rest would build; a
    prompt with no response left and no row running leaves with it."""
    capped, fresh = SuffixDrafter(max_tokens=12), SuffixDrafter()
    responses = {(1, 2): [[3, 4, 5, 6, 7, 8, 9]], (9, 9): [[3, 4, 5], [3, 4, 6]]}
    for drafter, plan in ((capped, [((1, 2), 0), ((9, 9), 0), ((9, 9), 1)]), (fresh, [((9, 9), 0), ((9, 9), 1)])):
        for prompt, i in plan:
            session = _session(drafter, [list(prompt)])
            session.select([], [list(prompt) + responses[prompt][i]])
    assert capped.history_tokens == 6 and list(capped.groups) == [(9, 9)]
    assert _trie(capped.groups[(9, 9)].root) == _trie(fresh.groups[(9, 9)].root)
    long = SuffixDrafter(max_tokens=0)
    session = _session(long, [[1]])
    session.select([], [[1] + list(range(2, 40))])
    assert long.groups == {} and long.history_tokens == 0


def test_the_history_survives_a_checkpoint_as_plain_data(tmp_path):
    """state_dict holds the finished responses (what the cap kept), torch.load(weights_only=True) reads it back,
    and load_state_dict rebuilds the index with the same counts, so a later row drafts what it would have;
    `remember` (a response from another worker) indexes what a session's finished row does."""
    drafter = SuffixDrafter(max_tokens=14)
    rows = [([1, 2], [3, 4, 5, 6, 7]), ([9, 9], [3, 4, 5, 1]), ([1, 2], [3, 4, 8, 6, 7]), ([9, 9], [3, 4, 5, 2])]
    session = _session(drafter, [p for p, _ in rows[:2]])
    session.catch_up([p + r[:2] for p, r in rows[:2]], None)  # in flight, then finished
    session.select([], [p + r for p, r in rows[:2]])
    for prompt, response in rows[2:]:
        drafter.remember(prompt, response)
    assert drafter.history_tokens == 13  # the first response left past the cap of 14
    torch.save(drafter.state_dict(), tmp_path / "h.pt")
    rebuilt = SuffixDrafter(max_tokens=14)
    rebuilt.load_state_dict(torch.load(tmp_path / "h.pt", weights_only=True))
    assert set(rebuilt.groups) == set(drafter.groups) == {(9, 9), (1, 2)}
    for key in drafter.groups:
        assert _trie(rebuilt.groups[key].root) == _trie(drafter.groups[key].root)
    assert rebuilt.history_tokens == drafter.history_tokens and rebuilt.state_dict() == drafter.state_dict()
    for d in (drafter, rebuilt):
        later = _session(d, [[1, 2]])
        later.catch_up([[1, 2, 3, 4]], None)
        assert later.matches(3)[0].tokens == [8, 6, 7]
    rebuilt.load_state_dict(SuffixDrafter().state_dict())  # loading empties it first
    assert rebuilt.groups == {} and rebuilt.history_tokens == 0


def test_the_trie_holds_strings_up_to_its_depth():
    session = _session(SuffixDrafter(), [[0]])
    session.catch_up([list(range(3 * DEPTH))], None)
    node, depth = session.drafter.groups[(0,)].root, 0
    while node.children:
        node, depth = next(iter(node.children.values())), depth + 1
    assert depth == DEPTH


def test_the_registry_loads_every_kind(tmp_path):
    model = tiny_target("llama")
    path = tmp_path / "d.pt"
    Drafter.for_target(model, seed=1).save(path)
    assert isinstance(drafters.load("suffix", model), SuffixDrafter)
    assert isinstance(drafters.load(path, model), Drafter)
    hybrid = drafters.load(f"hybrid:{path}", model)  # the hybrid over that checkpoint, with a fresh history
    assert isinstance(hybrid, HybridDrafter) and isinstance(hybrid.history, SuffixDrafter)
    assert all(torch.equal(a, b) for a, b in zip(hybrid.trained.state_dict().values(),
                                                  Drafter.load(path, model).state_dict().values()))
    for name in drafters.DRAFTERS:
        assert drafters.kind(name).kind == name
    with pytest.raises(TltsimError, match="not shipped, a kind"):
        drafters.load(tmp_path / "missing.pt", model)
    with pytest.raises(TltsimError, match="not shipped, a kind"):
        drafters.load(f"hybrid:{tmp_path / 'missing.pt'}", model)
    for name in ("", "hybrid:", "hybrid: ", "hybrid:suffix", "hybrid:hybrid:x"):  # no trained drafter named
        with pytest.raises(TltsimError, match="no drafter named|name the trained drafter"):
            drafters.load(name, model)


def _hybrid(arch, kind, **kw):
    """The hybrid with an untrained drafter (what it drafts is beside the point: the output must not change)."""
    return HybridDrafter(Drafter.for_target(target(arch, kind), seed=3), SuffixDrafter(), **kw)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("kind", ["random", "trained"])
@pytest.mark.parametrize("which,strategy", [("suffix", "4_1_4"), ("hybrid", "3_2_6")], ids=["suffix", "hybrid-tree"])
def test_greedy_history_speculation_is_lossless(arch, kind, which, strategy):
    """A ragged batch (rows end at different steps), decoded twice with one drafter: the second time the history
    holds the first time's responses. Both times the output is the target's own; the second drafts get accepted.
    (The history drafts chains whatever the strategy; the hybrid mixes them into the trained drafter's tree.)"""
    drafter = SuffixDrafter() if which == "suffix" else _hybrid(arch, kind, min_match=1, min_expected=0.3)
    settings = GenerateSettings(strategy=strategy, max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(arch, kind))
    for _ in range(2):
        gen = generate(target(arch, kind), PROMPTS[kind], drafter, settings)
        assert tuple(map(tuple, gen.tokens)) == reference(arch, kind)
    accepted = [a for it in gen.iterations if it.mode == "spec_decode" for a in it.accepted]
    assert np.mean(accepted) >= 2  # the second pass drafts from the first's responses
    if which == "hybrid":
        assert drafter.history_rows > 0 and drafter.trained_rows > 0


@pytest.mark.parametrize("which", ["suffix", "hybrid"])
def test_batch_one_with_history_matches_the_reference(which):
    arch, kind = "llama", "trained"
    drafter = SuffixDrafter() if which == "suffix" else _hybrid(arch, kind)
    for prompt, ref in zip(PROMPTS[kind][:3], reference(arch, kind)):
        gen = generate(target(arch, kind), [prompt], drafter,
                       GenerateSettings(strategy="4_1_4", max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(arch, kind)))
        assert gen.tokens == [list(ref)]


V = 8
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]  # repeats itself: the history drafts from the first iteration on
DRAWS = 3000


@pytest.mark.parametrize("which,strategy", [("suffix", "3_1_3"), ("hybrid", "2_2_4"), ("ngram", "3_1_3")],
                         ids=["suffix", "hybrid-tree", "ngram"])
def test_sampled_history_speculation_follows_the_target_distribution(which, strategy):
    """DRAWS sibling rows of one prompt in one batch, two sampled tokens each: the drafts come from the prompt and
    (history drafting) from the siblings' own samples in flight, yet (x1, x2) follows the target's exact law. Prompt
    lookup (real.drafters.ngram) drafts from each row's prompt and own tokens alone, under the same law."""
    model = tiny_target("llama", vocab=V)
    params = SamplingParams(False, 0.9, 0.95)
    drafter = {"suffix": SuffixDrafter, "ngram": NgramDrafter}[which]() if which != "hybrid" else \
        HybridDrafter(Drafter.for_target(model, seed=5), SuffixDrafter(), min_match=2, min_expected=0.8)
    gen = generate(model, [PROMPT] * DRAWS, drafter, GenerateSettings(strategy=strategy, sampling=params,
                                                                      max_new_tokens=2, eos_token_id=()))
    x = np.array(gen.tokens)
    with torch.no_grad():
        first = model(torch.tensor([PROMPT])).logits[0, -1].numpy()
        second = model(torch.tensor([PROMPT + [t] for t in range(V)])).logits[:, -1].numpy()
    p1 = _reference_probs(first, params.temperature, params.top_p)
    joint = p1[:, None] * np.stack([_reference_probs(r, params.temperature, params.top_p) for r in second])
    assert _chi2_pvalue(np.bincount(x[:, 0], minlength=V), p1) > 1e-3
    assert _chi2_pvalue(np.bincount(x[:, 0] * V + x[:, 1], minlength=V * V), joint) > 1e-3
    spec = [it for it in gen.iterations if it.mode == "spec_decode"]
    assert max(a for it in spec for a in it.accepted) >= 1  # drafts were accepted
    if which == "hybrid":
        assert drafter.history_rows > 0 and drafter.trained_rows > 0


def test_a_history_drafter_needs_no_target_features():
    """The engine keeps no feature cache for it (and refuses to switch to a drafter that needs one)."""
    model = tiny_target("llama")
    engine = Engine(model, SuffixDrafter(), max_new_tokens=4, eos_token_id=())
    engine.add([[1, 2, 3]])
    engine.step("spec_decode")
    assert engine.cache.features is None
    with pytest.raises(TltsimError, match="reads target features"):
        engine.set_drafter(Drafter.for_target(model))
