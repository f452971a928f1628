"""Each drafter method's drafting cost per speculative iteration, against the cost model's drafter forward; the
older spellings of methods and trainings."""
import pytest

from tltsim.control.strategy import Strategy
from tltsim.cost.profiled import Profiled
from tltsim.cost.roofline import Roofline
from tltsim.hardware import load_gpu, load_model
from tltsim.core.drafter_names import METHOD_NAMES, MODEL_FREE, TRAINED, TRAINING_NAMES, method_name, training_name
from tltsim.drafter.methods import METHODS

S = Strategy(4, 2, 8)


@pytest.fixture(scope="module")
def cost():
    return Roofline(load_model("qwen2.5-7b"), load_gpu("h100"), 4)


def test_every_method_names_how_it_trains_and_its_source():
    assert tuple(METHODS) == METHOD_NAMES  # a cost row for every name, in its order
    assert tuple(n for n, m in METHODS.items() if m.model_free) == MODEL_FREE
    for m in METHODS.values():
        assert m.trains and set(m.trains) <= set(TRAINING_NAMES) and m.source
    assert METHODS["mtp"].trains[0] == "cotrain"
    assert METHODS["eagle"].trains[0] == "spot"
    assert METHODS["dflash"].trains[0] == "periodic"
    assert set(TRAINED) == {"eagle", "eagle3", "mtp", "draft_model", "dflash", "dspark"}


@pytest.mark.parametrize("old, new", [("draft_model", "draft_model"), ("block", "dflash"), ("history", "suffix"),
                                      ("eagle", "eagle"), ("nope", None), ("adaptive", None)])
def test_an_older_method_spelling_reads_as_its_name(old, new):
    assert method_name(old) == new


@pytest.mark.parametrize("old, new", [("actor-update", "cotrain"), ("never", "frozen"), ("freeze", "frozen"),
                                      ("co-train", "cotrain"), ("spot-train", "spot"), ("spot", "spot"), ("x", None)])
def test_an_older_training_spelling_reads_as_its_name(old, new):
    assert training_name(old) == new


@pytest.mark.parametrize("name", ["mtp", "eagle", "eagle3"])
def test_a_head_method_pays_one_drafter_forward_per_draft_step(cost, name):
    vocab = METHODS[name].vocab
    assert METHODS[name].drafting_time(cost, 8, S) == pytest.approx(S.depth * cost.draft_time(8, S.topk, vocab))


def test_eagle3_reads_its_draft_vocabularys_head_not_the_targets(cost):
    """EAGLE-3's forward reads and multiplies an output head of its draft vocabulary: what it saves against the EAGLE
    drafter is the rest of the target's lm_head rows, read at the roofline's bandwidth and multiplied at its FLOPs
    (memory and compute time add: overlap 0); its fixed cost a forward is the EAGLE drafter's."""
    m, p = cost.model, cost.p
    assert METHODS["eagle3"].vocab == 32000 < m.vocab and p.overlap == 0
    rows = (m.vocab - 32000) * m.hidden
    per_forward = rows * 2 / cost.tp / (cost.gpu.bandwidth * p.eta_bw) + 2 * rows * S.topk / cost.tp / (
        cost.gpu.flops * p.eta_flops)  # bf16 bytes read, FLOPs of the S.topk rows a forward expands at batch 1
    saved = METHODS["eagle"].drafting_time(cost, 1, S) - METHODS["eagle3"].drafting_time(cost, 1, S)
    assert saved == pytest.approx(S.depth * per_forward)
    assert float(cost.draft_time(1, 1, m.vocab)) == float(cost.draft_time(1, 1))  # the target's head: as before


def test_a_profile_times_the_drafter_it_has_whatever_its_vocabulary():
    c = Profiled({"c0": 0.01, "c_q": 1e-4, "c_kv": 0.0, "c_att": 0.0, "d0": 0.001, "d_q": 1e-5})
    assert METHODS["eagle3"].drafting_time(c, 8, S) == pytest.approx(METHODS["eagle"].drafting_time(c, 8, S))


def test_a_draft_model_pays_a_small_models_forward_per_draft_step(cost):
    head = METHODS["eagle"].drafting_time(cost, 8, S)
    small = METHODS["draft_model"].drafting_time(cost, 8, S)
    ratio = load_model("qwen3-0.6b").params / (cost.model.drafter_params + cost.model.vocab * cost.model.hidden)
    assert small == pytest.approx(ratio * head)
    assert small != pytest.approx(head)


def test_a_block_drafter_pays_one_forward_over_the_block(cost):
    block = METHODS["dflash"].drafting_time(cost, 8, S)
    assert block == pytest.approx(cost.draft_time(8 * S.depth, S.topk))
    assert block < METHODS["eagle"].drafting_time(cost, 8, S)  # the weights read once, not depth times


@pytest.mark.parametrize("name", ["suffix", "ngram"])
def test_a_model_free_method_pays_no_forward(cost, name):
    assert METHODS[name].model_free and METHODS[name].drafting_time(cost, 8, S) == 0.0


def test_a_cost_model_without_a_target_counts_a_draft_model_as_one_forward():
    c = Profiled({"c0": 0.01, "c_q": 1e-4, "c_kv": 0.0, "c_att": 0.0, "d0": 0.001, "d_q": 1e-5})
    assert METHODS["draft_model"].drafting_time(c, 8, S) == pytest.approx(METHODS["eagle"].drafting_time(c, 8, S))
