"""Partial rollout (over-provision, stop at enough groups, resume or drop): whole steps by hand."""
import pandas as pd
import pytest

from tests.sim.conftest import ConstantCost, make_trace
from tltsim.config import ClusterConfig, RLConfig, SimConfig
from tltsim.core.errors import TltsimError
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator


def run(trace, policy, gpus=1, **knobs):
    cfg = SimConfig(cluster=ClusterConfig(gpus=gpus, tp=1, max_running=8), rl=RLConfig(reward_s=0.5))
    return Simulator(trace, cfg, make_policy(policy, knobs), cost=ConstantCost()).run()


def test_ratio_one_is_verl_exactly():
    trace = make_trace([[4, 2, 3, 1], [5, 1, 2, 2], [1, 7, 1, 1]], group=2)
    verl, partial = run(trace, "verl", gpus=2), run(trace, "partial", gpus=2, ratio=1.0)
    pd.testing.assert_frame_equal(verl.timeline, partial.timeline)
    cols = ["step", "t_start", "rollout_s", "total_s", "responses", "response_tokens"]
    pd.testing.assert_frame_equal(verl.steps[cols], partial.steps[cols])
    assert partial.summary["makespan_s"] == verl.summary["makespan_s"]
    assert partial.summary["staleness_max"] == 0 and partial.summary["resumed_fraction"] == 0.0


def test_stop_at_enough_groups_and_resume_keeping_tokens():
    # prompt stream: 2, 6 (step 0), 4, 5 (step 1), then 2, 6 again; 2 groups a step, ratio 1.5 launches 3.
    # step 0 runs 2, 6, 4 from t=0.5 (prefill): 2 and 4 finish at 2.5 and 4.5 -> stop at 4.5; 6 has 4 tokens.
    # step 1 (t0 = 4.5 + 0.5 reward + 2 train + 1 sync = 8) runs the resumed 6 (2 left, prompt 10+4 re-prefilled),
    # 5 and 2: the resumed one and 2 finish at 2.5 -> stop; 5 has 2 tokens and is carried on.
    res = run(make_trace([[2, 6], [4, 5]]), "partial", ratio=1.5)
    assert res.steps["t_start"].tolist() == [0.0, 8.0]
    assert res.steps["rollout_s"].tolist() == [4.5, 2.5]
    assert res.steps["responses"].tolist() == [2, 2]
    req = res.requests
    got = list(req[["step", "prompt_len", "response_len", "finished"]].itertuples(index=False, name=None))
    assert got == [(0, 10, 2, True), (0, 10, 4, False), (0, 10, 4, True),
                   (1, 14, 2, True), (1, 10, 2, False), (1, 10, 2, True)]
    # the resumed response keeps its tokens: 4 in step 0, then re-prefilled with them (prompt 14), 2 more = 6
    first, resumed = req.iloc[1], req.iloc[3]
    assert first.response_len + resumed.response_len == 6 and resumed.prompt_len == first.prompt_len + first.response_len
    s = res.steps
    assert s["staleness_mean"].tolist() == [0.0, 0.5] and s["staleness_max"].tolist() == [0, 1]
    assert s["resumed"].tolist() == [0, 1] and s["dropped"].tolist() == [0, 0]
    assert s["resumed_fraction"].tolist() == [0.0, 0.5] and s["dropped_fraction"].tolist() == [0.0, 0.0]
    assert res.summary["staleness_counts"] == {"0": 3, "1": 1}
    assert res.summary["resumed_fraction"] == 0.25 and res.summary["staleness_max"] == 1


def test_drop_throws_unfinished_tokens_away():
    # as above, but the 6 is dropped at 4.5; step 1 launches 5, 2, 6 afresh: 2 at 2.5, 5 at 5.5 -> stop at 5.5
    res = run(make_trace([[2, 6], [4, 5]]), "partial", ratio=1.5, unfinished="drop")
    assert res.steps["rollout_s"].tolist() == [4.5, 5.5]
    assert res.steps["dropped"].tolist() == [1, 1]
    assert res.summary["dropped_fraction"] == 2 / (4 + 2) and res.summary["staleness_max"] == 0


def test_knob_errors():
    with pytest.raises(TltsimError, match="policy 'partial': ratio = 0.5 must be a number in \\[1.0, 16.0\\]"):
        make_policy("partial", {"ratio": 0.5})
    with pytest.raises(TltsimError, match="unfinished = 'keep' must be one of resume, drop"):
        make_policy("partial", {"unfinished": "keep"})
    with pytest.raises(TltsimError, match="ratio = 'two' must be a number"):
        make_policy("partial", {"ratio": "two"})
    with pytest.raises(TltsimError, match="policy 'partial\\+tlt': unknown knob\\(s\\) nope"):
        make_policy("partial+tlt", {"nope": 1})


def test_knobs_from_flags_and_config_file(tmp_path, capsys):
    import json

    from tltsim.cli import main

    shipped = "traces/synthetic/dapo_like.parquet"
    common = ["--trace", shipped, "--gpus", "8", "--tp", "4", "--steps", "0:2", "--json", "--no-progress"]
    assert main(["simulate", "--policy", "partial", "--knob", "ratio=1.5", "-o", str(tmp_path / "a"), *common]) == 0
    assert json.loads(capsys.readouterr().out)["resumed_fraction"] > 0
    f = tmp_path / "c.toml"
    f.write_text('policy = "partial"\n[policy_knobs]\nunfinished = "drop"\n')
    assert main(["simulate", "--config", str(f), "-o", str(tmp_path / "b"), *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dropped_fraction"] > 0 and out["resumed_fraction"] == 0
    assert main(["simulate", "--policy", "partial", "--knob", "ratio=0", "-o", str(tmp_path / "c"), *common]) == 2
    err = capsys.readouterr().err
    assert "policy 'partial': ratio = 0 must be a number in [1.0, 16.0]" in err and err.count("\n") == 1
