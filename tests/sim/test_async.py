"""Bounded-staleness asynchronous RL: a whole run by hand, the staleness bound, conservation of GPU time."""
import numpy as np
import pytest

from tests.sim.conftest import ConstantCost, make_trace
from tltsim.config import ClusterConfig, RLConfig, SimConfig
from tltsim.core.errors import TltsimError
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import load


def run(trace, gpus=2, cost=None, policy="async", **knobs):
    cfg = SimConfig(cluster=ClusterConfig(gpus=gpus, tp=1, max_running=8), rl=RLConfig(reward_s=0.5))
    return Simulator(trace, cfg, make_policy(policy, knobs), cost=cost or ConstantCost()).run()


def test_staleness_one_by_hand():
    # one rollout engine, one trainer; every prompt 4 tokens; prefill 0.5, train step 0.5 + 2 + 1 sync.
    # t=0: the gate (started < (version + 2) x 1) lets groups 0 and 1 start; both finish at 4.5.
    # step 0 waits 4.5, trains until 8.0 -> version 1: group 2 starts (8.0-8.5 prefill, decodes from 8.5).
    # step 1 trains group 1 (1 version old) at once: 8.0-11.5 -> version 2 interrupts group 2 after 3 tokens:
    # 1 s weight load + 0.5 re-prefill; then group 3 (the stream wraps) is admitted (0.5) and group 2's last token
    # ends at 14.5. step 2 waits 11.5-14.5 and trains group 2 (started under version 1: 1 old, resumed).
    res = run(make_trace([[4], [4], [4]]), max_staleness=1)
    s = res.steps
    assert s["t_start"].tolist() == [0.0, 8.0, 11.5]
    assert s["rollout_s"].tolist() == [4.5, 0.0, 3.0] and s["total_s"].tolist() == [8.0, 3.5, 6.5]
    assert s["staleness_mean"].tolist() == [0.0, 1.0, 1.0] and s["resumed"].tolist() == [0, 0, 1]
    assert res.summary["makespan_s"] == 18.0 and res.summary["staleness_counts"] == {"0": 1, "1": 2}
    tl = res.timeline
    trainer = tl[(tl.worker == 1) & (tl.step == 0)]
    assert [(r.state, r.t_start, r.t_end) for r in trainer.itertuples()] == [
        ("idle", 0.0, 4.5), ("reward", 4.5, 5.0), ("train", 5.0, 7.0), ("weight_sync", 7.0, 8.0)]
    engine = tl[tl.worker == 0]
    assert [(r.state, r.t_start, r.t_end) for r in engine.itertuples()][:4] == [
        ("prefill", 0.0, 0.5), ("decode", 0.5, 4.5), ("idle", 4.5, 8.0), ("prefill", 8.0, 8.5)]
    assert ("weight_sync", 11.5, 13.0) in [(r.state, r.t_start, r.t_end) for r in engine.itertuples()]


def test_staleness_zero_is_synchronous_on_split_gpus():
    res = run(make_trace([[4], [4], [4]]), max_staleness=0)
    assert res.steps["total_s"].tolist() == [8.0, 8.0, 8.0] and res.summary["staleness_max"] == 0


@pytest.mark.parametrize("eta", [0, 1, 3])
def test_never_exceeds_the_staleness_bound_on_a_shipped_trace(eta):
    trace = load("traces/synthetic/dapo_like.parquet").select_steps(list(range(8)))
    cfg = SimConfig(cluster=ClusterConfig(gpus=16, tp=4))
    res = Simulator(trace, cfg, make_policy("async", {"max_staleness": eta, "rollout_share": 0.25})).run()
    s = res.summary
    assert s["staleness_max"] <= eta and (res.steps["staleness_max"] <= eta).all()
    assert sum(s["staleness_counts"].values()) == res.steps["responses"].sum() == 8 * 768
    if eta:
        assert s["staleness_max"] == eta  # rollout runs ahead as far as the bound lets it
    assert np.isclose(s["busy_gpu_seconds"] + s["idle_gpu_seconds"], 16 * s["makespan_s"], rtol=1e-9)
    for _, w in res.timeline.sort_values(["worker", "t_start"]).groupby("worker"):
        assert np.allclose(w["t_start"].to_numpy()[1:], w["t_end"].to_numpy()[:-1])


def test_async_knob_errors_and_what_runs_inside_it():
    with pytest.raises(TltsimError, match="max_staleness = -1 must be an integer >= 0"):
        make_policy("async", {"max_staleness": -1})
    for name, why in [("async+partial", "it shapes a synchronous step"),
                      ("async+cotrain", "its drafter trains inside the actor update"),
                      ("async+das", "its history drafting"), ("async+tlt-dedicated", "it keeps GPUs")]:
        with pytest.raises(TltsimError, match=f"'async' runs its own step loop, and .* cannot run inside it: {why}"):
            make_policy(name)
    make_policy("tlt+async")  # either order
    with pytest.raises(TltsimError, match="needs at least two TP groups"):
        run(make_trace([[4]]), gpus=1)


def test_speculation_inside_async_by_hand():
    # the run of test_staleness_one_by_hand, speculating from the first token (sd-always) with one strategy that
    # accepts 4 tokens an iteration (chain 3_1_3 at quality 1, no drift): each request's 4 tokens take one 1 s verify.
    # t=0: groups 0 and 1 prefill (0.5), the drafter reads them (the switch's prefill, 0.5), one verify: done at 2.0.
    # step 0 waits 2.0, trains until 5.5; the engine, gated, trains the drafter 2.0-5.5 (3.5 s: load 1 s, save 0.097).
    # version 1 at 5.5: group 2 prefills, the drafter reads it again (its switch starts over), one verify: 7.5;
    # step 1 trains group 1 at once (5.5-9.0); the engine trains the drafter 7.5-9.0; the same again in step 2.
    res = run(make_trace([[4], [4], [4]]), max_staleness=1, policy="async+sd-always",
              tuner="fixed", arms="3_1_3", q_start=1.0, drift=0.0)
    s = res.steps
    assert s["t_start"].tolist() == [0.0, 5.5, 9.0] and s["rollout_s"].tolist() == [2.0, 0.0, 0.0]
    assert res.summary["makespan_s"] == 12.5 and s["staleness_mean"].tolist() == [0.0, 1.0, 1.0]
    assert s["mean_accepted"].tolist() == [4.0, 4.0, 4.0] and s["strategies"].tolist() == ["3_1_3:1"] * 3
    assert np.allclose(s["sd_share"], [1 / 5.5, 1 / 3.5, 1 / 3.5])
    assert s["drafter_train_gpu_s"].tolist() == [0.0, 3.5, 1.5]  # a wait counts for the version it ends in
    engine = [(r.state, r.t_start, r.t_end) for r in res.timeline[res.timeline.worker == 0].itertuples()]
    assert engine[:7] == [("prefill", 0.0, 1.0), ("spec_decode", 1.0, 2.0), ("drafter_train", 2.0, 5.5),
                          ("prefill", 5.5, 6.5), ("spec_decode", 6.5, 7.5), ("drafter_train", 7.5, 9.0),
                          ("prefill", 9.0, 10.0)]


def test_the_switch_decides_inside_async():
    # TLT's switch turns on after `patience` iterations at a small batch: never within a 4-token response when it
    # is 10, after the first iteration when it is 1 (then the drafter reads the rows, and the rest is one verify)
    trace = make_trace([[4], [4], [4]])
    never = run(trace, max_staleness=1, policy="async+tlt", tuner="fixed", arms="3_1_3", q_start=1.0)
    assert never.steps["sd_share"].tolist() == [0.0] * 3 and never.summary["makespan_s"] == 18.0
    soon = run(trace, max_staleness=1, policy="async+tlt", tuner="fixed", arms="3_1_3", q_start=1.0, drift=0.0,
               patience=1)
    engine = [(r.state, r.t_start, r.t_end) for r in soon.timeline[soon.timeline.worker == 0].itertuples()]
    assert engine[:3] == [("prefill", 0.0, 0.5), ("decode", 0.5, 1.5), ("prefill", 1.5, 2.0)]
    assert engine[3][0] == "spec_decode" and engine[3][1] == 2.0
