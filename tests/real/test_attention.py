"""The engine's attention (real.engine.attention) against torch's SDPA, and a model using it against the same model on SDPA."""
import pytest
import torch
import torch.nn.functional as F

from real.engine import attention
from real.engine.kvcache import RaggedCache
from real.models.targets import build_target


def _sdpa(query, key, value, mask, scaling):
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2)


@pytest.mark.parametrize("t", [1, 5, 13])
@pytest.mark.parametrize("mask_kind", ["float", "bool", "none"])
@pytest.mark.parametrize("sliced", [False, True])
def test_few_query_attention_matches_sdpa_on_slices_of_buffers_and_whole_tensors(t, mask_kind, sliced):
    if mask_kind == "none" and t > 1:
        pytest.skip("several new tokens without a mask are a causal pattern, which SDPA serves")
    gen = torch.Generator().manual_seed(t)
    batch, heads, kv_heads, dim, slots = 3, 6, 2, 8, 21
    room = 11 if sliced else 0  # a buffer with room to grow, whose first `slots` slots are the keys
    key, value = (torch.randn(batch, kv_heads, slots + room, dim, generator=gen, dtype=torch.float64)
                  .narrow(2, 0, slots) for _ in range(2))
    query = torch.randn(batch, heads, t, dim, generator=gen, dtype=torch.float64)
    visible = torch.rand(batch, 1, t, slots, generator=gen) < 0.6
    visible[..., 0] = True
    additive = torch.zeros(visible.shape, dtype=torch.float64).masked_fill(~visible, torch.finfo(torch.float64).min)
    mask = {"bool": visible, "none": None, "float": additive}[mask_kind]
    with torch.no_grad():
        out = attention.attend_few(query, key, value, mask, 0.3)
        assert out.shape == (batch, t, heads, dim) and out.is_contiguous()
        torch.testing.assert_close(out, _sdpa(query, key, value, mask, 0.3), rtol=1e-12, atol=1e-12)


def test_attend_few_leaves_to_sdpa_long_forwards_causal_patterns_and_gradients():
    key = value = torch.zeros(1, 1, 40, 4)
    few, many = torch.zeros(1, 2, attention.FEW_QUERIES, 4), torch.zeros(1, 2, attention.FEW_QUERIES + 1, 4)
    mask = lambda q: torch.zeros(1, 1, q.shape[2], 40)  # noqa: E731
    with torch.no_grad():
        assert attention.attend_few(few, key, value, mask(few)) is not None
        assert attention.attend_few(many, key, value, mask(many)) is None
        assert attention.attend_few(few, key, value, None) is None  # a causal pattern
        assert attention.attend_few(few[:, :, :1], key, value, None) is not None
    assert attention.attend_few(few, key, value, mask(few)) is None  # gradients on


def test_a_model_using_the_engines_attention_computes_what_it_computes_on_sdpa():
    """Ragged rows in a RaggedCache with room to spare: a prefill (SDPA either way), then a 5-token verify-like forward
    and a 1-token one; and a forward with gradients (training), whose gradients must be the same too."""
    models = [build_target("test-llama", seed=0).double() for _ in range(2)]
    attention.use(models[1])
    assert models[0].config._attn_implementation == "sdpa"
    config = models[0].config
    gen = torch.Generator().manual_seed(0)
    lens = torch.tensor([7, 4, 6])
    tokens = torch.randint(0, config.vocab_size, (3, 7), generator=gen)
    new_tokens = {t: torch.randint(0, config.vocab_size, (3, t), generator=gen) for t in (5, 1)}
    outs = []
    for model in models:
        cache = RaggedCache(config.num_hidden_layers, 3, config.num_key_value_heads,
                            config.hidden_size // config.num_attention_heads, torch.float64, torch.device("cpu"))
        decoder, got = model.get_decoder(), []
        with torch.no_grad():
            causal = torch.ones(7, 7, dtype=torch.bool).tril()
            valid = torch.arange(7)[None, :] < lens[:, None]
            visible = (causal[None] & valid[:, None]) | torch.eye(7, dtype=torch.bool)
            positions = torch.arange(7)[None].expand(3, 7)
            decoder(input_ids=tokens, attention_mask=cache.mask(visible), position_ids=positions, cache=cache.cache)
            cache.commit(positions, lens)
            for t in (5, 1):
                assert cache.capacity > cache.width + t  # the keys are a slice of a larger buffer
                causal_new = torch.ones(3, t, t, dtype=torch.bool).tril()
                out = decoder(input_ids=new_tokens[t], attention_mask=cache.mask(causal_new),
                              position_ids=cache.lens[:, None] + torch.arange(t), cache=cache.cache)
                got.append(out.last_hidden_state)
                cache.commit(torch.arange(t)[None].expand(3, t), torch.full((3,), t))
        loss = model(input_ids=tokens).logits.square().mean()
        loss.backward()
        outs.append((got, loss.detach(), model.get_decoder().layers[0].self_attn.q_proj.weight.grad))
    for a, b in zip(outs[0][0], outs[1][0]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=0, atol=0)
    torch.testing.assert_close(outs[0][2], outs[1][2], rtol=0, atol=0)
