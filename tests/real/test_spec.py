"""Greedy speculative decoding is lossless: the same tokens as plain greedy and as transformers' generate."""
from __future__ import annotations

import pytest
import torch
from tiny_lm import MAX_NEW, PROMPTS, VOCAB, hf_greedy, ragged_eos, reference, target, tiny_target, trained_drafter

from real.drafters.eagle import Drafter
from real.engine.generate import Engine, generate
from real.engine.kvcache import RaggedCache
from real.engine.sampling import verify_greedy_chain, verify_tree
from real.settings import GenerateSettings, SamplingParams
from real.engine.spec import DraftTree, draftable
from tltsim.core.errors import TltsimError

ARCHS = ["llama", "qwen2"]
KINDS = ["random", "trained"]  # target weights
STRATEGIES = ["4_1_4", "1_1_1", "3_3_8", "4_4_20"]  # chains of 4 and 1, two trees


def _tokens(gen):
    return tuple(map(tuple, gen.tokens))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind", KINDS)
def test_plain_engine_matches_transformers_generate(arch, kind):
    lengths = [len(r) for r in reference(arch, kind)]
    # the case is ragged: rows stop at different steps, by EOS and by the length cap
    assert len(set(lengths)) >= 3 and MAX_NEW in lengths and min(lengths) < MAX_NEW
    gen = generate(target(arch, kind), PROMPTS[kind], settings=GenerateSettings(max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(arch, kind)))
    assert _tokens(gen) == reference(arch, kind)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("trained", [False, True], ids=["random-drafter", "trained-drafter"])
def test_greedy_speculation_is_lossless(arch, kind, strategy, trained):
    drafter = trained_drafter(arch, kind) if trained else Drafter.for_target(target(arch, kind), seed=3)
    gen = generate(target(arch, kind), PROMPTS[kind], drafter, GenerateSettings(strategy=strategy, max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(arch, kind)))
    assert _tokens(gen) == reference(arch, kind)
    spec = [it for it in gen.iterations if it.mode == "spec_decode"]
    assert spec and all(it.strategy == strategy for it in spec)
    assert [it.batch_size for it in spec] == sorted((it.batch_size for it in spec), reverse=True)  # batch shrinks
    assert spec[-1].batch_size < len(PROMPTS[kind])


@pytest.mark.parametrize("arch", ARCHS)
def test_batch_one_matches_generate_per_prompt(arch):
    kind = "trained"
    for prompt, ref in zip(PROMPTS[kind][:3], reference(arch, kind)):
        gen = generate(target(arch, kind), [prompt], trained_drafter(arch, kind), GenerateSettings(strategy="3_2_6", max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(arch, kind)))
        assert gen.tokens == [list(ref)]


def _mean_accept_length(arch, kind, drafter):
    gen = generate(target(arch, kind), PROMPTS[kind], drafter, GenerateSettings(strategy="4_1_4", max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(arch, kind)))
    accepted = [a for it in gen.iterations if it.mode == "spec_decode" for a in it.accepted]
    return 1 + sum(accepted) / len(accepted), accepted


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind,least", [("random", 1.8), ("trained", 3.0)])
def test_trained_drafter_gets_drafts_accepted(arch, kind, least):
    """Guards the lossless tests' reach: with a trained drafter most iterations accept drafts, so the
    accepted-path commit and KV rollback are exercised, not just the all-rejected case; on the
    trained target whole chains are accepted (bonus tokens) and some are cut short."""
    trained, accepted = _mean_accept_length(arch, kind, trained_drafter(arch, kind))
    untrained, _ = _mean_accept_length(arch, kind, Drafter.for_target(target(arch, kind)))
    assert trained >= least and trained > untrained + 0.5
    if kind == "trained":
        assert 4 in accepted and any(a < 4 for a in accepted)


def test_iteration_records_as_a_frame():
    arch, kind = "llama", "trained"
    gen = generate(target(arch, kind), PROMPTS[kind], trained_drafter(arch, kind), GenerateSettings(strategy="4_1_4", max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(arch, kind)))
    frame = gen.frame()
    assert list(frame.columns) == ["index", "mode", "strategy", "batch_size", "proposed", "accepted", "tokens",
                                   "wall_s", "reprefill", "catchup_s", "draft_s", "target_s"]
    decode = frame[frame["mode"] == "spec_decode"]
    # every emitted token is an accepted draft or the one recovered/bonus token per row, up to EOS/cap cuts
    assert decode["tokens"].sum() == sum(map(len, gen.tokens))
    assert all(t <= sum(a) + len(a) for t, a in zip(decode["tokens"], decode["accepted"]))
    assert (decode["proposed"] == 4).all() and frame["reprefill"].sum() == 1
    catchup = frame.loc[frame["reprefill"], "catchup_s"]  # the drafter's state built: timed, within the iteration
    assert (catchup > 0).all() and (catchup < frame.loc[frame["reprefill"], "wall_s"]).all()
    assert (frame.loc[~frame["reprefill"], "catchup_s"] == 0).all()
    # the drafter's and the target's shares of each decode iteration: timed, within it, the catch-up in the draft
    assert (decode["draft_s"] >= decode["catchup_s"]).all() and (decode["draft_s"] > 0).all()
    assert (decode["target_s"] > 0).all() and (decode["draft_s"] + decode["target_s"] < decode["wall_s"]).all()


def test_switching_modes_mid_generation_is_lossless():
    arch, kind = "qwen2", "trained"
    engine = Engine(target(arch, kind), trained_drafter(arch, kind), max_new_tokens=MAX_NEW,
                    eos_token_id=ragged_eos(arch, kind))
    ids = engine.add(PROMPTS[kind])
    schedule = ["decode"] * 3 + ["spec_decode"] * 2 + ["decode"] + ["spec_decode"] * 100
    records = []
    for mode in schedule:
        if not engine.running:
            break
        records.append(engine.step(mode, "3_2_5"))
    assert tuple(tuple(engine.finished[i].tokens) for i in ids) == reference(arch, kind)
    # the drafter builds (first) or catches up (later) its state exactly at each plain -> spec switch
    assert [r.reprefill for r in records[:7]] == [False, False, False, True, False, False, True]
    assert [r.mode for r in records[:7]] == schedule[:7]


def test_rows_added_mid_run_match_their_own_generation():
    arch, kind = "llama", "trained"
    prompts = PROMPTS[kind]
    engine = Engine(target(arch, kind), trained_drafter(arch, kind), max_new_tokens=MAX_NEW,
                    eos_token_id=ragged_eos(arch, kind))
    first = engine.add(prompts[:3])
    engine.step("spec_decode", "4_1_4")
    engine.step("decode")
    second = engine.add(prompts[3:5])  # joins a running batch in plain mode
    engine.step("spec_decode", "4_2_6")
    third = engine.add(prompts[5:])  # joins while the drafter state is live
    while engine.running:
        engine.step("spec_decode", "4_2_6")
    got = tuple(tuple(engine.finished[i].tokens) for i in first + second + third)
    assert got == reference(arch, kind)
    assert [r.batch_size for r in engine.iterations if r.mode == "prefill"] == [3, 2, 1]


def test_collected_features_are_the_targets_last_hidden_states():
    arch, kind = "llama", "trained"
    model = target(arch, kind)
    gen = generate(model, PROMPTS[kind][:3], trained_drafter(arch, kind), GenerateSettings(strategy="3_2_5", max_new_tokens=12, eos_token_id=(), collect_features=True))
    for row in gen.finished:
        seq = row.prompt + row.tokens
        with torch.no_grad():
            full = model.get_decoder()(input_ids=torch.tensor([seq])).last_hidden_state[0]
        assert row.features.shape == (len(seq) - 1, model.config.hidden_size)
        torch.testing.assert_close(row.features, full[:-1])


def test_transformers_reference_agrees_with_itself_across_eos():
    """The reference helper cuts at EOS exactly as the engine does (EOS kept, nothing after)."""
    arch, kind = "llama", "random"
    eos = ragged_eos(arch, kind)
    free = hf_greedy(tiny_target(arch), PROMPTS[kind], MAX_NEW, None)
    for row, ref in zip(free, reference(arch, kind)):
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
        engine.step("spec_decode")
    with pytest.raises(TltsimError, match="mode"):
        engine.step("fast")


@pytest.mark.parametrize("strategy", ["4_1_4", "5_1_3"])
def test_chain_drafting_is_the_tree_search_with_top_k_one(strategy):
    """The top-k 1 fast path (argmax chain, only `verify` drafter steps) drafts what the tree search drafts."""
    arch, kind = "llama", "trained"
    drafter = trained_drafter(arch, kind)
    engine = Engine(target(arch, kind), drafter, max_new_tokens=MAX_NEW, eos_token_id=[])
    engine.add(PROMPTS[kind])
    for mode in ["spec_decode", "decode", "spec_decode"]:  # rows of different lengths in the drafter's cache
        engine.step(mode, "4_2_6")
    state, strat = engine._draft, draftable(strategy)
    roots = torch.tensor([t[-1] for t in engine.tokens])
    g_root = state.ingest(engine.tokens, engine.cache.features)
    chain = state._chain(roots, g_root, engine.cache.lens, strat.verify)
    tree = state._tree(roots, g_root, engine.cache.lens, strat)
    assert chain.chain and not tree.chain
    for name in ["tokens", "parents", "depth"]:
        assert torch.equal(getattr(chain, name), getattr(tree, name)), name
    assert torch.equal(chain.visible(), DraftTree(tree.tokens, tree.parents, tree.depth).visible())
    assert state.cache.pending == 0  # both rolled their drafts back


def test_greedy_chain_verification_is_the_tree_walk():
    gen = torch.Generator().manual_seed(0)
    batch, n, vocab = 64, 5, 7
    logits = torch.randn(batch, n, vocab, generator=gen)
    best = logits.argmax(dim=-1)
    hits = torch.rand(batch, n - 1, generator=gen) < 0.7  # each draft matches its parent's argmax or not
    drafts = torch.where(hits, best[:, :-1], (best[:, :-1] + 1) % vocab)
    tree = DraftTree.chain_of(torch.randint(0, vocab, (batch,), generator=gen), drafts)
    chain = verify_greedy_chain(tree.tokens, logits)
    walk = verify_tree(tree.tokens, tree.parents, logits, SamplingParams(), torch.Generator())
    for got, want in zip(chain, walk):
        assert torch.equal(got, want)
    assert set(chain[1].tolist()) == set(range(n))  # every acceptance length occurs


def test_one_query_mask_is_left_out_only_when_no_slot_is_hidden():
    cache = RaggedCache(1, 2, 2, 8, torch.float64, torch.device("cpu"))
    layer = cache.cache.layers[0]

    def append(n):  # a forward's keys and values for n new slots per row
        layer.update(torch.zeros(2, 2, n, 8, dtype=torch.float64), torch.zeros(2, 2, n, 8, dtype=torch.float64))

    append(3)
    cache.commit(torch.arange(3).expand(2, 3), torch.tensor([3, 3]))
    assert not cache.ragged and cache.mask_one() is None
    append(2)
    cache.commit(torch.arange(2).expand(2, 2), torch.tensor([2, 1]))  # row 1 keeps one: slot 4 is hidden
    append(1)
    assert cache.ragged and torch.equal(cache.mask_one(), cache.mask(torch.ones(2, 1, 2, dtype=torch.bool)))
    assert (cache.mask_one()[1, 0, 0] < 0).tolist() == [False] * 4 + [True, False, False]
    cache.rollback()
    cache.select(torch.tensor([0]))
    assert not cache.ragged and cache.mask_one() is None


def _replay(arch, kind, answers, drafter, schedule, sampling=SamplingParams(), seed=1):
    engine = Engine(target(arch, kind), drafter, sampling=sampling, max_new_tokens=MAX_NEW,
                    eos_token_id=ragged_eos(arch, kind), seed=seed)
    ids = engine.add(PROMPTS[kind], answers=[list(a) for a in answers])
    for i in range(10_000):
        if not engine.running:
            break
        engine.step(schedule(i), "3_2_6")
    return tuple(tuple(engine.finished[i].tokens) for i in ids), engine.iterations


@pytest.mark.parametrize("arch", ARCHS)
def test_replayed_answers_are_emitted_whatever_the_sampling_and_drafts(arch):
    """An engine given another run's sampled answers emits them token for token, plain or speculative, under
    its own seed; drafts are accepted where they equal the recorded token."""
    kind = "random"  # a target whose samples are not its greedy answers
    sampled = SamplingParams(greedy=False, temperature=1.0)
    recorded = generate(target(arch, kind), PROMPTS[kind], settings=GenerateSettings(
        max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(arch, kind), sampling=sampled, seed=7))
    answers = _tokens(recorded)
    assert answers != reference(arch, kind)  # sampled, not the greedy answers
    mixed = lambda i: "decode" if i % 3 == 2 else "spec_decode"  # noqa: E731
    for drafter, schedule in ((None, lambda i: "decode"), (trained_drafter(arch, kind), mixed)):
        got, iterations = _replay(arch, kind, answers, drafter, schedule, sampled)
        assert got == answers
    assert any(a > 0 for it in iterations if it.mode == "spec_decode" for a in it.accepted)


@pytest.mark.parametrize("arch", ARCHS)
def test_replaying_greedy_answers_accepts_as_greedy_speculation_does(arch):
    """Replaying the greedy answers, the recorded token after each node is the target's argmax there, so a
    replaying engine emits as greedy speculation does, iteration by iteration. It accepts the same drafts up
    to a row's end; past it greedy speculation counts argmax drafts it then drops, a replay none."""
    kind = "trained"
    drafter = trained_drafter(arch, kind)
    greedy = generate(target(arch, kind), PROMPTS[kind], drafter, GenerateSettings(
        strategy="3_2_6", max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(arch, kind)))
    got, iterations = _replay(arch, kind, reference(arch, kind), drafter, lambda i: "spec_decode")
    assert got == reference(arch, kind)
    spec = lambda its: [it for it in its if it.mode == "spec_decode"]  # noqa: E731
    assert [it.tokens for it in spec(iterations)] == [it.tokens for it in spec(greedy.iterations)]
    pairs = [(a, g) for it, ig in zip(spec(iterations), spec(greedy.iterations)) for a, g in zip(it.accepted, ig.accepted)]
    assert all(a <= g for a, g in pairs) and sum(a != g for a, g in pairs) <= len(PROMPTS[kind])  # a row ends once
    assert any(a > 0 for a, _ in pairs)


def test_replayed_answers_must_fit_the_engine():
    arch, kind = "llama", "trained"
    eos = ragged_eos(arch, kind)
    t = (eos + 1) % VOCAB  # not an end-of-sequence token
    engine = Engine(target(arch, kind), max_new_tokens=4, eos_token_id=eos)
    with pytest.raises(TltsimError, match="answer 0: 3 tokens; an answer ends at its first end-of-sequence"):
        engine.add(PROMPTS[kind][:1], answers=[[t] * 3])  # short of the cap, and no EOS
    with pytest.raises(TltsimError, match="answer 0: 3 tokens"):
        engine.add(PROMPTS[kind][:1], answers=[[t, eos, eos]])  # an EOS before its last token
    with pytest.raises(TltsimError, match="answer 0: 5 tokens"):
        engine.add(PROMPTS[kind][:1], answers=[[t] * 5])  # past the cap
    with pytest.raises(TltsimError, match="1 answers for 2 prompts"):
        engine.add(PROMPTS[kind][:2], answers=[[t] * 4])
    engine.add(PROMPTS[kind][:1], answers=[[t, eos]])
    with pytest.raises(TltsimError, match="for every row or for none"):
        engine.add(PROMPTS[kind][1:2])
