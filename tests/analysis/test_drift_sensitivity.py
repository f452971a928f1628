"""The ways to get a drafter over the span of drifts: the rows compare --json gives and the report reads."""
import json
from dataclasses import replace

import pytest

from tltsim.cli import main
from tltsim.analysis.drafter.drift_sensitivity import SPAN, WAYS, answer, drift_sensitivity
from tltsim.config import ClusterConfig, DrafterWorld, SimConfig
from tltsim.trace import save

from tests.analysis.conftest import tiny_trace

CFG = SimConfig(trace="tiny.parquet", cluster=ClusterConfig(gpus=8, tp=2, max_running=16),
                policy_knobs={"threshold": 8})


@pytest.fixture(scope="module")
def rows():
    return drift_sensitivity(tiny_trace(6), CFG)


def _saved(rows, way):
    return [r["saved_per_step_s"] for r in rows if r["way"] == way]


def test_every_way_at_every_drift_of_the_span(rows):
    assert len(rows) == len(WAYS) * len(SPAN) and not any(r["fitted"] for r in rows)
    assert [r["quality_drift_per_step"] for r in rows[::len(WAYS)]] == [d for _, d in SPAN]
    lengths = [r["drift_per_step"] for r in rows[::len(WAYS)]]
    assert lengths[0] == 0 and lengths[0] < lengths[1] < lengths[2]


def test_a_frozen_drafter_loses_with_the_drift_and_the_ways_that_do_not_drift_stay(rows):
    freeze = _saved(rows, "frozen")
    assert freeze[0] > freeze[1] > freeze[2]
    assert len(set(_saved(rows, "suffix"))) == 1 and len(set(_saved(rows, "cotrain"))) == 1
    # with no drift co-training has nothing to restore and pays its update phase: no better than freezing
    assert _saved(rows, "cotrain")[0] <= freeze[0]


def test_the_answer_reads_the_rows(rows):
    text = " ".join(answer(rows))
    best = max((r for r in rows if r["quality_drift_per_step"] == 0), key=lambda r: r["saved_per_step_s"])
    assert f"{best['way']} ({best['policy']}) saves most, {best['saved_per_step_s']:.2f} s a step" in text
    flipped = [dict(r, saved_per_step_s=-r["saved_per_step_s"]) for r in rows]
    assert answer(flipped) != answer(rows)


def test_a_fitted_drift_is_marked_and_shown_as_measured():
    cfg = replace(CFG, drafter=DrafterWorld(method="mtp", q_start=0.8, drift=0.004, source="cal.json"))
    rows = drift_sensitivity(tiny_trace(3), cfg, fitted_length_drift=0.021)
    fitted = [r for r in rows if r["fitted"]]
    assert len(fitted) == len(WAYS) and all(r["drift_per_step"] == 0.021 for r in fitted)
    assert all(r["quality_drift_per_step"] == 0.004 for r in fitted)


def test_compare_json_and_the_report_answer_it(tmp_path, capsys):
    tpath = save(tiny_trace(3), tmp_path / "t.parquet")
    args = ["compare", "--trace", str(tpath), "--gpus", "8", "--tp", "2", "--max-num-seqs", "16",
            "--policies", "verl,tlt", "-o", str(tmp_path / "cmp"), "--no-progress"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["way"] for r in out["drift_sensitivity"]} == {w for w, _ in WAYS}
    assert set(out["drift_sensitivity"][0]) >= {"way", "drift_per_step", "saved_per_step_s"}
    page = (tmp_path / "cmp" / "report.html").read_text()
    assert "Is co-training worth it for this run?" in page and answer(out["drift_sensitivity"])[0] in page
