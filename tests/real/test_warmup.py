"""A reduced draft vocabulary (EAGLE-3): lossless, its head the target's rows, saved and loaded; warm-up pieces."""
from __future__ import annotations

import pytest
import torch
from tiny_lm import MAX_NEW, PROMPTS, ragged_eos, reference, target

from real.drafters.eagle import Drafter, EagleSession
from real.engine.generate import Engine, generate
from real.settings import GenerateSettings
from real.drafters.warmup import coverage, draft_vocab, find_shipped_drafter, shipped_drafter, warm_up
from tltsim.core.errors import TltsimError

ARCH, KIND = "llama", "trained"


def _pairs():
    run = generate(target(ARCH, KIND), PROMPTS[KIND], settings=GenerateSettings(max_new_tokens=MAX_NEW, eos_token_id=(), collect_features=True))
    return [(torch.tensor(f.prompt + f.tokens), f.features) for f in run.finished]


def test_draft_vocab_is_the_most_frequent_tokens_with_eos():
    pairs = [(torch.tensor([5, 5, 5, 7, 7, 9]), None), (torch.tensor([7, 3]), None)]
    assert draft_vocab(pairs, 2, eos=[]).tolist() == [5, 7]
    assert draft_vocab(pairs, 3, eos=[1]).tolist() == [1, 5, 7]  # EOS first, then by count
    assert draft_vocab(pairs, 10, eos=[]).tolist() == [3, 5, 7, 9]
    assert coverage(pairs, torch.tensor([5, 7])) == 6 / 8


def test_the_draft_head_is_the_targets_rows_and_indices_map_back():
    model = target(ARCH, KIND)
    ids = torch.tensor([3, 11, 40, 2])
    drafter = Drafter.for_target(model, seed=0, draft_vocab=ids)
    g = torch.randn(2, 5, model.config.hidden_size, dtype=torch.float64)
    torch.testing.assert_close(drafter.head(g), model.get_output_embeddings()(g)[..., ids])
    assert drafter.to_target(torch.tensor([[0, 3], [2, 1]])).tolist() == [[3, 2], [40, 11]]
    weight = model.get_output_embeddings().weight
    saved = weight.detach().clone()
    with torch.no_grad():  # the head is a copy: a changed target (a GRPO update) shows once refreshed
        weight.add_(1.0)
    try:
        assert not torch.allclose(drafter.head(g), model.get_output_embeddings()(g)[..., ids])
        drafter.target_updated()
        torch.testing.assert_close(drafter.head(g), model.get_output_embeddings()(g)[..., ids])
    finally:
        with torch.no_grad():
            weight.copy_(saved)  # the target is shared with other tests
    full = Drafter.for_target(model, seed=0)
    assert torch.equal(full.head(g), model.get_output_embeddings()(g)) and full.to_target(ids) is ids
    for bad in ([1, 1], [model.config.vocab_size], []):
        with pytest.raises(TltsimError, match="draft vocabulary"):
            Drafter.for_target(model, draft_vocab=torch.tensor(bad, dtype=torch.long))


@pytest.mark.parametrize("strategy", ["4_1_4", "3_3_8"])
def test_a_reduced_vocabulary_drafter_is_lossless_and_drafts_only_its_tokens(strategy):
    """Half the vocabulary, from the target's own outputs: some of the target's tokens cannot be drafted,
    yet the output is the target's own, and every draft node's token is in the draft vocabulary."""
    model, pairs = target(ARCH, KIND), _pairs()
    ids = draft_vocab(pairs, model.config.vocab_size // 2, eos=[])
    drafter, losses = warm_up(model, pairs, ids, steps=120, batch_size=4, lr=1e-2, seed=0)
    assert losses[-1] < losses[0]
    engine = Engine(model, drafter, max_new_tokens=MAX_NEW, eos_token_id=ragged_eos(ARCH, KIND))
    rows = engine.add(PROMPTS[KIND])
    allowed, drafted, accepted = set(ids.tolist()), [], []
    spec_tree = EagleSession.draft
    EagleSession.draft = lambda self, *a: drafted.append(spec_tree(self, *a)) or drafted[-1]
    try:
        while engine.running:
            accepted += engine.step("spec_decode", strategy).accepted
    finally:
        EagleSession.draft = spec_tree
    assert tuple(tuple(engine.finished[i].tokens) for i in rows) == reference(ARCH, KIND)
    assert all(set(t.tokens[:, 1:].flatten().tolist()) <= allowed for t in drafted)
    assert max(accepted) >= 2  # drafts accepted: the map back to target ids is exercised


def test_save_in_bf16_and_load_keep_the_vocabulary_and_provenance(tmp_path):
    model = target(ARCH, KIND)
    ids = torch.tensor([0, 5, 9, 13])
    drafter = Drafter.for_target(model, seed=2, draft_vocab=ids)
    path = tmp_path / "d.pt"
    drafter.save(path, dtype=torch.bfloat16, meta={"command": "x"})
    payload = torch.load(path, weights_only=True)
    assert payload["meta"] == {"command": "x"} and payload["state"]["fc.weight"].dtype == torch.bfloat16
    assert "_head_weight" not in payload["state"]  # the head comes from the target at load time
    loaded = Drafter.load(path, model)
    assert torch.equal(loaded.draft_vocab, ids) and loaded.fc.weight.dtype == torch.float64
    torch.testing.assert_close(loaded.fc.weight, drafter.fc.weight.to(torch.bfloat16).to(torch.float64))


def test_only_known_models_have_a_shipped_drafter(tmp_path):
    assert shipped_drafter("smollm2-135m") == find_shipped_drafter("smollm2-135m")
    assert shipped_drafter("smollm2-135m").name == "smollm2-135m-drafter.pt"
    assert find_shipped_drafter(tmp_path) is None and find_shipped_drafter("test-llama") is None
    with pytest.raises(TltsimError, match="no drafter is shipped"):
        shipped_drafter(tmp_path)
