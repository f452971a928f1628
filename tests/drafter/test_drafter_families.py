"""Each drafter family's drafting cost per speculative iteration, against the cost model's drafter forward."""
import pytest

from tltsim.control.strategy import Strategy
from tltsim.cost.profiled import Profiled
from tltsim.cost.roofline import Roofline
from tltsim.hardware import load_gpu, load_model
from tltsim.drafter.families import FAMILIES, TRAINING

S = Strategy(4, 2, 8)


@pytest.fixture(scope="module")
def cost():
    return Roofline(load_model("qwen2.5-7b"), load_gpu("h100"), 4)


def test_every_family_names_how_it_trains_and_its_source():
    assert set(FAMILIES) == {"mtp", "eagle", "eagle3", "draft-model", "block", "history", "ngram"}
    for f in FAMILIES.values():
        assert f.trains and set(f.trains) <= set(TRAINING) and f.source
    assert FAMILIES["mtp"].trains[0] == "actor-update"
    assert FAMILIES["eagle"].trains[0] == "spot"
    assert FAMILIES["block"].trains[0] == "periodic"


@pytest.mark.parametrize("name", ["mtp", "eagle", "eagle3"])
def test_a_head_family_pays_one_drafter_forward_per_draft_step(cost, name):
    assert FAMILIES[name].drafting_time(cost, 8, S) == pytest.approx(S.depth * cost.draft_time(8, S.topk))


def test_a_draft_model_pays_a_small_models_forward_per_draft_step(cost):
    head = FAMILIES["eagle"].drafting_time(cost, 8, S)
    small = FAMILIES["draft-model"].drafting_time(cost, 8, S)
    ratio = load_model("qwen3-0.6b").params / (cost.model.drafter_params + cost.model.vocab * cost.model.hidden)
    assert small == pytest.approx(ratio * head)
    assert small != pytest.approx(head)


def test_a_block_drafter_pays_one_forward_over_the_block(cost):
    block = FAMILIES["block"].drafting_time(cost, 8, S)
    assert block == pytest.approx(cost.draft_time(8 * S.depth, S.topk))
    assert block < FAMILIES["eagle"].drafting_time(cost, 8, S)  # the weights read once, not depth times


@pytest.mark.parametrize("name", ["history", "ngram"])
def test_a_model_free_family_pays_no_forward(cost, name):
    assert FAMILIES[name].model_free and FAMILIES[name].drafting_time(cost, 8, S) == 0.0


def test_a_cost_model_without_a_target_counts_a_draft_model_as_one_forward():
    c = Profiled({"c0": 0.01, "c_q": 1e-4, "c_kv": 0.0, "c_att": 0.0, "d0": 0.001, "d_q": 1e-5})
    assert FAMILIES["draft-model"].drafting_time(c, 8, S) == pytest.approx(FAMILIES["eagle"].drafting_time(c, 8, S))
