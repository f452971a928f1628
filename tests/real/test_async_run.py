"""Asynchronous RL for real (real/run/async_rl.py): what a run may take, and a run of the tiny target."""
from pathlib import Path

import numpy as np
import pytest

from real.run.config import RunConfig
from tltsim.core.errors import TltsimError


def test_async_is_refused_what_a_real_run_cannot_do(tmp_path):
    with pytest.raises(TltsimError, match="needs at least 2 workers"):
        RunConfig(policy="async", workers=1).checked()
    with pytest.raises(TltsimError, match="unknown knob.*rollout_share"):
        RunConfig(policy="async", knobs={"rollout_share": 0.25}).checked()  # the split is the run's workers'
    with pytest.raises(TltsimError, match="does not speculate"):
        RunConfig(policy="async", drafter=str(tmp_path)).checked()
    config = RunConfig(policy="async", workers=4, prompts=2, knobs={"max_staleness": 2}).checked()
    assert config.to_dict()["knobs"] == {"rollout_share": 0.75, "max_staleness": 2}  # as the simulator replays it


@pytest.mark.slow
def test_an_async_run_trains_fresh_whole_groups_beside_its_rollout(tmp_path):
    """2 workers (one rolls out, one trains), 2 groups of 2 a step, at most 1 version stale, the engine running 2
    rows at a time, run 1 step and resumed to 3 (the groups in progress and those finished but not trained in the
    checkpoint): each step trains whole groups of the stream, each once, none staler than the bound; the
    trainer waits, rewards, trains and sends its weights while the rollout worker decodes; both workers' timelines
    tile the run; validate replays it with the simulator's async on the run's split."""
    from real.run.launch import launch
    from tltsim.core.records import Result
    from tltsim.trace import load

    def run(steps):
        return RunConfig(policy="async", workers=2, steps=steps, prompts=2, group=2, max_new_tokens=24, max_running=2,
                         probe=0, speed_probe=0, knobs={"max_staleness": 1})

    out = tmp_path / "run"
    launch(run(1), out)
    first = load(out / "trace.parquet").df
    launch(run(3), out, resume=True)
    res = Result.load(out)
    df = load(out / "trace.parquet").df
    assert df[df["step"] == 0].reset_index(drop=True).equals(first)
    assert (df.groupby(["step", "prompt_id"]).size() == 2).all() and not df.duplicated(["prompt_id", "sample"]).any()
    steps = res.steps.set_index("step")
    assert steps["responses"].tolist() == [4, 4, 4] and (steps["staleness_max"] <= 1).all()
    assert (df["engine"] == 0).all() and (df["response_len"] <= 24).all()
    # a step trains groups the gate let start by then: at most (step + 1 + 1) x 2 of the stream's
    assert all((g["prompt_id"] < (s + 2) * 2).all() for s, g in df.groupby("step"))
    tl = res.timeline
    assert set(tl[tl.worker == 1]["state"]) <= {"idle", "reward", "train", "weight_sync"}
    assert set(tl[tl.worker == 0]["state"]) <= {"prefill", "decode", "idle", "weight_sync"}
    assert (tl[tl.worker == 0]["state"] == "decode").any()
    ends = steps["t_start"] + steps["total_s"]
    assert np.allclose(steps["t_start"].to_numpy()[1:], ends.to_numpy()[:-1])  # a step starts where the last ended
    for _, w in tl.sort_values(["worker", "t_start"]).groupby("worker"):
        assert np.allclose(w["t_start"].to_numpy()[1:], w["t_end"].to_numpy()[:-1])
        assert np.isclose(w["t_start"].min(), steps["t_start"].iloc[0]) and np.isclose(w["t_end"].max(), ends.iloc[-1])
    trainer = tl[(tl.worker == 1) & (tl.state == "idle")].groupby("step")["t_start"].min()
    assert np.allclose(trainer.to_numpy(), steps["t_start"].to_numpy())  # it waits for groups first: rollout_s
    assert res.summary["resumed_fraction"] == steps["resumed"].sum() / steps["responses"].sum()
    from tltsim.analysis.validation.validate import validate

    v = validate([out], Path(__file__).resolve().parents[2] / "traces/profiles/real_cpu_profile.csv")
    predicted = next(iter(v.predicted.values()))
    assert predicted.summary["staleness_max"] <= 1 and len(predicted.steps) == 3
    assert {"staleness_mean", "resumed_fraction", "dropped_fraction"} <= set(v.overall["metric"])
