"""The work domain of `tltsim validate` on the shipped CPU pair (traces/runs/real_verl_cpu, traces/runs/real_tlt_cpu,
traces/profiles/real_cpu_profile.csv): counts checked against the runs' own iterations frames, speed-invariance, and
what `validate -o` writes."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tltsim.cli import main
from tltsim.core.errors import TltsimError
from tltsim.core.records import Result
from tltsim.analysis.validation.validate import validate, write
from tltsim.analysis.validation.work_domain import WORK_METRICS, run_totals, work_metrics

ROOT = Path(__file__).resolve().parents[2]
RUNS = [ROOT / "traces" / "runs" / "real_verl_cpu", ROOT / "traces" / "runs" / "real_tlt_cpu"]
PROFILE = ROOT / "traces" / "profiles" / "real_cpu_profile.csv"
VERL, TLT = "verl (real_verl_cpu)", "tlt (real_tlt_cpu)"


@pytest.fixture(scope="module")
def plain():
    return validate(RUNS, PROFILE)


@pytest.fixture(scope="module")
def scaled():
    return validate(RUNS, PROFILE, speed=True)


def _cell(work, run, step, engine, metric, side):
    w = work[(work.run == run) & (work.metric == metric)]
    w = w[w.step.isna()] if step is None else w[(w.step == step) & (w.engine.isna() if engine is None else w.engine == engine)]
    assert len(w) == 1, (run, step, engine, metric)
    return w[side].iloc[0]


def test_a_verl_run_never_speculates_on_either_side(plain):
    w = plain.work[plain.work.run == VERL]
    for side in ("measured", "predicted"):
        spec = w[w.metric.isin(["spec_iterations", "accepted_tokens", "drafter_train_samples"])][side]
        assert (spec == 0).all() and w[w.metric.isin(["switch_batch", "switch_iteration"])][side].isna().all()
    assert _cell(w, VERL, None, None, "plain_iterations", "measured") > 0


def test_measured_counts_are_the_runs_iterations_counted_directly(plain):
    tlt = Result.load(RUNS[1])
    it, w = tlt.iterations, plain.work
    assert (it.groupby(["step", "worker"]).size() > 0).all()
    for (step, engine), g in it.groupby(["step", "worker"]):
        modes = g["mode"].tolist()
        assert _cell(w, TLT, step, engine, "plain_iterations", "measured") == modes.count("decode")
        assert _cell(w, TLT, step, engine, "spec_iterations", "measured") == modes.count("spec_decode")
        spec = g[g["mode"] == "spec_decode"]
        assert _cell(w, TLT, step, engine, "accepted_tokens", "measured") == spec["tokens"].sum()
        served = tlt.requests[(tlt.requests.step == step) & (tlt.requests.engine == engine)].response_len.sum()
        assert _cell(w, TLT, step, engine, "tokens", "measured") == served  # every token a response got
        if len(spec):  # the switch point: the first spec_decode row of the engine's step
            assert _cell(w, TLT, step, engine, "switch_batch", "measured") == spec["batch_size"].iloc[0]
            assert _cell(w, TLT, step, engine, "switch_iteration", "measured") == modes.index("spec_decode")
        else:
            assert np.isnan(_cell(w, TLT, step, engine, "switch_batch", "measured"))
    batches = tlt.steps.set_index("step")["drafter_train_batches"]
    for step, n in batches.items():
        assert _cell(w, TLT, step, None, "drafter_train_samples", "measured") == n * tlt.config["drafter_batch"]
    assert it["mode"].eq("spec_decode").any() and batches.sum() > 0  # the checks above saw speculation and training


def test_predicted_counts_are_the_replays_iterations_and_the_run_totals_add_up(plain):
    pred = plain.predicted[TLT]
    it, w = pred.iterations, plain.work
    counts = it.groupby(["step", "worker"])["mode"].value_counts().unstack(fill_value=0)
    for (step, engine), row in counts.iterrows():
        assert _cell(w, TLT, step, engine, "spec_iterations", "predicted") == row.get("spec_decode", 0)
    assert _cell(w, TLT, None, None, "spec_iterations", "predicted") == it["mode"].eq("spec_decode").sum()
    # the replay replays the recorded responses: every engine generates what it generated
    assert _cell(w, TLT, None, None, "tokens", "predicted") == _cell(w, TLT, None, None, "tokens", "measured") > 0
    assert _cell(w, TLT, None, None, "drafter_train_samples", "predicted") == pytest.approx(
        pred.steps["drafter_train_samples"].sum())
    totals = run_totals(w)
    assert sorted(totals.metric) == sorted(WORK_METRICS * 2) and totals.engine.isna().all()
    per = w[w.step.notna() & (w.run == TLT) & (w.metric == "switch_batch")].dropna(subset=["measured", "predicted"])
    assert _cell(w, TLT, None, None, "switch_batch", "measured") == pytest.approx(per["measured"].mean())


def test_the_work_domain_does_not_move_with_the_machines_speed(plain, scaled):
    """--speed rescales every time of a step; what the engines did stays the same, to the iteration (the
    drafter's samples to rounding: its seconds and its throughput scale by the same factor)."""
    assert not plain.per_step.equals(scaled.per_step)  # the time domain did move
    a, b = plain.work, scaled.work
    exact = ~a.metric.eq("drafter_train_samples")
    pd.testing.assert_frame_equal(a[exact], b[exact])
    assert np.allclose(a.loc[~exact, "predicted"], b.loc[~exact, "predicted"], rtol=1e-9, atol=0)


def test_work_metrics_needs_an_iterations_frame():
    res = Result.load(RUNS[0])
    res.iterations = None
    with pytest.raises(TltsimError, match="somewhere: no iterations frame"):
        work_metrics(res, "somewhere")


def test_validate_out_writes_the_work_domain_and_replaces_an_older_validation_whole(plain, tmp_path, capsys):
    out = tmp_path / "val"
    write(plain, out)
    work = pd.read_csv(out / "work.csv")
    assert len(work) == len(plain.work) and set(work.metric) == set(WORK_METRICS)
    doc = json.loads((out / "validation.json").read_text())
    assert len(doc["work"]) == len(plain.work) and {"step", "engine", "error"} <= set(doc["work"][0])
    assert sorted(p.name for p in out.iterdir()) == ["divergence.csv", "manifest.json", "overall.csv", "per_step.csv", "predicted",
                                                      "validation.json", "work.csv"]
    # an older validation of other runs goes whole (validate of the tlt run alone: no verl replay is left over)
    assert sorted(p.name for p in (out / "predicted").iterdir()) == ["tlt", "verl"]
    assert main(["validate", str(RUNS[1]), "--profile", str(PROFILE), "-o", str(out)]) == 0
    assert sorted(p.name for p in (out / "predicted").iterdir()) == ["tlt"]
    assert set(pd.read_csv(out / "work.csv").run) == {TLT}
    text = capsys.readouterr().out
    assert "work domain" in text.split("speedup")[-1] and "drafter_train_samples" in text.split("work domain")[-1]
    # a directory that holds anything its manifest does not list (a user's file) is refused before anything is
    # written, and left as it is
    (out / "notes.txt").write_text("mine")
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(TltsimError, match="exists and is not a tltsim"):
        write(plain, out)
    assert sorted(p.name for p in out.rglob("*")) == before and not list(tmp_path.glob(".val.*"))


LONGTAIL = [ROOT / "traces" / "runs" / "real_verl_smollm2_longtail_interleaved",
            ROOT / "traces" / "runs" / "real_tlt_smollm2_longtail_interleaved"]


def test_request_acceptance_counts_each_responses_own_iterations():
    """Each response's window of its engine's iterations: a plain run's responses took one iteration a token, and
    in a speculative run the responses' speculative iterations add up to each iteration's rows."""
    from tltsim.analysis.validation.work_domain import request_acceptance

    verl, tlt = (Result.load(d) for d in LONGTAIL)
    assert request_acceptance(verl).empty
    per = request_acceptance(tlt)
    assert len(per) == len(tlt.requests) and per["accepted"].notna().all()
    spec = tlt.iterations[tlt.iterations["mode"] == "spec_decode"]
    rows = spec.groupby(["step", "worker"])["batch_size"].sum()
    engine = tlt.requests.set_index(["step", "prompt_id", "sample"])["engine"]
    per["engine"] = [int(engine[k]) for k in zip(per["step"], per["prompt_id"], per["sample"])]
    assert per.groupby(["step", "engine"])["spec_iterations"].sum().tolist() == rows.tolist()
    assert all(sum(s.values()) == n for s, n in zip(per["strategies"], per["spec_iterations"]))
    # responses of one batch accept unlike each other: the spread the replay gives its rows
    assert per["accepted"].max() - per["accepted"].min() > 1.0


def test_the_replay_gives_each_row_what_its_response_accepted():
    """On the long-tail pair: rows replayed at their own qualities leave the tail to the rows that accepted least,
    as the run did, so the replay decodes about as many tokens with one row left as the run did, and predicts
    the pair's speedup closer than one quality for every row."""
    from tltsim.cost.profiled import Profiled
    from tltsim.analysis.validation.validate import measured_qualities, recorded_knobs, replay
    from tltsim.analysis.validation.work_domain import tokens_alone as alone

    cost = Profiled.fit(ROOT / "traces" / "profiles" / "smollm2_longtail_interleaved_cpu_profile.csv")
    run = Result.load(LONGTAIL[1])
    _, own = replay(LONGTAIL[1], cost)
    _, alike = replay(LONGTAIL[1], cost, policy="tlt", knobs=recorded_knobs(run.config),
                      qualities=measured_qualities(run))

    assert abs(alone(own) - alone(run)) < abs(alone(alike) - alone(run))
    _, verl = replay(LONGTAIL[0], cost)
    measured = Result.load(LONGTAIL[0]).summary["makespan_s"] / run.summary["makespan_s"]
    predicted = {k: verl.summary["makespan_s"] / r.summary["makespan_s"] for k, r in (("own", own), ("alike", alike))}
    assert abs(predicted["own"] / measured - 1) < abs(predicted["alike"] / measured - 1)
