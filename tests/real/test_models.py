"""Target presets (Llama, Qwen2, grouped-query attention) and loading from a directory or a preset name."""
import pytest
import torch
from transformers import LlamaForCausalLM, Qwen2ForCausalLM

from real.models.targets import PRESETS, build_target, load_target
from real.tasks.gcd import Tokenizer
from tltsim.core.errors import TltsimError


@pytest.mark.parametrize("preset, cls", [("test-llama", LlamaForCausalLM), ("test-qwen2", Qwen2ForCausalLM)])
def test_preset_builds_with_gqa_and_round_trips(tmp_path, preset, cls):
    model = build_target(preset, seed=3)
    assert isinstance(model, cls)
    cfg = model.config
    assert cfg.num_key_value_heads < cfg.num_attention_heads
    assert cfg.vocab_size == Tokenizer().vocab_size
    ids = torch.randint(0, cfg.vocab_size, (2, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(input_ids=ids).logits
    model.save_pretrained(tmp_path)
    loaded = load_target(tmp_path)
    assert isinstance(loaded, cls) and not loaded.training
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, before)


def test_every_preset_is_gqa_with_whole_heads():
    for name, p in PRESETS.items():
        assert p.arch in ("llama", "qwen2"), name
        assert p.kv_heads < p.heads and p.heads % p.kv_heads == 0 and p.hidden % p.heads == 0, name


def test_build_is_deterministic_by_seed_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = build_target("test-qwen2", seed=1)
    assert torch.equal(torch.rand(3), expected)
    b, c = build_target("test-qwen2", seed=1), build_target("test-qwen2", seed=2)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_load_target_by_preset_name_and_errors(tmp_path):
    assert isinstance(load_target("test-llama"), LlamaForCausalLM)
    with pytest.raises(TltsimError, match="'no-such-model'.*presets: tiny-llama"):
        load_target("no-such-model")
    with pytest.raises(TltsimError, match="neither a save_pretrained directory"):
        load_target(tmp_path)  # a directory without config.json
