"""Multi-turn trajectories in the simulator: tool waits, the prefill after a tool, the KV a wait keeps or loses,
the drafter trained in tool waits, and the records a run of them writes."""
import numpy as np
import pandas as pd
import pytest

from tests.sim.conftest import ConstantCost
from tltsim.config import ClusterConfig, RLConfig, SimConfig
from tltsim.core.errors import TltsimError
from tltsim.policies import make_policy
from tltsim.sim.agentic import Turns, agentic_rollout
from tltsim.sim.simulator import Simulator
from tltsim.trace import Trace, TraceMeta


def trajectories(rows):
    """rows: (prompt_len, [turn tokens], [tool latency or None], [tool tokens]) per trajectory, one step, group 1."""
    df = pd.DataFrame([{"step": 0, "prompt_id": i, "sample": 0, "prompt_len": p, "response_len": sum(g),
                        "turn_response_len": g, "tool_latency_s": lat, "tool_tokens": tok}
                       for i, (p, g, lat, tok) in enumerate(rows)])
    return Trace.from_frame(df, TraceMeta(source="test"))


def cfg(gpus=2, **kw):
    return SimConfig(cluster=ClusterConfig(gpus=gpus, tp=1, max_running=8), rl=RLConfig(reward_s=0.5), **kw)


# engine 0: a trajectory of two turns (2 tokens, a 4 s tool call appending 100 tokens, 3 tokens); engine 1: one turn
# of 4 tokens. Prefill 0.5 s, decode 1 s an iteration, train 2 s, sync 1 s.
TWO = [(10, [2, 3], [4.0, None], [100, 0]), (10, [4], [None], [0])]


def timeline(res):
    return [(w, s, a, b) for w, s, a, b in res.timeline[["worker", "state", "t_start", "t_end"]].itertuples(index=False)
            if s in ("prefill", "decode", "tool_wait", "drafter_train", "idle")]


def test_whole_timeline_of_a_tool_call():
    res = Simulator(trajectories(TWO), cfg(), cost=ConstantCost()).run()
    assert timeline(res) == [
        (0, "prefill", 0.0, 0.5), (0, "decode", 0.5, 2.5),  # turn 0
        (0, "tool_wait", 2.5, 6.5),  # its only trajectory waits on the tool: the engine has nothing to run
        (0, "prefill", 6.5, 7.0), (0, "decode", 7.0, 10.0),  # the tool's answer prefilled, then turn 1
        (1, "prefill", 0.0, 0.5), (1, "decode", 0.5, 4.5), (1, "idle", 4.5, 10.0),
    ]
    turns = res.turns
    assert turns[["prompt_id", "turn", "prompt_tokens", "cached_tokens", "response_len", "tool_tokens"]].values.tolist() \
        == [[0, 0, 10, 0, 2, 0 + 100], [0, 1, 112, 12, 3, 0], [1, 0, 10, 0, 4, 0]]
    assert turns["admitted_at"].tolist() == [0.0, 6.5, 0.0] and turns["finished_at"].tolist() == [2.5, 10.0, 4.5]
    step = res.steps.iloc[0]
    assert (step.trajectories, step.turns, step.tool_calls) == (2, 3, 1)
    assert step.tool_wait_share == pytest.approx(4.0 / (2 * 10.0))
    s = res.summary
    assert s["turns_per_trajectory"] == 1.5 and s["tool_wait_share"] == pytest.approx(0.2)
    assert s["idle_gpu_seconds"] == pytest.approx(4.0 + 5.5)  # the tool wait is idle GPU time too


def test_tlt_trains_the_drafter_in_a_tool_wait_and_after_its_share():
    # sd never: no speculation, so the timeline stays the one above; the spot trainer takes engine 1 once its share
    # is done (4.5 s) and engine 0 for its tool wait (2.5-6.5 s: longer than loading and saving the drafter)
    res = Simulator(trajectories(TWO), cfg(), policy=make_policy("tlt", {"sd": "never"}),
                    cost=ConstantCost()).run()
    assert timeline(res) == [
        (0, "prefill", 0.0, 0.5), (0, "decode", 0.5, 2.5), (0, "drafter_train", 2.5, 6.5),
        (0, "prefill", 6.5, 7.0), (0, "decode", 7.0, 10.0),
        (1, "prefill", 0.0, 0.5), (1, "decode", 0.5, 4.5), (1, "drafter_train", 4.5, 10.0),
    ]
    step = res.steps.iloc[0]
    assert step.drafter_train_gpu_s == pytest.approx(4.0 + 5.5)
    assert step.tool_wait_share == pytest.approx(0.2)  # the wait is the trajectories', whatever the GPU did in it


def test_a_wait_shorter_than_loading_the_drafter_stays_a_tool_wait():
    short = [(10, [2, 3], [0.5, None], [100, 0]), (10, [4], [None], [0])]
    res = Simulator(trajectories(short), cfg(), policy=make_policy("tlt", {"sd": "never"}), cost=ConstantCost()).run()
    assert (0, "tool_wait", 2.5, 3.0) in timeline(res)


def test_the_slot_a_tool_call_frees_goes_to_the_next_in_line():
    # one slot: trajectory 1 takes it while trajectory 0 waits on its tool (2.5-3.5 s), runs to 7 s, and 0 comes
    # back after it
    t = Turns.of([10, 10], [[2, 3], [4]], [[1.0, None], [None]], [[5, 0], [0]])
    ro = agentic_rollout(t, ConstantCost(), max_running=1)
    assert ro.turns["admitted_at"].tolist() == [0.0, 7.0, 2.5]  # turns: 0's first, 0's second, 1's
    assert ro.finished_at.tolist() == [10.5, 7.0] and ro.tool_wait_s == 0.0


def test_a_full_cache_evicts_the_waiting_trajectory_which_prefills_its_whole_context_again():
    # room for 40 tokens: trajectory 0 (10 + 2, then a tool answer of 5) waits while trajectory 1 (30 + 8) runs, which
    # needs its room: 0's cached 12 tokens go, and its next turn prefills all 17
    t = Turns.of([10, 30], [[2, 3], [8]], [[1.0, None], [None]], [[5, 0], [0]])
    ro = agentic_rollout(t, ConstantCost(kv_capacity=40), max_running=2)
    assert ro.turns["cached_tokens"].tolist() == [0, 0, 0] and ro.turns["prompt_tokens"].tolist() == [10, 17, 30]
    roomy = agentic_rollout(t, ConstantCost(kv_capacity=100), max_running=2)
    assert roomy.turns["cached_tokens"].tolist() == [0, 12, 0]


def test_a_last_tool_call_ends_the_trajectory_when_it_answers():
    t = Turns.of([10], [[2]], [[3.0]], [[7]])
    ro = agentic_rollout(t, ConstantCost(), max_running=4)
    assert ro.finished_at.tolist() == [5.5] and ro.tool_wait_s == 3.0


def test_speculation_shortens_generation_not_tool_waits():
    rng = np.random.default_rng(0)
    rows = [(100, [int(x) for x in rng.integers(20, 200, n)], [float(rng.uniform(1, 5)) for _ in range(n - 1)] + [None],
             [int(x) for x in rng.integers(50, 300, n - 1)] + [0]) for n in rng.integers(1, 5, 16)]
    trace = trajectories(rows)
    plain = Simulator(trace, cfg(), cost=None).run()
    tlt = Simulator(trace, cfg(), policy=make_policy("sd-always"), cost=None).run()
    assert tlt.summary["rollout_s"] < plain.summary["rollout_s"]
    assert tlt.steps.iloc[0].tool_calls == plain.steps.iloc[0].tool_calls
    waited = lambda r: float(r.turns["tool_latency_s"].fillna(0).sum())  # noqa: E731
    assert waited(tlt) == waited(plain)


def test_partial_rollout_carries_a_trajectory_on_from_its_tool_call():
    # one engine; partial launches two groups a step and stops when one has finished. Step 0 runs A (2 tokens, a
    # 4 s tool call answering 100 tokens, then 3 tokens) beside B (4 tokens): B ends at 4.5 s and the step stops
    # with A waiting on its tool (2 s more). A goes on in step 1 from its second turn once the call has answered, its
    # context (10 + 2 + 100) prefilled anew
    def step_rows(step, rows):
        return [{"step": step, "prompt_id": i, "sample": 0, "prompt_len": p, "response_len": sum(g),
                 "turn_response_len": g, "tool_latency_s": lat, "tool_tokens": tok} for i, (p, g, lat, tok) in
                enumerate(rows)]
    df = pd.DataFrame(step_rows(0, [TWO[0]]) + step_rows(1, [TWO[1]]) + step_rows(2, [(10, [5], [None], [0])]))
    trace = Trace.from_frame(df, TraceMeta(source="test"))
    res = Simulator(trace, cfg(gpus=1, steps="0:2"), policy=make_policy("partial"), cost=ConstantCost()).run()
    turns = res.turns
    first = turns[turns["step"] == 0]
    assert first[["turn", "response_len", "finished_at"]].values.tolist() == [[0, 2, 2.5], [0, 4, 4.5]]
    assert res.steps["rollout_s"].iloc[0] == 4.5 and res.steps["resumed"].iloc[1] == 1
    again = turns[(turns["step"] == 1) & (turns["response_len"] == 3)]
    assert again[["prompt_tokens", "cached_tokens"]].values.tolist() == [[112, 0]]
    # back at 2 s, admitted at the iteration boundary after it: the step's fresh row prefilled (0-0.5 s) and decodes
    assert again["admitted_at"].iloc[0] - res.steps["t_start"].iloc[1] == pytest.approx(2.5)


def test_async_rl_runs_trajectories_whose_tools_keep_its_engine_waiting():
    # one rollout engine, one trainer; every trajectory calls a 50 s tool between its two turns, so the engine,
    # with all its samples in tool calls, waits; the trained samples' turns are the trace's
    rows = [(10, [3, 2], [50.0, None], [20, 0]) for _ in range(4)]
    df = pd.DataFrame([{"step": s, "prompt_id": i, "sample": 0, "prompt_len": p, "response_len": sum(g),
                        "turn_response_len": g, "tool_latency_s": lat, "tool_tokens": tok}
                       for s in range(2) for i, (p, g, lat, tok) in enumerate(rows)])
    trace = Trace.from_frame(df, TraceMeta(source="test"))
    res = Simulator(trace, cfg(gpus=2), policy=make_policy("async"), cost=ConstantCost()).run()
    assert len(res.steps) == 2 and res.summary["turns_per_trajectory"] == 2.0
    assert (res.steps["tool_calls"] == res.steps["trajectories"]).all()
    waits = res.timeline[(res.timeline["state"] == "tool_wait") & (res.timeline["worker"] == 0)]
    assert len(waits) and (waits["t_end"] - waits["t_start"]).max() <= 50.0 + 1e-9
    assert res.summary["tool_wait_share"] > 0.5  # 50 s calls against a few seconds of decoding


@pytest.mark.parametrize("policy", ["migrate", "tail-batching", "ideal"])
def test_policies_of_single_responses_refuse_a_multi_turn_trace(policy):
    with pytest.raises(TltsimError, match="does not run multi-turn trajectories"):
        Simulator(trajectories(TWO), cfg(), policy=make_policy(policy), cost=ConstantCost())


def test_exact_refuses_a_multi_turn_trace():
    with pytest.raises(TltsimError, match="drop --exact"):
        Simulator(trajectories(TWO), cfg(exact=True), cost=ConstantCost())


def test_a_trajectory_aware_queue_serves_a_returning_long_trajectory_before_fresh_short_ones():
    # one slot; A (2 + 3 tokens, a 1 s tool call) is predicted longest, C next, B shortest. FIFO: A, B, then C (in
    # line since 0 s) before A's second turn (back at 3.5 s); by priority: A, C, then A again, then B
    t = Turns.of([10, 10, 10], [[2, 3], [4], [4]], [[1.0, None], [None], [None]], [[5, 0], [0], [0]])
    fifo = agentic_rollout(t, ConstantCost(), max_running=1)
    assert fifo.finished_at.tolist() == [15.0, 7.0, 11.5]
    ranked = agentic_rollout(t, ConstantCost(), max_running=1, priority=np.array([10.0, 1.0, 5.0]))
    assert ranked.finished_at.tolist() == [10.5, 15.0, 7.0]


def test_longest_first_ranks_trajectories_in_the_queue_by_their_predicted_length():
    rows = [(10, [2, 3], [1.0, None], [5, 0]), (10, [4], [None], [0]), (10, [4], [None], [0])]
    c = SimConfig(cluster=ClusterConfig(gpus=1, tp=1, max_running=1), rl=RLConfig(reward_s=0.5))
    res = Simulator(trajectories(rows), c, policy=make_policy("longest-first", {"predictor": "oracle"}),
                    cost=ConstantCost()).run()
    # oracle lengths 5, 4, 4: the five-token trajectory first, then the two others in order, its second turn between
    assert res.requests.sort_values("prompt_id")["finished_at"].tolist() == [10.5, 7.0, 15.0]
