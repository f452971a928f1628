"""The trace's aborted rows (verl's empty outputs): admitted and aborted, holding a slot, nothing to train on."""
import numpy as np
import pytest

from tests.sim.conftest import ConstantCost, make_trace
from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import Trace, load


def with_aborted(trace, mask):
    df = trace.df.assign(response_len=np.where(mask, 0, trace.df["response_len"]), aborted=mask)
    return Trace.from_frame(df, trace.meta)


def test_aborted_requests_are_admitted_cost_their_prefill_and_are_not_trained():
    # two prompt groups of 2 on two engines; the second group was aborted whole
    trace = with_aborted(make_trace([[3, 5, 4, 6]], group=2), np.array([False, False, True, True]))
    res = Simulator(trace, SimConfig(cluster=ClusterConfig(gpus=2, tp=1)), make_policy("verl"), cost=ConstantCost()).run()
    assert res.requests["engine"].tolist() == [0, 0, 1, 1]  # every request admitted on its engine
    aborted = res.requests[res.requests.engine == 1]
    assert (aborted.admitted_at == 0).all() and (aborted.response_len == 0).all() and aborted.finished.all()
    tl = res.timeline[(res.timeline.worker == 1) & (res.timeline.step == 0)]
    assert tl.state.iloc[0] == "prefill" and tl.t_end.iloc[0] - tl.t_start.iloc[0] == 0.5  # its prefill, no decode
    assert "decode" not in set(tl.state)
    step = res.steps.iloc[0]
    assert (step.responses, step.dropped, step.response_tokens) == (2, 2, 8)  # trained: the first group only
    assert res.summary["dropped_fraction"] == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["verl", "tlt", "partial", "tail-batching", "async", "migrate"])
def test_no_policy_trains_on_an_aborted_row_and_the_fast_path_matches_the_exact(name):
    trace = load("traces/synthetic/dapo_like.parquet").select_steps([0])
    trace = with_aborted(trace, np.random.default_rng(0).random(len(trace.df)) < 0.05)
    plain = name in ("verl", "migrate", "partial", "tail-batching")  # the exact path decodes them alike
    runs = [Simulator(trace, SimConfig(cluster=ClusterConfig(gpus=16, tp=4), exact=exact), make_policy(name)).run()
            for exact in ((False, True) if plain else (False,))]
    for res in runs:
        assert res.steps["dropped"].sum() >= 1
        assert res.steps["response_tokens"].sum() == res.requests["response_len"].sum()  # aborted rows: no tokens
        trained = res.steps["responses"].sum()
        assert trained <= (res.requests["response_len"] > 0).sum()  # none of the aborted rows is trained
    if plain:
        fast, exact = (r.summary for r in runs)
        # (migrate's cut on the token clock differs by ~1e-6 between the paths, with or without aborted rows)
        assert fast["makespan_s"] == pytest.approx(exact["makespan_s"], rel=1e-5 if name == "migrate" else 1e-9)
        assert fast["dropped_fraction"] == exact["dropped_fraction"]
