"""`ideal` is a lower bound on plain synchronous decoding: no policy that decodes plainly beats it in any step.

What it bounds: the rollout time of a step whose responses are all generated to their end, plainly (no
speculation), on the cluster's engines. The same bound computed on the work a step did (the requests it
finished, each with the tokens it decoded in the step and the tokens carried in as prompt) bounds every
synchronous policy that decodes plainly, those that stop a rollout early, carry responses across steps or draw
their own prompts (partial, tail-batching) included; `ideal` itself does not bound those. It does not bound speculation (tested here with sd = never) nor async
RL, whose rollout_s is only the time training waited."""
import glob

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.sim.conftest import make_trace
from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import REGISTRY, make_policy, policy_names
from tltsim.policies.ideal import alone_times, work_time
from tltsim.sim.engine import fast_rollout
from tltsim.sim.simulator import Simulator
from tltsim.trace import load

# the shipped single-turn traces: the bound is single responses' (a multi-turn trace is not ideal's to bound)
TRACES = sorted(p for p in glob.glob("traces/synthetic/*.parquet") if "turn_response_len" not in pq.read_schema(p).names)
CLUSTER = ClusterConfig(gpus=64, tp=4)
OVERLAPPING = {"async"}  # rollout beside training: rollout_s is the wait for responses, no rollout time


def plain(name: str):
    """The policy `name`, decoding plainly: speculation off (sd = never) where it has the knob."""
    parts = name.split("+")
    speculates = any("sd" in REGISTRY[p].knob_names for p in parts)
    return make_policy(name, {"sd": "never"} if speculates else {})


def bound_of_finished(sim: Simulator, requests) -> dict[int, float]:
    """Per step, the bound on the responses the step finished (the step's own work, as it ran)."""
    out = {}
    for step, rq in requests[requests["finished"]].groupby("step"):
        p, r = rq["prompt_len"].to_numpy(), rq["response_len"].to_numpy()
        out[int(step)] = max(float(alone_times(p, r, sim.cost).max()),
                             work_time(p, r, sim.cost, sim.workers, sim.cfg.cluster.max_running))
    return out


def test_alone_time_is_the_fast_path_of_one_request_alone():
    sim = Simulator(load(TRACES[0]), SimConfig(cluster=CLUSTER))
    rng = np.random.default_rng(0)
    p, r = rng.integers(1, 4000, 20), rng.integers(1, 8000, 20)
    expected = [fast_rollout([a], [b], sim.cost, 256).duration for a, b in zip(p, r)]
    assert alone_times(p, r, sim.cost) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("trace_path", TRACES)
def test_no_plain_policy_beats_ideal_in_any_step(trace_path):
    trace = load(trace_path)
    cfg = SimConfig(cluster=CLUSTER)
    sim = Simulator(trace, cfg, make_policy("ideal"))
    ideal = sim.run().steps.set_index("step")["rollout_s"]
    # ideal's step is the bound on the trace's step: max(longest alone, the work at the best throughput)
    for step, rows in trace.df.groupby("step"):
        p, r = rows["prompt_len"].to_numpy(), rows["response_len"].to_numpy()
        longest = alone_times(p, r, sim.cost).max()
        work = work_time(p, r, sim.cost, sim.workers, CLUSTER.max_running)
        assert ideal[step] == pytest.approx(max(longest, work), rel=1e-12)
        assert longest > work  # docs/design.md#the-ideal-bound: on the shipped traces the longest response sets it
    checked = []
    for name in policy_names():
        if name in OVERLAPPING or name == "ideal":
            continue
        run_sim = Simulator(trace, cfg, plain(name))
        res = run_sim.run()
        assert res.summary["sd_share"] == 0.0, name
        got = res.steps.set_index("step")["rollout_s"]
        own = bound_of_finished(run_sim, res.requests)
        for step, t in got.items():
            assert t >= own[step] * (1 - 1e-9), (name, step, t, own[step])
        if (res.requests.groupby("step")["finished"].all().all() and len(res.requests) == len(trace.df)
                and res.summary["dropped_fraction"] == 0):  # every response of the trace's step, finished in it
            assert (got >= ideal.loc[got.index] * (1 - 1e-9)).all(), name
            checked.append(name)
    assert {"verl", "longest-first", "migrate", "tlt", "tlt-dedicated", "migrate+tlt"} <= set(checked)


def test_partial_rollout_resuming_its_responses_beats_ideal_but_not_the_bound_on_its_own_work():
    """What the glossary says ideal bounds: a capped trace whose responses partial rollout mostly carries into the
    next step, where each decodes only its remaining tokens."""
    from tltsim.trace import synth

    trace = synth("dapo", 6, 32, 8, 1024, seed=0)
    cfg = SimConfig(cluster=ClusterConfig(gpus=16, tp=4))
    ideal = Simulator(trace, cfg, make_policy("ideal")).run().steps.set_index("step")["rollout_s"]
    sim = Simulator(trace, cfg, make_policy("partial"))
    res = sim.run()
    assert res.summary["resumed_fraction"] > 0.5
    got = res.steps.set_index("step")["rollout_s"]
    assert (got < ideal.loc[got.index]).sum() >= len(got) // 2  # ideal on the trace's responses: no bound here
    own = bound_of_finished(sim, res.requests)
    assert all(t >= own[step] * (1 - 1e-9) for step, t in got.items())  # on the work each step did: a bound


def test_the_bound_is_reached_where_it_should_be():
    cfg = SimConfig(cluster=ClusterConfig(gpus=4, tp=4))  # one engine
    # one response: decoded alone, plain decoding takes exactly the bound L
    one = make_trace([[3000]])
    verl, ideal = (Simulator(one, cfg, make_policy(p)).run().summary["rollout_s"] for p in ("verl", "ideal"))
    assert ideal == pytest.approx(verl, rel=1e-12)
    # a full batch of equal responses: the work bound W is plain decoding's time but for one prefill
    full = make_trace([[2000] * cfg.cluster.max_running])
    verl, ideal = (Simulator(full, cfg, make_policy(p)).run().summary["rollout_s"] for p in ("verl", "ideal"))
    assert ideal <= verl < ideal * 1.001
