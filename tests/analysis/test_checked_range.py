"""Where the user is outside what was checked: published GPU figures that checked the setup
(tltsim.analysis.validation.published) and whether the ranking's order rests on the trained drafter's figures
(tltsim.analysis.drafter.ranking_sensitivity)."""
from __future__ import annotations

import pandas as pd
import pytest

from tests.analysis.conftest import tiny_trace
from tltsim.analysis.drafter.ranking_sensitivity import ranking_sensitivity, reordered
from tltsim.analysis.report.page import build_report
from tltsim.analysis.validation.published import outside, published, size_class, unchecked
from tltsim.config import ClusterConfig, SimConfig

ROWS = pd.DataFrame([
    {"row": 1, "group": "held out", "model": "qwen2.5-32b", "gpu": "h100", "policy": "tlt", "error": 0.30},
    {"row": 2, "group": "held out", "model": "qwen3-14b", "gpu": "h100", "policy": "tlt", "error": -0.10},
    {"row": 3, "group": "fitted", "model": "qwen2.5-32b", "gpu": "h100", "policy": "das", "error": 0.0},
    {"row": 4, "group": "held out", "model": "qwen2.5-7b", "gpu": "h100", "policy": "partial", "error": 4.0},
    {"row": 5, "group": "held out", "model": "qwen2.5-32b", "gpu": "a100", "policy": "partial", "error": 0.0},
])


def test_models_fall_in_size_classes_by_their_parameters():
    assert [size_class(m) for m in ("qwen2.5-7b", "qwen3-14b", "qwen2.5-32b", "llama-3.3-70b")] == [
        "under 10B", "of 10B to 40B", "of 10B to 40B", "over 40B"]
    assert size_class("no-such-model") is None


def test_a_policy_is_checked_only_by_a_held_out_row_of_its_size_class_and_gpu():
    # das: only a fitted row; partial: a model of another class, and another GPU; tlt: a 14B and a 32B row
    assert unchecked(["verl", "tlt", "das", "partial", "ideal"], "qwen2.5-32b", "h100", ROWS) == ["das", "partial"]
    assert unchecked(["tlt"], "qwen2.5-32b", "b200", ROWS) == ["tlt"]
    assert unchecked(["tlt", "partial"], "llama-3.3-70b", "h100", ROWS) == ["tlt", "partial"]


def test_the_line_names_what_no_figure_checked_and_the_error_where_one_did():
    assert outside(["verl", "tlt", "das", "ideal"], "qwen2.5-32b", "h100", ROWS) == (
        "Published GPU figures held out from fitting check 1 of these 2 policies on a model of 10B to 40B on h100 "
        "(docs/fidelity.md); the simulator's error there: tlt -10% to +30%; none checks das.")
    assert outside(["verl", "tlt"], "qwen2.5-32b", "h100", ROWS) == ""  # every policy checked: nothing to say
    assert outside(["verl", "async"], "qwen2.5-7b", "b200", ROWS) == (
        "Published GPU figures held out from fitting check 0 of this policy on a model under 10B on b200 "
        "(docs/fidelity.md); none checks async.")


def test_the_shipped_record_names_presets_tltsim_knows():
    rows = published()
    assert set(rows["group"]) <= {"fitted", "held out"} and (rows["group"] == "held out").any()
    assert rows["model"].map(size_class).notna().all()


@pytest.fixture(scope="module")
def cfg():
    return SimConfig(cluster=ClusterConfig(gpus=8, tp=2, max_running=16), policy_knobs={"threshold": 8})


def test_a_close_rival_changes_places_only_where_the_drafter_moves_the_policy_past_it(cfg):
    """verl given a time 1% under tlt's: tlt passes it when its drafter accepts 20% more, not when 20% less; the
    rows of a comparison whose policies keep their places say so."""
    trace = tiny_trace(3)
    rows = ranking_sensitivity(trace, cfg, {"tlt": 100.0, "verl": 99.0})
    by = {r["change"]: r for r in rows}
    assert list(by) == ["accepted length -20%", "accepted length +20%", "drift -20%", "drift +20%"]
    assert all(r["before"] == ["verl", "tlt"] for r in rows)
    assert by["accepted length +20%"]["swapped"] == [("verl", "tlt")]
    assert by["accepted length -20%"]["swapped"] == []
    assert "accepted length +20% puts tlt ahead of verl" in reordered(rows)
    far = ranking_sensitivity(trace, cfg, {"tlt": 50.0, "verl": 99.0})
    assert not any(r["swapped"] for r in far) and "holds over the first 3 steps if the trained drafter" in reordered(far)


def test_without_a_trained_drafter_there_is_nothing_to_move(cfg):
    assert ranking_sensitivity(tiny_trace(3), cfg, {"verl": 1.0, "tlt-base": 2.0, "das": 3.0}) == []
    assert reordered([]) == ""


def test_the_report_puts_both_lines_beneath_the_ranking(base, tlt):
    rows = [{"change": "drift +20%", "before": ["tlt", "verl"], "order": ["verl", "tlt"], "swapped": [("tlt", "verl")]}]
    page = build_report([base, tlt], sensitivity=rows)
    summary = page[page.index('id="summary"'):page.index('id="explained"')]
    box = summary[summary.index('<div class="checked-range">'):]
    assert summary.count('<div class="checked-range">') == 1 and box.count("<div>") == 2  # one box, a line each
    assert "drift +20% puts verl ahead of tlt" in box and "check 0 of this policy" in box
