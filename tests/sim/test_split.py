"""Engine assignment: the trace's engine column runs only when it names exactly the cluster's engines."""
import numpy as np
import pandas as pd
import pytest

from tests.sim.conftest import ConstantCost
from tltsim.cli import main
from tltsim.config import ClusterConfig, SimConfig
from tltsim.core.errors import TltsimError
from tltsim.sim.simulator import Simulator
from tltsim.trace import Trace, TraceMeta, save


@pytest.fixture
def two_rank_log():
    """Two steps of 32 prompts x 2 samples, recorded on dp ranks 0-1 (prompts 0-15 on rank 0), as the DAPO log."""
    rng = np.random.default_rng(0)
    rows = [(s, p, j, 20, int(rng.integers(5, 200)), p // 16) for s in range(2) for p in range(32) for j in range(2)]
    df = pd.DataFrame(rows, columns=["step", "prompt_id", "sample", "prompt_len", "response_len", "engine"])
    return Trace.from_frame(df, TraceMeta(source="test"))


def _run(trace, engines):
    cfg = SimConfig(cluster=ClusterConfig(gpus=engines, tp=1, max_running=64))
    return Simulator(trace, cfg, cost=ConstantCost()).run()


@pytest.mark.parametrize("engines", [4, 16])
def test_more_engines_than_recorded_split_over_all_and_say_so(two_rank_log, engines):
    res = _run(two_rank_log, engines)
    first = res.requests[res.requests.step == 0]
    assert sorted(first.engine.unique()) == list(range(engines))  # every engine works in the first step
    decoding = res.timeline[(res.timeline.step == 0) & (res.timeline.state == "decode")]
    assert decoding.worker.nunique() == engines
    assert res.config["split"] == "contiguous"
    assert "names 2 engine(s) (0-1)" in res.config["split_note"] and f"has {engines}" in res.config["split_note"]


def test_the_recorded_cluster_keeps_the_recorded_assignment(two_rank_log):
    res = _run(two_rank_log, 2)
    assert res.config["split"] == "trace" and res.config["split_note"] == ""
    got = res.requests.set_index(["step", "prompt_id", "sample"]).engine
    want = two_rank_log.df.set_index(["step", "prompt_id", "sample"]).engine
    assert got.sort_index().equals(want.sort_index())


def test_an_explicit_trace_split_on_more_engines_names_the_idle_ones(two_rank_log):
    cfg = SimConfig(cluster=ClusterConfig(gpus=4, tp=1, max_running=64, split="trace"))
    res = Simulator(two_rank_log, cfg, cost=ConstantCost()).run()
    assert res.config["split"] == "trace" and "2 engine(s) get no responses" in res.config["split_note"]
    with pytest.raises(TltsimError, match="records engines up to 1 but the cluster has 1"):
        Simulator(two_rank_log, SimConfig(cluster=ClusterConfig(gpus=1, tp=1, split="trace")), cost=ConstantCost())


def test_simulate_prints_the_note_once_on_stderr(two_rank_log, tmp_path, capsys):
    path = save(two_rank_log, tmp_path / "log.parquet")
    assert main(["simulate", "--trace", str(path), "--gpus", "16", "--tp", "4", "--policy", "verl",
                 "-o", str(tmp_path / "out"), "--no-progress"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len([e for e in err if "engine column" in e]) == 1 and "split over all 4" in err[-1]
    assert main(["compare", "--trace", str(path), "--gpus", "16", "--tp", "4", "--policies", "verl,tlt",
                 "-o", str(tmp_path / "cmp"), "--no-progress", "--no-report"]) == 0
    assert len([e for e in capsys.readouterr().err.splitlines() if "engine column" in e]) == 1


def test_fewer_prompt_groups_than_engines_is_said(two_rank_log):
    few = Trace.from_frame(two_rank_log.df[two_rank_log.df.prompt_id < 3].drop(columns="engine"), TraceMeta(source="t"))
    res = _run(few, 4)
    assert res.config["split_note"] == "step 0 has 3 prompt groups for 4 engines: 1 engine(s) get no responses in it"
    assert _run(few, 3).config["split_note"] == ""
