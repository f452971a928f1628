"""Which rows each worker of a real run runs, and in which order (real/run/placement.py): verl's contiguous whole
groups, and longest-first's placement, which must be the simulator's decision on the same lengths."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from real.run.placement import placed_rows
from tltsim.config import ClusterConfig, SimConfig
from tltsim.control.placement import HistoryPredictor
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import Trace, TraceMeta


def test_without_a_predictor_each_worker_runs_a_block_of_whole_groups():
    assert placed_rows(3, 2, 2) == [[(0, 0), (0, 1), (1, 0), (1, 1)], [(2, 0), (2, 1)]]


def test_longest_first_deals_the_rows_longest_predicted_first_to_the_least_loaded_worker():
    """Prompt 1 came back longest (30 tokens), then 2 (20), then 0 (10): their rows are dealt in that order, each to
    the worker with the least predicted work (a tie to the lower index), so a group's rows land on both workers."""
    predictor = HistoryPredictor()
    predictor.observe(np.array([0, 1, 2]), np.array([10, 30, 20]))
    assert placed_rows(3, 2, 2, predictor) == [[(1, 0), (2, 0), (0, 0)], [(1, 1), (2, 1), (0, 1)]]
    assert placed_rows(3, 2, 2, HistoryPredictor()) == [[(0, 0), (1, 0), (2, 0)], [(0, 1), (1, 1), (2, 1)]]


def _trace(lengths: np.ndarray) -> Trace:
    """A trace of the same prompts every step: lengths [steps, prompts, group]."""
    steps, prompts, group = lengths.shape
    s, p, j = np.meshgrid(np.arange(steps), np.arange(prompts), np.arange(group), indexing="ij")
    df = pd.DataFrame({"step": s.ravel(), "prompt_id": p.ravel(), "sample": j.ravel(), "prompt_len": 16,
                       "response_len": lengths.ravel()})
    return Trace.from_frame(df, TraceMeta(source="test", max_response_len=int(lengths.max()), group_size=group))


@pytest.mark.parametrize("workers", [2, 3])
def test_the_real_placement_is_the_simulators_decision_on_the_same_lengths(workers):
    """Steps of 5 prompts x 4 that come back every step with other lengths: each step, every row lands on the
    worker the simulator's longest-first put it on, and each worker admits its rows in the simulator's order
    (one row running at a time, so admission times order them), with the predictor fed what the steps before
    generated."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(8, 400, size=(4, 5, 4))
    cfg = SimConfig(policy="longest-first", cluster=ClusterConfig(gpus=workers, tp=1, max_running=1), exact=True)
    requests = Simulator(_trace(lengths), cfg, make_policy("longest-first")).run().requests
    predictor = HistoryPredictor()
    for step in range(lengths.shape[0]):
        ran = requests[requests["step"] == step].sort_values(["engine", "admitted_at"])
        simulated = [list(zip(g["prompt_id"], g["sample"])) for _, g in ran.groupby("engine")]
        assert placed_rows(5, 4, workers, predictor) == simulated
        predictor.observe(np.repeat(np.arange(5), 4), lengths[step].ravel())


def _run(**kw):
    from real.run.launch import RunConfig

    return RunConfig(**{"policy": "longest-first", "workers": 2, "steps": 2, "prompts": 3, "group": 2,
                        "max_running": 1, "max_new_tokens": 32, "greedy": True, "dtype": "float64", "probe": 0,
                        "speed_probe": 0, "repeat_prompts": True, "warmup_steps": 5, "warmup_prompts": 4, **kw})


@pytest.mark.slow
def test_a_longest_first_run_places_each_step_as_its_predictor_says_and_resumes_so(tmp_path):
    """2 workers, the same 3 prompts x 2 every step: step 0 deals the rows round-robin (no history), step 1 by the
    lengths step 0 generated; each worker admits them in that order. longest-first+tlt speculates as it goes, and
    greedy speculation decodes what plain decoding does, so longest-first alone, stopped after step 0 and resumed
    (its predictor in the checkpoint), places and generates every row as the +tlt run did."""
    from real.run.launch import launch
    from tltsim.core.records import Result
    from tltsim.trace import load

    launch(_run(policy="longest-first+tlt", knobs={"threshold": 4, "patience": 2, "arms": "4_1_4"}),
           tmp_path / "whole")
    assert Result.load(tmp_path / "whole").summary["sd_share"] > 0
    df = load(tmp_path / "whole" / "trace.parquet").df
    requests = pd.read_parquet(tmp_path / "whole" / "requests.parquet")
    predictor = HistoryPredictor()
    for step in (0, 1):
        ran = requests[requests["step"] == step].sort_values(["engine", "admitted_at"])
        assert [list(zip(g["prompt_id"], g["sample"])) for _, g in ran.groupby("engine")] == \
            placed_rows(3, 2, 2, predictor)
        rows = df[df["step"] == step]
        predictor.observe(rows["prompt_id"].to_numpy(), rows["response_len"].to_numpy())
    assert len({pid for pid, _ in placed_rows(3, 2, 2, HistoryPredictor())[0]}) == 3  # step 0 splits groups

    launch(_run(steps=1), tmp_path / "resumed")
    launch(_run(), tmp_path / "resumed", resume=True)
    again = pd.read_parquet(tmp_path / "resumed" / "requests.parquet")
    cols = ["step", "prompt_id", "sample", "engine", "response_len"]
    assert again[cols].sort_values(cols).reset_index(drop=True).equals(
        requests[cols].sort_values(cols).reset_index(drop=True))


def test_longest_first_is_refused_what_a_real_run_cannot_do(recwarn):
    from tltsim.core.errors import TltsimError

    with pytest.raises(TltsimError, match="only a simulator can"):
        _run(knobs={"predictor": "oracle"}).checked()
    with pytest.raises(TltsimError, match="does not speculate; drop --drafter-checkpoint"):
        _run(drafter_checkpoint="some.pt").checked()
    with pytest.raises(TltsimError, match="unknown knob"):
        _run(knobs={"threshold": 4}).checked()
    combined = _run(policy="longest-first+tlt", knobs={"threshold": 4, "predictor": "history"}).checked()
    assert combined.tlt_knobs().threshold == 4 and combined.placement().predictor == "history"
    assert combined.to_dict()["knobs"]["threshold"] == 4 and "noise" not in combined.to_dict()["knobs"]
    with pytest.raises(TltsimError, match="unknown knob.*its knobs are predictor, noise, sd, threshold"):
        _run(policy="longest-first+tlt", knobs={"bogus": 1}).checked()
    _run(repeat_prompts=False).checked()
    assert "--repeat-prompts gives its predictor one" in str(recwarn.pop().message)
