"""Greedy speculative decoding is lossless: the same tokens as plain greedy and as transformers' generate."""
from __future__ import annotations

import pytest
import torch
from tiny_lm import MAX_NEW, PROMPTS, VOCAB, hf_greedy, ragged_eos, reference, tiny_target, trained_drafter

import real
from real.generate import Engine
from real.spec import DraftTree, draftable
from tltsim.errors import TltsimError

ARCHS = ["llama", "qwen2"]
STRATEGIES = ["4_1_4", "1_1_1", "3_3_8", "4_4_20"]  # chains of 4 and 1, two trees


def _tokens(gen):
    return tuple(map(tuple, gen.tokens))


@pytest.mark.parametrize("arch", ARCHS)
def test_plain_engine_matches_transformers_generate(arch):
    target, eos = tiny_target(arch), ragged_eos(arch)
    lengths = [len(r) for r in reference(arch)]
    # the case is ragged: rows stop at different steps, by EOS and by the length cap
    assert len(set(lengths)) >= 3 and MAX_NEW in lengths and min(lengths) < MAX_NEW
    assert _tokens(real.generate(target, PROMPTS, max_new_tokens=MAX_NEW, eos_token_id=eos)) == reference(arch)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("trained", [False, True], ids=["random-drafter", "trained-drafter"])
def test_greedy_speculation_is_lossless(arch, strategy, trained):
    target, eos = tiny_target(arch), ragged_eos(arch)
    drafter = trained_drafter(arch) if trained else real.Drafter.for_target(target, seed=3)
    gen = real.generate(target, PROMPTS, drafter=drafter, strategy=strategy, max_new_tokens=MAX_NEW, eos_token_id=eos)
    assert _tokens(gen) == reference(arch)
    spec = [it for it in gen.iterations if it.mode == "spec"]
    assert spec and all(it.strategy == strategy for it in spec)
    assert [it.batch_size for it in spec] == sorted((it.batch_size for it in spec), reverse=True)  # batch shrinks
    assert spec[-1].batch_size < len(PROMPTS)


@pytest.mark.parametrize("arch", ARCHS)
def test_batch_one_matches_generate_per_prompt(arch):
    target, eos = tiny_target(arch), ragged_eos(arch)
    for prompt, ref in zip(PROMPTS[:3], reference(arch)):
        gen = real.generate(target, [prompt], drafter=trained_drafter(arch), strategy="3_2_6",
                            max_new_tokens=MAX_NEW, eos_token_id=eos)
        assert gen.tokens == [list(ref)]


@pytest.mark.parametrize("arch", ARCHS)
def test_trained_drafter_gets_drafts_accepted(arch):
    """Guards the lossless tests' reach: with a trained drafter most iterations accept drafts, so the
    accepted-path commit and KV rollback are exercised, not just the all-rejected case."""
    target, eos = tiny_target(arch), ragged_eos(arch)

    def mean_accept_length(drafter):
        gen = real.generate(target, PROMPTS, drafter=drafter, strategy="4_1_4", max_new_tokens=MAX_NEW, eos_token_id=eos)
        accepted = [a for it in gen.iterations if it.mode == "spec" for a in it.accepted]
        return 1 + sum(accepted) / len(accepted)

    trained, untrained = mean_accept_length(trained_drafter(arch)), mean_accept_length(real.Drafter.for_target(target))
    assert trained >= 1.8 and trained > untrained + 0.5


def test_switching_modes_mid_generation_is_lossless():
    arch = "qwen2"
    target, eos = tiny_target(arch), ragged_eos(arch)
    engine = Engine(target, trained_drafter(arch), max_new_tokens=MAX_NEW, eos_token_id=eos)
    ids = engine.add(PROMPTS)
    schedule = ["plain"] * 3 + ["spec"] * 2 + ["plain"] + ["spec"] * 100
    records = []
    for mode in schedule:
        if not engine.running:
            break
        records.append(engine.step(mode, "3_2_5"))
    assert tuple(tuple(engine.finished[i].tokens) for i in ids) == reference(arch)
    # the drafter is rebuilt exactly at each plain -> spec switch
    assert [r.reprefill for r in records[:7]] == [False, False, False, True, False, False, True]
    assert [r.mode for r in records[:7]] == schedule[:7]


def test_rows_added_mid_run_match_their_own_generation():
    arch = "llama"
    target, eos = tiny_target(arch), ragged_eos(arch)
    engine = Engine(target, trained_drafter(arch), max_new_tokens=MAX_NEW, eos_token_id=eos)
    first = engine.add(PROMPTS[:3])
    engine.step("spec", "4_1_4")
    engine.step("plain")
    second = engine.add(PROMPTS[3:5])  # joins a running batch in plain mode
    engine.step("spec", "4_2_6")
    third = engine.add(PROMPTS[5:])  # joins while the drafter state is live
    while engine.running:
        engine.step("spec", "4_2_6")
    got = tuple(tuple(engine.finished[i].tokens) for i in first + second + third)
    assert got == reference(arch)
    assert [r.batch_size for r in engine.iterations if r.mode == "prefill"] == [3, 2, 1]


def test_collected_features_are_the_targets_last_hidden_states():
    arch = "llama"
    target = tiny_target(arch)
    gen = real.generate(target, PROMPTS[:3], drafter=trained_drafter(arch), strategy="3_2_5", max_new_tokens=12,
                        eos_token_id=[], collect_features=True)
    for row in gen.finished:
        seq = row.prompt + row.tokens
        with torch.no_grad():
            full = target.get_decoder()(input_ids=torch.tensor([seq])).last_hidden_state[0]
        assert row.features.shape == (len(seq) - 1, target.config.hidden_size)
        torch.testing.assert_close(row.features, full[:-1])


def test_transformers_reference_agrees_with_itself_across_eos():
    """The reference helper cuts at EOS exactly as the engine does (EOS kept, nothing after)."""
    arch = "llama"
    eos = ragged_eos(arch)
    free = hf_greedy(tiny_target(arch), PROMPTS, MAX_NEW, None)
    for row, ref in zip(free, reference(arch)):
        assert list(ref) == (row[: row.index(eos) + 1] if eos in row else row)


def test_tree_visibility_is_ancestors_and_self():
    tree = DraftTree(tokens=torch.tensor([[5, 6, 7, 8, 9]]), parents=torch.tensor([[-1, 0, 0, 1, 3]]),
                     depth=torch.tensor([[0, 1, 1, 2, 3]]))
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 0, 1, 1]])
    assert torch.equal(tree.visible()[0], expected.bool())


@pytest.mark.parametrize("text", ["4_1", "0_1_1", "a_b_c", "2_2_9"])
def test_bad_strategy_strings_are_user_errors(text):
    with pytest.raises(TltsimError, match="strategy"):
        draftable(text)


def test_bad_prompts_and_modes_are_user_errors():
    engine = Engine(tiny_target("llama"), max_new_tokens=4)
    with pytest.raises(TltsimError, match="prompt 1"):
        engine.add([[1, 2], [VOCAB + 5]])
    engine.add([[1, 2]])
    with pytest.raises(TltsimError, match="drafter"):
        engine.step("spec")
    with pytest.raises(TltsimError, match="mode"):
        engine.step("fast")
