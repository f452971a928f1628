from pathlib import Path

import numpy as np
import pytest

from tltsim.cost import CostParams, Roofline
from tltsim.core.errors import TltsimError
from tltsim.hardware import load_gpu, load_model, preset_names

# docs/design.md#single-stream-decode: single-stream decode without SD, Qwen2.5-7B (tokens/s)
MEASURED = {"h100": 165, "a100": 93}


@pytest.mark.parametrize("gpu", sorted(MEASURED))
def test_bs1_decode_rate_within_25_percent_of_measured(gpu):
    cost = Roofline(load_model("qwen2.5-7b"), load_gpu(gpu), tp=1)
    rate = 1 / float(cost.decode_time(1, 1000))
    assert abs(rate / MEASURED[gpu] - 1) < 0.25, f"{gpu}: {rate:.1f} tok/s vs measured {MEASURED[gpu]}"


def test_presets_cover_the_required_names_case_insensitively():
    assert {"h100", "h200", "a100", "b200", "h20"} <= set(preset_names("gpus"))
    for name in ["Qwen2.5-7B", "qwen2.5-32b", "DeepSeek-R1-Distill-Qwen-7B", "llama-3.1-8b", "LLAMA-3.3-70B"]:
        assert load_model(name).params > 1e9
    assert 7.5e9 < load_model("qwen2.5-7b").params < 7.7e9  # the published 7.61B
    assert 1.75e9 < load_model("deepseek-r1-distill-qwen-1.5b").params < 1.8e9  # the model card's 1.78B
    assert 72.5e9 < load_model("qwen2-72b").params < 72.9e9  # the model card's 72.7B


def test_user_preset_file(tmp_path):
    f = tmp_path / "mygpu.toml"
    f.write_text('name = "X1"\nmemory_gb = 40\nbandwidth_tbs = 1.0\nbf16_tflops = 100\ninterconnect_gbs = 100\n')
    assert load_gpu(str(f)).name == "X1"
    f.write_text('name = "X1"\nmemory_gb = 40\n')
    with pytest.raises(TltsimError, match="missing key"):
        load_gpu(str(f))


def test_unknown_preset_lists_the_choices():
    with pytest.raises(TltsimError, match="unknown gpu preset 'v100'; choose one of a100, b200"):
        load_gpu("v100")


def test_model_that_does_not_fit_is_a_clear_error():
    with pytest.raises(TltsimError, match="Llama-3.3-70B does not fit on A100 at TP 1"):
        Roofline(load_model("llama-3.3-70b"), load_gpu("a100"), tp=1)


def test_verify_cost_goes_compute_bound_with_batch_times_tokens():
    """SD loses at large batch because verification turns compute-bound: per-token verify cost rises."""
    cost = Roofline(load_model("qwen2.5-7b"), load_gpu("h100"), tp=1)
    small = float(cost.verify_time(1, 16, 1000)) / float(cost.decode_time(1, 1000))
    large = float(cost.verify_time(128, 16, 128_000)) / float(cost.decode_time(128, 128_000))
    assert small < 1.3 < 3 < large


def test_weak_compute_gpu_has_a_lower_ridge():
    """H20's ridge (FLOPs/byte) is far below H100's, so verification saturates at a smaller batch."""
    p = CostParams()
    h100 = Roofline(load_model("qwen2.5-7b"), load_gpu("h100"), 1, p)
    h20 = Roofline(load_model("qwen2.5-7b"), load_gpu("h20"), 1, p)
    ratio = lambda c: float(c.verify_time(4, 32, 4000)) / float(c.decode_time(4, 4000))
    assert ratio(h20) > 2 * ratio(h100)


def test_a_model_directory_is_costed_from_its_own_config(tmp_path):
    """A Hugging Face model directory (or its config.json) is a model as it is: the shipped target's config gives
    its own shape, and a config that is no causal LM's is one line naming the key it lacks."""
    from tltsim.core.errors import TltsimError
    from tltsim.hardware import load_model

    shipped = Path(__file__).resolve().parents[2] / "real" / "assets" / "gcd-tiny-llama"
    m = load_model(str(shipped))
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.intermediate, m.vocab) == (4, 128, 4, 2, 384, 19)
    assert m.head_dim == 32 and m.tied_embeddings and load_model(str(shipped / "config.json")) == m
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    with pytest.raises(TltsimError, match="no 'num_hidden_layers'"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("tp", [1, 4])
def test_segment_time_of_plain_numbers_is_the_array_sum(tp):
    # the event-driven executors time one stretch at a time with plain numbers: the scalar path gives the same sums
    cost = Roofline(load_model("qwen2.5-7b"), load_gpu("h100"), tp)
    rng = np.random.default_rng(0)
    for _ in range(500):
        q, k = int(rng.integers(1, 512)), int(rng.integers(1, 6))
        ctx, growth, n = float(rng.uniform(0, 1e6)), float(rng.uniform(0, 600)), float(rng.uniform(0.3, 500))
        whole = float(cost.segment_time(np.array([q]), np.array([k]), np.array([ctx]), np.array([growth]),
                                        np.array([n]))[0])
        assert cost.segment_time(q, k, ctx, growth, n) == pytest.approx(whole, rel=1e-12)
