"""Every registered policy on a shipped trace: compare reports speed and off-policy cost; fast path = exact."""
import json

import pytest

from tltsim.cli import main
from tltsim.cli.sim_cmd import COMPARE_COLUMNS
from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy, policy_names
from tltsim.sim.simulator import Simulator
from tltsim.trace import load

SHIPPED = "traces/synthetic/dapo_like.parquet"
OFF_POLICY = ["staleness_mean", "staleness_max", "resumed_fraction", "dropped_fraction"]


def test_compare_runs_every_registered_policy_and_reports_off_policy_cost(tmp_path, capsys):
    rc = main(["compare", "--trace", SHIPPED, "--gpus", "16", "--tp", "4", "--steps", "0:3", "-o", str(tmp_path),
               "--json", "--no-progress", "--no-report"])
    assert rc == 0
    rows = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["policies"]}
    assert list(rows) == policy_names()
    for name in ("partial", "tail-batching", "async", "longest-first", "migrate", "partial+tlt", "migrate+tlt"):
        assert name in rows
    for r in rows.values():
        assert all(c in r for c in OFF_POLICY) and r["makespan_s"] > 0
    on_policy = ("verl", "tlt", "longest-first", "migrate", "longest-first+tlt", "migrate+tlt", "ideal")
    for name in on_policy:
        assert [rows[name][c] for c in OFF_POLICY] == [0.0, 0, 0.0, 0.0], name
    assert rows["partial"]["staleness_max"] >= 1 and rows["partial"]["resumed_fraction"] > 0
    # the sample mix: verl trains the trace as it is; partial rollout trains short responses first
    assert rows["verl"]["trained_len_ratio"] == pytest.approx(1.0) and rows["partial"]["trained_len_ratio"] < 1.0
    assert rows["tail-batching"]["dropped_fraction"] > 0 and rows["tail-batching"]["staleness_max"] == 0
    assert 1 <= rows["async"]["staleness_max"] <= 4
    assert set(OFF_POLICY) <= set(COMPARE_COLUMNS)


def test_compare_table_prints_the_off_policy_columns(tmp_path, capsys):
    rc = main(["compare", "--trace", SHIPPED, "--policies", "verl,partial", "--gpus", "16", "--tp", "4",
               "--steps", "0:2", "-o", str(tmp_path), "--no-progress", "--no-report"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0 and lines[0].lower().startswith("by speedup over verl") and lines[1].split() == COMPARE_COLUMNS


@pytest.mark.parametrize("name, knobs", [("partial", {}), ("tail-batching", {}), ("migrate", {"remaining": 0.05})])
def test_fast_path_equals_exact_for_plain_decoding(name, knobs):
    trace = load(SHIPPED).select_steps([0, 1])
    res = [Simulator(trace, SimConfig(cluster=ClusterConfig(gpus=16, tp=4, max_running=32), exact=exact),
                     make_policy(name, knobs)).run() for exact in (False, True)]
    fast, exact = (r.summary for r in res)
    assert fast["makespan_s"] == pytest.approx(exact["makespan_s"], rel=1e-9)
    assert (fast["resumed_fraction"], fast["dropped_fraction"]) == (exact["resumed_fraction"], exact["dropped_fraction"])
    assert res[0].requests["response_len"].tolist() == res[1].requests["response_len"].tolist()


def test_unknown_combination_names_are_clear():
    from tltsim.core.errors import TltsimError

    with pytest.raises(TltsimError, match="unknown policy 'partial\\+nope'"):
        make_policy("partial+nope")
    with pytest.raises(TltsimError, match="both 'partial' and 'migrate' decide how a rollout runs"):
        make_policy("partial+migrate")


@pytest.fixture(scope="module")
def three_steps():
    return load(SHIPPED).select_steps([0, 1, 2])


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_accounts_for_every_gpu_second(three_steps, name):
    """Each worker's intervals tile [0, makespan] with no gap or overlap, so busy + idle = GPUs x makespan."""
    res = Simulator(three_steps, SimConfig(cluster=ClusterConfig(gpus=16, tp=4)), make_policy(name)).run()
    s = res.summary
    assert s["busy_gpu_seconds"] + s["idle_gpu_seconds"] == pytest.approx(16 * s["makespan_s"], rel=1e-9)
    for _, w in res.timeline.sort_values(["worker", "t_start"], kind="stable").groupby("worker"):
        assert w["t_start"].iloc[0] == 0.0 and w["t_end"].iloc[-1] == pytest.approx(s["makespan_s"], rel=1e-12)
        assert w["t_start"].to_numpy()[1:] == pytest.approx(w["t_end"].to_numpy()[:-1], abs=1e-9)
    assert sum(s["staleness_counts"].values()) == res.steps["responses"].sum()


def test_a_combination_adds_tlt_without_perturbing_either_part(three_steps):
    """partial+tlt at ratio 1 is tlt exactly; at ratio 2 it speculates and trains the drafter like tlt does."""
    cfg = SimConfig(cluster=ClusterConfig(gpus=16, tp=4))
    tlt = Simulator(three_steps, cfg, make_policy("tlt")).run()
    same = Simulator(three_steps, cfg, make_policy("partial+tlt", {"ratio": 1.0})).run()
    assert {k: v for k, v in same.summary.items() if k != "policy"} == {
        k: v for k, v in tlt.summary.items() if k != "policy"}
    both = Simulator(three_steps, cfg, make_policy("partial+tlt", {"ratio": 2.0, "threshold": 16})).run()
    assert both.summary["sd_share"] > 0 and both.steps["drafter_quality"].notna().all()
    assert both.summary["resumed_fraction"] > 0 and both.config["policy_knobs"]["threshold"] == 16
    assert both.config["policy_knobs"]["ratio"] == 2.0
