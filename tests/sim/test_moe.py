"""Qwen3 presets (dense and mixture-of-experts) and the MoE cost model: a decode iteration reads the experts its
batch is routed to."""
from dataclasses import replace

import numpy as np
import pytest
import yaml

from tltsim.config import ClusterConfig, SimConfig
from tltsim.cost import Roofline
from tltsim.cost.moe import expected_experts
from tltsim.hardware import ModelSpec, load_gpu, load_model
from tltsim.sim.simulator import Simulator
from tltsim.trace import synth
from tltsim.verl_config import read_verl_config

# total and activated parameters (billions) as each model card on Hugging Face states them
PUBLISHED = {"qwen3-0.6b": (0.6, 0.6), "qwen3-1.7b": (1.7, 1.7), "qwen3-4b": (4.0, 4.0), "qwen3-8b": (8.2, 8.2),
             "qwen3-14b": (14.8, 14.8), "qwen3-32b": (32.8, 32.8), "qwen3-30b-a3b": (30.5, 3.3),
             "qwen3-235b-a22b": (235, 22)}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_qwen3_presets_load_with_their_published_sizes(name):
    m = load_model(name)
    total, active = PUBLISHED[name]
    assert m.params / 1e9 == pytest.approx(total, rel=0.03) and m.active_params / 1e9 == pytest.approx(active, rel=0.03)
    assert m.head_dim == 128 and (m.experts > 0) == (total != active)


def test_the_expected_distinct_experts_match_a_sampled_router():
    rng = np.random.default_rng(0)
    for tokens in (1, 4, 16, 64, 256):
        hits = [len(np.unique(np.concatenate([rng.choice(128, 8, replace=False) for _ in range(tokens)])))
                for _ in range(300)]
        assert float(expected_experts(tokens, 128, 8)) == pytest.approx(np.mean(hits), rel=0.02)
    assert float(expected_experts(1, 128, 8)) == pytest.approx(8) and float(expected_experts(0, 128, 8)) == 0


def _dense_equivalent(m: ModelSpec) -> ModelSpec:
    """The same model with every expert in one dense MLP: an iteration reads all of them."""
    return replace(m, intermediate=m.experts * m.moe_intermediate, experts=0, experts_per_token=0, moe_intermediate=0)


def test_moe_decode_reads_few_experts_at_batch_1_and_nearly_all_at_large_batches():
    moe_model = load_model("qwen3-30b-a3b")
    dense_model = _dense_equivalent(moe_model)
    assert dense_model.params == pytest.approx(moe_model.params, rel=1e-3)  # the router is all that differs
    moe, dense = (Roofline(m, load_gpu("h100"), tp=1) for m in (moe_model, dense_model))
    batches = np.array([1, 2, 8, 32, 128, 512, 2048])
    reads = moe.weights_time(batches) / dense.weights_time(batches)
    assert np.all(np.diff(reads) > 0) and reads[0] < 0.2 and reads[-1] > 0.99
    assert float(moe.decode_time(1, 1000)) < 0.25 * float(dense.decode_time(1, 1000))
    step = moe.decode_time(batches, batches * 1000)
    assert np.all(np.diff(step) > 0) and np.all(np.diff(step / batches) < 0)  # dearer by batch, cheaper by token


def test_moe_segments_sum_their_iterations():
    cost = Roofline(load_model("qwen3-30b-a3b"), load_gpu("h100"), tp=2)
    batch, ctx0, n = 24, 24 * 700, 50
    one_by_one = sum(float(cost.decode_time(batch, ctx0 + batch * i)) for i in range(n))
    assert float(cost.segment_time(batch, 1, ctx0, batch, n)) == pytest.approx(one_by_one, rel=1e-9)


def test_a_verl_config_naming_qwen3_30b_a3b_picks_its_preset_and_simulates(tmp_path):
    cfg = {"actor_rollout_ref": {"model": {"path": "Qwen/Qwen3-30B-A3B"},
                                 "rollout": {"tensor_model_parallel_size": 2}},
           "trainer": {"n_gpus_per_node": 8, "nnodes": 1}}
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    v = read_verl_config(tmp_path)
    assert v.model == "qwen3-30b-a3b" and not v.notes()
    for path, preset in (("/ckpt/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"), ("Qwen/Qwen3-8B-Base", "qwen3-8b"),
                         ("Qwen/Qwen3-32B", "qwen3-32b"), ("Qwen/Qwen3-0.6B", "qwen3-0.6b")):
        assert replace(v, model_path=path).model == preset
    trace = synth("dapo", 2, 16, 4, 2048, seed=0)
    result = Simulator(trace, SimConfig(cluster=ClusterConfig(gpus=8, tp=2, gpu="h100", model=v.model))).run()
    assert result.summary["rollout_s"] > 0 and result.config["cluster"]["model"] == "qwen3-30b-a3b"


def test_the_design_docs_table_is_the_presets():
    """docs/design.md#model-presets lists each Qwen3 preset's fields: they must be the shipped files'."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    rows = [r.split("|")[1:-1] for r in text.splitlines() if r.startswith("| qwen3-")]
    assert sorted(r[0].strip() for r in rows) == sorted(PUBLISHED)
    for name, source, layers, hidden, heads, head_dim, inter, experts, tied in ([c.strip() for c in r] for r in rows):
        m = load_model(name)
        assert source == f"huggingface.co/Qwen/{m.name}"
        assert (int(layers), int(hidden), heads, int(head_dim), int(inter), tied) == \
            (m.layers, m.hidden, f"{m.heads} / {m.kv_heads}", m.head_dim, m.intermediate, "yes" if m.tied_embeddings else "no")
        assert experts == (f"{m.experts} ({m.experts_per_token}, {m.moe_intermediate})" if m.experts else "")
