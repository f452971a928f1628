"""`tltsim real run` of the policies that draft without a model (`--policy das`, `das+tlt`, `tlt-base`) on the
shipped tiny target, 2 CPU workers, greedy in float64 (no argmax ties between tree and plain forwards): history
drafting speculates, trains nothing and keeps the output verl's; the hybrid speculates and spot-trains its trained
part; a resumed das run rebuilds its history; prompt lookup (tlt-base) speculates from each row's own text, trains
nothing and keeps the output verl's."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from real.run.launch import RunConfig, launch
from tltsim.core.errors import TltsimError
from tltsim.core.records import Result
from tltsim.trace import load as load_trace

COLUMNS = ["step", "prompt_id", "sample", "response_len", "reward"]
# speculation from every iteration's start (sd always) with one strategy, the guard off: the engines' decisions do not
# depend on timings, so a run repeats its drafts exactly (the resume test compares histories)
KNOBS = {"sd": "always", "guard": False, "tuner": "fixed", "arms": "4_1_4"}


def base(**kw) -> RunConfig:
    """3 prompt groups of 2 on 2 workers, at most 2 rows running: worker 0 has 2 groups (2 waves), worker 1 one, and
    is done early (time for das+tlt to spot-train)."""
    return RunConfig(**{"policy": "das", "workers": 2, "steps": 2, "prompts": 3, "group": 2, "max_running": 2,
                        "max_new_tokens": 32, "greedy": True, "dtype": "float64", "probe": 2, "speed_probe": 0,
                        "warmup_steps": 5, "warmup_prompts": 4, "knobs": KNOBS, **kw})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("das")
    launch(base(), out / "das")
    launch(base(policy="verl", knobs={}), out / "verl")
    launch(base(policy="das+tlt", knobs={**KNOBS, "threshold": 4}), out / "das+tlt")
    launch(base(policy="tlt-base"), out / "tlt-base")
    return out


def history(run) -> list:
    """Rank 0's history as its last checkpoint holds it (prompt, response) per finished response, oldest first."""
    return torch.load(run / "checkpoint" / "rank0.pt", weights_only=True)["history"]["history"]


@pytest.mark.slow
def test_das_speculates_from_the_history_trains_nothing_and_keeps_verls_output(runs):
    res = Result.load(runs / "das")
    spec = res.iterations[res.iterations["mode"] == "spec_decode"]
    assert len(spec) > 0 and spec["accepted"].mean() > 1  # drafts from siblings and the prompt got accepted
    assert res.steps["drafter_train_s"].eq(0).all() and res.steps["drafter_train_batches"].eq(0).all()
    assert res.config["policy"] == "das" and res.config["knobs"]["drafter"] == "suffix"
    assert res.summary["drafter"] == "suffix" and res.steps["drafter_accepted"].gt(1).all()  # the history's probe
    assert not (runs / "das" / "spot").exists() and not (runs / "das" / "checkpoint" / "drafter.pt").exists()
    das, verl = (load_trace(runs / p / "trace.parquet").df for p in ("das", "verl"))
    assert das[COLUMNS].equals(verl[COLUMNS])  # lossless: greedy das decodes what plain decoding does
    # rank 0's history holds every response of the run, its own and worker 1's (shared after each step)
    responses = history(runs / "das")
    assert len(responses) == len(das) and sorted(len(r) for _, r in responses) == sorted(das["response_len"])
    assert sorted(len(p) for p, _ in responses) == sorted(das["prompt_len"])


@pytest.mark.slow
def test_das_tlt_drafts_with_the_hybrid_and_spot_trains_its_trained_part(runs):
    res = Result.load(runs / "das+tlt")
    steps, spec = res.steps, res.iterations[res.iterations["mode"] == "spec_decode"]
    assert len(spec) > 0
    assert steps["drafter_train_batches"].sum() > 0 and (runs / "das+tlt" / "spot").is_dir()
    assert (runs / "das+tlt" / "checkpoint" / "drafter.pt").is_file()  # the trained part, as tlt's drafter
    assert res.summary["drafter"] == "hybrid" and 0 <= res.summary["history_share"] <= 1
    # every speculative row drafted from one of the two parts
    rows = spec.groupby("step")["batch_size"].sum().tolist()
    assert (steps["history_rows"] + steps["trained_rows"]).tolist() == rows
    hybrid, verl = (load_trace(runs / p / "trace.parquet").df for p in ("das+tlt", "verl"))
    assert hybrid[COLUMNS].equals(verl[COLUMNS])


@pytest.mark.slow
def test_tlt_base_speculates_from_each_rows_own_text_trains_nothing_and_keeps_verls_output(runs):
    res = Result.load(runs / "tlt-base")
    spec = res.iterations[res.iterations["mode"] == "spec_decode"]
    assert len(spec) > 0 and spec["accepted"].max() >= 1  # drafts from the rows' own text got accepted
    assert res.config["policy"] == "tlt-base" and res.config["knobs"]["drafter"] == "ngram"
    assert res.summary["drafter"] == "ngram" and res.steps["drafter_accepted"].notna().all()  # its probe
    assert res.steps["drafter_train_batches"].eq(0).all() and not (runs / "tlt-base" / "spot").exists()
    assert not (runs / "tlt-base" / "checkpoint" / "drafter.pt").exists()
    base_, verl = (load_trace(runs / p / "trace.parquet").df for p in ("tlt-base", "verl"))
    assert base_[COLUMNS].equals(verl[COLUMNS])


@pytest.mark.slow
def test_a_resumed_das_run_rebuilds_its_history_from_the_checkpoint(runs, tmp_path):
    """One step, then --resume to two: the same responses, the same drafts (accepted lengths, iteration by
    iteration) and the same history at the end as the run done at once; without the history the resumed
    run's would hold step 1's responses alone."""
    out = tmp_path / "das"
    launch(base(steps=1), out)
    with pytest.raises(TltsimError, match="--resume"):
        launch(base(), out)
    launch(base(), out, resume=True)
    resumed, whole = Result.load(out), Result.load(runs / "das")
    assert resumed.steps["step"].tolist() == [0, 1]
    cols = ["step", "worker", "batch_size", "mode", "accepted"]
    assert resumed.iterations[cols].equals(whole.iterations[cols])
    assert load_trace(out / "trace.parquet").df[COLUMNS].equals(load_trace(runs / "das" / "trace.parquet").df[COLUMNS])
    assert history(out) == history(runs / "das")


def test_das_takes_no_trained_drafter_and_no_spot_training_knobs():
    with pytest.raises(TltsimError, match="loads no trained drafter"):
        base(drafter_checkpoint="some.pt").checked()
    with pytest.raises(TltsimError, match="drop the spot-training knobs buffer_steps"):
        base(knobs={"buffer_steps": 2}).checked()
    with pytest.raises(TltsimError, match="needs a drafter with weights"):
        base(knobs={"spot": True}).checked()
    with pytest.raises(TltsimError, match="trains no drafter"):
        base(probe_static=True).checked()
    with pytest.raises(TltsimError, match="trained drafter's checkpoint"):
        base(policy="das+tlt", drafter_checkpoint="suffix").checked()
    assert base(policy="das+tlt", knobs={"buffer_steps": 2}).checked().tlt_knobs().buffer_steps == 2
    assert base(policy="static-sd", knobs={"buffer_steps": 2}).checked()  # ignored there, as before (test_run.py)
    assert replace(base(), policy="das+tlt").checked().tlt_knobs().drafter == "hybrid"


def test_a_method_or_training_the_simulator_alone_has_is_refused_in_one_line():
    with pytest.raises(TltsimError, match="drafter = 'mtp' is simulated only; a real run drafts with eagle"):
        base(policy="tlt", knobs={"drafter": "mtp"}).checked()
    with pytest.raises(TltsimError, match="training = 'cotrain' is simulated only"):
        base(policy="tlt", knobs={"training": "cotrain"}).checked()
