"""The agentic rollout's fast executor (tltsim.sim.agentic.fast) against the event executor it is held to
(`reference.Run`, agentic_rollout(..., reference=True)): the same rollouts, the same numbers, on hand-made shares that
queue, evict and wait on tools, and on every policy that runs multi-turn trajectories."""
import copy
import math

import numpy as np
import pytest

import tltsim.sim.simulator as simulator
from tests.sim.conftest import ConstantCost
from tltsim.config import ClusterConfig, SimConfig
from tltsim.cost import Roofline
from tltsim.cost.roofline import CostParams
from tltsim.hardware import load_gpu, load_model
from tltsim.policies import make_policy, policy_names
from tltsim.sim.agentic import Turns, agentic_rollout
from tltsim.sim.simulator import Simulator
from tltsim.trace import synth


def assert_same(fast, ref, rel=0.0):
    """Two EngineRollouts equal (to `rel`, relative, where speculation sums fractional tokens in another order)."""
    def eq(a, b, what):
        a, b = np.asarray(a, float), np.asarray(b, float)
        assert a.shape == b.shape, what
        np.testing.assert_allclose(a, b, rtol=rel, atol=0, err_msg=what)

    for f in ("duration", "admitted_at", "finished_at", "clock_t", "clock_tau", "sd_iterations", "sd_accepted",
              "tool_wait_s"):
        eq(getattr(fast, f), getattr(ref, f), f)
    assert (fast.switch_at is None) == (ref.switch_at is None)
    if ref.switch_at is not None:
        eq(fast.switch_at, ref.switch_at, "switch_at")
    assert fast.strategies.keys() == ref.strategies.keys()
    eq([fast.strategies[k] for k in ref.strategies], list(ref.strategies.values()), "strategies")
    for f in ref.turns:
        eq(fast.turns[f], ref.turns[f], f"turns.{f}")
    assert [(i.state, i.batch_size, i.strategy) for i in fast.intervals] == \
        [(i.state, i.batch_size, i.strategy) for i in ref.intervals]
    for f in ("t_start", "t_end", "tokens", "accepted"):
        eq([getattr(i, f) for i in fast.intervals], [getattr(i, f) for i in ref.intervals], f"intervals.{f}")


def close(a, b, rel):
    """Nested plain data (a control's state_dict) equal, floats to `rel`."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=rel) or (math.isnan(a) and math.isnan(b))
    return a == b


def random_share(rng, rows):
    gen, lat, tok = [], [], []
    for _ in range(rows):
        k = int(rng.integers(1, 5))
        gen.append([int(x) for x in rng.integers(0, 40, k)])  # 0: an aborted turn
        lat.append([None if rng.random() < 0.2 else float(rng.choice([0.0, rng.uniform(0.1, 30.0)]))
                    for _ in range(k)])
        tok.append([int(x) for x in rng.integers(0, 60, k)])
    pending = rng.choice([0.0, 0.0, 3.0, 11.5], rows) if rng.random() < 0.3 else None
    return Turns.of(rng.integers(1, 80, rows), gen, lat, tok, pending)


def roofline(tp=1, overlap=0.0, kv=None):
    cost = Roofline(load_model("qwen2.5-7b"), load_gpu("h100"), tp, CostParams(overlap=overlap))
    if kv is not None:
        cost.kv_capacity_tokens = kv
    return cost


def test_the_roofline_scalar_times_are_its_methods_to_the_last_bit():
    rng = np.random.default_rng(1)
    for tp, overlap in ((1, 0.0), (4, 0.0), (2, 0.6), (4, 1.0)):
        cost = roofline(tp, overlap)
        stretch, prefill = cost.scalar_times()
        for _ in range(300):
            b, k = int(rng.integers(1, 300)), int(rng.integers(1, 2000))
            c = float(rng.integers(1, 3_000_000)) * rng.choice([1.0, 1.37])
            assert stretch(b, c, k) == cost.segment_time(b, 1, c, b, k)
            tokens = float(rng.integers(0, 20000))
            sq = tokens * float(rng.integers(1, 5000))
            assert prefill(tokens, sq) == float(cost.prefill_time(tokens, sq))


@pytest.mark.parametrize("seed", range(6))
def test_fast_is_the_reference_on_shares_that_queue_evict_and_wait(seed):
    rng = np.random.default_rng(seed)
    evicted = 0
    for case in range(12):
        turns = random_share(rng, int(rng.integers(1, 14)))
        kv = int(rng.choice([400, 700, 10**9]))
        cost = ConstantCost(kv_capacity=kv) if case % 2 else roofline(tp=int(rng.choice([1, 4])), kv=kv)
        cost.padded_prefill = case % 4 == 0  # an engine that pads its prefills, as real/'s does
        priority = rng.integers(0, 4, turns.rows).astype(float) if rng.random() < 0.4 else None
        max_running = int(rng.integers(1, 9))
        try:
            ref = agentic_rollout(turns, cost, max_running, priority=priority, reference=True)
        except Exception as e:  # a turn too large for the cache: the fast one says the same
            with pytest.raises(type(e), match="tokens of KV"):
                agentic_rollout(turns, cost, max_running, priority=priority)
            continue
        fast = agentic_rollout(turns, cost, max_running, priority=priority)
        assert_same(fast, ref)  # plain decoding: every number alike
        later = np.ones(len(turns.gen), bool)
        later[turns.first[:-1]] = False
        evicted += int(np.sum(later & (ref.turns["cached_tokens"] == 0) & ~np.isnan(ref.turns["admitted_at"])))
    assert evicted  # the cases reached the cache's evictions


def _kept(rng, turns: Turns) -> Turns:
    """`turns` with a trace's kept tokens: each turn keeps what it generated, fewer (a reasoning block dropped) or a
    few more (a template's wrapping)."""
    share = np.floor(turns.gen * rng.uniform(0, 1, len(turns.gen)))
    kept = turns.gen + rng.choice([0, 0, -1, 3], len(turns.gen)) * share
    return Turns(turns.prompt_len, turns.first, turns.gen, turns.tool_latency_s, turns.tool_tokens, turns.pending_s,
                 np.maximum(kept, 0.0))


@pytest.mark.parametrize("seed", range(3))
def test_fast_is_the_reference_where_turns_keep_other_than_they_generated(seed):
    rng = np.random.default_rng([seed, 7])
    for case in range(10):
        turns = _kept(rng, random_share(rng, int(rng.integers(1, 14))))
        kv = int(rng.choice([400, 700, 10**9]))
        cost = ConstantCost(kv_capacity=kv) if case % 2 else roofline(tp=1, kv=kv)
        max_running = int(rng.integers(1, 9))
        try:
            ref = agentic_rollout(turns, cost, max_running, reference=True)
        except Exception as e:
            with pytest.raises(type(e), match="tokens of KV"):
                agentic_rollout(turns, cost, max_running)
            continue
        assert_same(agentic_rollout(turns, cost, max_running), ref)


def test_a_turn_that_keeps_fewer_tokens_than_it_generated_grows_the_context_by_those_it_keeps():
    """One trajectory: 100 prompt tokens, a turn of 50 generated of which 10 are kept, a tool answer of 20, then a
    last turn. The next turn's context is 100 + 10 + 20; its cache holds the 100 before the re-templated turn, so it
    prefills 30."""
    turns = Turns.of([100], [[50, 5]], [[0.5, None]], [[20, 0]], kept=[[10, 5]])
    for reference in (True, False):
        out = agentic_rollout(turns, ConstantCost(), 4, reference=reference)
        assert out.turns["prompt_tokens"].tolist() == [100, 130]
        assert out.turns["cached_tokens"].tolist() == [0, 100]
    same = agentic_rollout(Turns.of([100], [[50, 5]], [[0.5, None]], [[20, 0]]), ConstantCost(), 4)
    assert same.turns["prompt_tokens"].tolist() == [100, 170] and same.turns["cached_tokens"].tolist() == [0, 150]


# async's engines play their own loop between weight updates (tltsim.sim.async_loop), not agentic_rollout
MULTI_TURN = [p for p in policy_names() if make_policy(p).multi_turn and p != "async"]


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("policy", MULTI_TURN)
def test_fast_is_the_reference_on_every_multi_turn_policy(policy, padded, monkeypatch):
    # every engine's rollout played by both on the same input (the speculation's control copied first), kept
    # small: 4 GPUs of TP 1, 6 running, a cache that evicts; and on an engine that pads its prefills (real/'s)
    calls = []

    def both(turns, cost, max_running, spec=None, priority=None, reference=False):
        spec_ref = copy.deepcopy(spec)
        ref = agentic_rollout(turns, cost, max_running, spec_ref, priority, reference=True)
        fast = agentic_rollout(turns, cost, max_running, spec, priority)
        rel = 0.0 if spec is None else 1e-9
        assert_same(fast, ref, rel)
        if spec is not None:
            assert close(spec.control.state_dict(), spec_ref.control.state_dict(), 1e-9)
        calls.append((spec is not None, fast.sd_iterations))
        return fast

    monkeypatch.setattr(simulator, "agentic_rollout", both)
    trace = synth("agentic", steps=2, prompts=6, group=4, max_len=4096, seed=3)
    cfg = SimConfig(cluster=ClusterConfig(gpus=4, tp=1, gpu="h100", model="qwen2.5-7b", max_running=6))
    cost = roofline(kv=9000)
    cost.padded_prefill = padded
    Simulator(trace, cfg, make_policy(policy), cost=cost).run()
    assert calls
    if any(speculates for speculates, _ in calls):  # and its speculation ran, switch, guard and tuner alike
        assert any(iterations > 0 for _, iterations in calls)
