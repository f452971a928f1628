"""The EAGLE drafter: what it shares with the target, training, incremental = full forward, save/load.

(Named test_spec_drafter.py: tests/control/test_drafter.py already owns the basename.)
"""
from __future__ import annotations

import pytest
import torch
from tiny_lm import PROMPTS, tiny_target, trained_drafter
from transformers import DynamicCache

from real.drafters.eagle import Drafter, DrafterLoss, _pad
from real.engine.generate import generate
from real.settings import GenerateSettings
from tltsim.core.errors import TltsimError


def test_embedding_and_head_are_the_targets_and_not_trainable():
    target = tiny_target("qwen2")
    drafter = Drafter.for_target(target)
    assert drafter.embed is target.get_input_embeddings() and drafter.lm_head is target.get_output_embeddings()
    names = set(drafter.state_dict())
    assert names and all(n.startswith(("fc.", "layer.")) for n in names)
    own = {id(p) for p in drafter.parameters()}
    assert not own & {id(p) for p in target.parameters()}
    assert type(drafter.layer) is type(target.get_decoder().layers[0])


def test_initialisation_is_seeded():
    target = tiny_target("llama")
    a, b, c = Drafter.for_target(target, seed=1), Drafter.for_target(target, seed=1), Drafter.for_target(target, seed=2)
    assert torch.equal(a.fc.weight, b.fc.weight) and not torch.equal(a.fc.weight, c.fc.weight)


def _pairs(arch="llama", n=8):
    run = generate(tiny_target(arch), PROMPTS["random"][:n], settings=GenerateSettings(max_new_tokens=16, eos_token_id=(), collect_features=True))
    return [(f.prompt + f.tokens, f.features) for f in run.finished]


def test_fit_lowers_the_loss_and_leaves_the_target_alone():
    target = tiny_target("llama")
    before = {k: v.clone() for k, v in target.state_dict().items()}
    drafter = Drafter.for_target(target, seed=0)
    losses = drafter.fit(_pairs(), steps=60, batch_size=4, lr=1e-2, seed=0)
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())


def test_loss_weights_select_the_terms():
    target = tiny_target("llama")
    drafter = Drafter.for_target(target, seed=0)
    tokens, features, lengths = _pad(_pairs(n=3), torch.device("cpu"))
    feat = drafter.loss(tokens, features, lengths, DrafterLoss(1.0, 0.0))
    tok = drafter.loss(tokens, features, lengths, DrafterLoss(0.0, 1.0))
    both = drafter.loss(tokens, features, lengths)  # defaults 1.0 and 0.1
    torch.testing.assert_close(both, feat + 0.1 * tok)


def test_padded_batch_loss_is_the_position_weighted_mean_of_row_losses():
    """Padding must not leak: the batch loss equals the per-row losses, each computed alone."""
    drafter = Drafter.for_target(tiny_target("llama"), seed=0)
    pairs = _pairs(n=3)
    tokens, features, lengths = _pad(pairs, torch.device("cpu"))
    assert len(set(lengths.tolist())) == 3
    rows = [drafter.loss(*_pad([pair], torch.device("cpu"))) for pair in pairs]
    weights = (lengths - 1).to(features.dtype)
    torch.testing.assert_close(drafter.loss(tokens, features, lengths), (torch.stack(rows) * weights).sum() / weights.sum())


def test_unrolled_passes_read_the_drafters_own_features_one_position_back():
    """unroll=2 (training-time test): the second pass reads, at position i, the first pass's g_{i-1}, and zeros
    at position 0 as the first does; so a pair with one position loses the same either way, a longer one not,
    and padding leaks into neither pass (the batch loss is still the position-weighted mean of row losses)."""
    drafter = Drafter.for_target(tiny_target("llama"), seed=0)
    pairs = _pairs(n=3)
    two = DrafterLoss(unroll=2)
    short = [(pairs[0][0][:2], pairs[0][1][:1])]
    torch.testing.assert_close(drafter.loss(*_pad(short, torch.device("cpu")), two),
                               drafter.loss(*_pad(short, torch.device("cpu"))))
    tokens, features, lengths = _pad(pairs, torch.device("cpu"))
    unrolled = drafter.loss(tokens, features, lengths, two)
    assert not torch.isclose(unrolled, drafter.loss(tokens, features, lengths))
    rows = [drafter.loss(*_pad([pair], torch.device("cpu")), two) for pair in pairs]
    weights = (lengths - 1).to(features.dtype)
    torch.testing.assert_close(unrolled, (torch.stack(rows) * weights).sum() / weights.sum())


@pytest.mark.parametrize("rows", [3, 1], ids=["ragged", "one-row"])
def test_incremental_drafting_state_equals_a_full_forward(rows):
    """The drafter's ragged cache (ingest in pieces, rows of different lengths) gives the same g as
    one causal forward over the whole sequence, which is what training sees. One row takes the
    path where nothing is ragged (inputs committed in place)."""
    drafter = trained_drafter("llama")
    pairs = _pairs(n=3)[:rows]
    state = drafter.session()
    state.add([list(t) for t, _ in pairs])
    features = torch.nn.utils.rnn.pad_sequence([f for _, f in pairs], batch_first=True)
    cut = [5, 9, 7][:rows]
    state.catch_up([t[:c] for (t, _), c in zip(pairs, cut)], features)
    state.catch_up([t for t, _ in pairs], features)
    g_last = state.g_last
    for b, (tokens, feats) in enumerate(pairs):
        n = len(tokens)
        prev = torch.cat([feats.new_zeros(1, feats.shape[1]), feats])[None, :n]
        mask = torch.zeros(1, 1, n, n, dtype=feats.dtype).masked_fill(~torch.ones(n, n).tril().bool(), float("-inf"))
        with torch.no_grad():
            g = drafter(torch.tensor([tokens]), prev, torch.arange(n)[None], mask)
        torch.testing.assert_close(g_last[b], g[0, -1])
    assert state.cache.lens.tolist() == [len(t) for t, _ in pairs]


def test_save_and_load_round_trip_the_trainable_part(tmp_path):
    target = tiny_target("qwen2")
    drafter = Drafter.for_target(target, seed=4)
    drafter.fit(_pairs("qwen2", n=4), steps=3, batch_size=2, seed=0)
    path = tmp_path / "drafter.pt"
    drafter.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["drafter.pt"]  # no temporary left behind
    loaded = Drafter.load(path, target)
    for k, v in drafter.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v)
    assert loaded.embed is target.get_input_embeddings()
    size = path.stat().st_size
    embed_bytes = target.get_input_embeddings().weight.numel() * 8
    assert size < sum(v.numel() * 8 for v in drafter.state_dict().values()) + embed_bytes  # head/embed not saved


def test_load_errors_name_the_file_and_the_fix(tmp_path):
    target = tiny_target("llama")
    with pytest.raises(TltsimError, match="no such drafter"):
        Drafter.load(tmp_path / "missing.pt", target)
    junk = tmp_path / "junk.pt"
    torch.save({"hello": 1}, junk)
    with pytest.raises(TltsimError, match="not a drafter checkpoint"):
        Drafter.load(junk, target)
    other = tmp_path / "other.pt"
    Drafter.for_target(target).save(other)
    payload = torch.load(other, weights_only=True)
    payload["hidden_size"] = 999
    torch.save(payload, other)
    with pytest.raises(TltsimError, match="hidden size"):
        Drafter.load(other, target)


def test_fit_rejects_pairs_too_short_to_learn_from():
    drafter = Drafter.for_target(tiny_target("llama"))
    with pytest.raises(TltsimError, match="2 or more tokens"):
        drafter.fit([([1], torch.zeros(0, 32, dtype=torch.float64))], steps=1)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("new", [1, 3])
def test_drafter_computes_its_layer_as_transformers_does(arch, new):
    """Drafter.forward runs its decoder layer from the layer's parts (no per-call dispatch); that must be
    the transformers layer's own forward, with a cache and a ragged mask as in drafting and without as in training."""
    drafter = Drafter.for_target(tiny_target(arch), seed=5)
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(2, new, 32, generator=gen, dtype=torch.float64)
    pos = torch.tensor([[6], [4]]) + torch.arange(new)
    rope = drafter.rotary(h, pos)
    cached = [torch.randn(2, 2, 6, 8, generator=gen, dtype=torch.float64) for _ in range(2)]
    allowed = torch.ones(2, new, 6 + new, dtype=torch.bool).tril(diagonal=6)
    allowed[1, :, 4:6] = False  # row 1 has 4 committed slots and 2 hidden ones
    mask = torch.zeros(2, 1, new, 6 + new, dtype=torch.float64).masked_fill(~allowed[:, None], float("-inf"))
    for m in [mask, None] if new == 1 else [mask]:
        ref_cache, cache = (DynamicCache(ddp_cache_data=[tuple(t.clone() for t in cached)]) for _ in range(2))
        with torch.no_grad():
            ref = drafter.layer(h, attention_mask=m, position_ids=pos, cache=ref_cache, use_cache=True,
                                position_embeddings=rope)
            got = drafter._pre_norm_layer(h, rope, m, cache.layers[0])
        torch.testing.assert_close(got, ref)
        torch.testing.assert_close(cache.layers[0].keys, ref_cache.layers[0].keys)
        torch.testing.assert_close(cache.layers[0].values, ref_cache.layers[0].values)
    causal = torch.zeros(2, 1, new, new, dtype=torch.float64).masked_fill(~torch.ones(new, new).tril().bool(), -1e9)
    with torch.no_grad():
        ref = drafter.layer(h, attention_mask=causal, position_ids=pos, position_embeddings=rope)
    torch.testing.assert_close(drafter._pre_norm_layer(h, rope, causal, None), ref)
