"""Where the replay decided otherwise (tltsim/analysis/validation/divergence.py): on the shipped SmolLM2 pair, which
`tltsim validate` reports, and the re-derived views agree with what each side did."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tltsim.analysis.validation.divergence import COLUMNS, decision_views, divergences
from tltsim.analysis.validation.validate import validate, write
from tltsim.core.records import Result

PAIR = ["traces/runs/real_verl_smollm2", "traces/runs/real_tlt_smollm2"]
PROFILE = "traces/profiles/smollm2_cpu_profile.csv"


@pytest.fixture(scope="module")
def validation():
    return validate(PAIR, PROFILE)


def test_validate_says_where_and_why_the_replay_decided_otherwise(validation, tmp_path):
    d = validation.divergence
    assert list(d.columns) == COLUMNS and len(d) > 0
    assert set(d["run"]) == {"tlt (real_tlt_smollm2)"}  # verl never speculates: no decision to differ on
    assert not d.duplicated(["run", "step", "engine"]).any()  # the first divergence of each step and engine
    work = validation.work
    spec = work[(work["metric"] == "spec_iterations") & work["step"].notna() & work["run"].str.startswith("tlt")]
    differing = spec[spec["measured"] != spec["predicted"]]
    # where the two sides' speculative iterations differ in number, their modes differed somewhere: reported
    # (the converse need not hold: two sides can speculate as often, at different iterations)
    assert set(zip(differing["step"], differing["engine"])) <= set(zip(d["step"], d["engine"]))
    # each side's guard verdict is the mode it chose, where the switch was on on both sides
    guard = d[d["cause"] == "guard"]
    assert len(guard) > 0 and (guard["measured_batch"] == guard["predicted_batch"]).all()
    assert (guard["measured_pays"] == (guard["measured_mode"] == "spec_decode")).all()
    assert (guard["predicted_pays"] == (guard["predicted_mode"] == "spec_decode")).all()
    assert np.isfinite(guard[["measured_plain_s", "predicted_plain_s"]].to_numpy()).all()
    write(validation, tmp_path / "v")
    assert (tmp_path / "v" / "divergence.csv").is_file()
    assert len(json.loads((tmp_path / "v" / "validation.json").read_text())["divergence"]) == len(d)


def test_a_run_against_itself_never_diverges_and_the_views_follow_the_switch():
    run = Result.load(PAIR[1])
    knobs = run.config["knobs"]
    assert divergences("tlt", run, run, knobs).empty
    views = decision_views(run, int(knobs["threshold"]), int(knobs["patience"]))
    it = run.iterations
    assert len(views) == len(it)
    # a speculative iteration only ever follows an on switch (the run's own switch decided it)
    spec = views[views["mode"] == "spec_decode"]
    assert spec["switch_on"].all() and (spec["batch"] <= int(knobs["threshold"])).all()
    assert divergences("verl", Result.load(PAIR[0]), Result.load(PAIR[0]), {}).empty
