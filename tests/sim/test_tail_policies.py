"""Tail batching, longest-first admission and tail migration: whole steps worked out by hand."""
import numpy as np
import pytest

from tests.sim.conftest import ConstantCost, make_trace
from tltsim.config import ClusterConfig, RLConfig, SimConfig
from tltsim.core.errors import TltsimError
from tltsim.policies import make_policy
from tltsim.sim.simulator import Simulator
from tltsim.trace import load


def run(trace, policy, gpus=1, max_running=8, cost=None, **knobs):
    cfg = SimConfig(cluster=ClusterConfig(gpus=gpus, tp=1, max_running=max_running), rl=RLConfig(reward_s=0.5))
    return Simulator(trace, cfg, make_policy(policy, knobs), cost=cost or ConstantCost()).run()


def spans(res, worker, step=0):
    tl = res.timeline[(res.timeline.worker == worker) & (res.timeline.step == step)]
    return [(r.state, r.t_start, r.t_end) for r in tl.itertuples()]


# --- tail batching ---------------------------------------------------------------------------------
def test_tail_batching_parks_the_long_prompt_and_runs_it_in_a_long_round():
    # stream 2, 6 | 4, 5 | 1, 3 | (wraps) 2; 2 groups a step, eta 1.5 launches 3 in a short round.
    # step 0 (short): 2, 6, 4 finish at 2.5, 6.5, 4.5 -> stop at 4.5, the 6 is aborted (4 tokens lost) and parked.
    # step 1 (long, long_every 1): parked 6 from scratch + fresh 5, to completion: 6.5.
    # step 2 (short): 1, 3, 2 -> stop at 2.5 (1 and 2 done), the 3 is aborted with 2 tokens and parked.
    res = run(make_trace([[2, 6], [4, 5], [1, 3]]), "tail-batching", eta=1.5, long_every=1)
    s = res.steps
    assert s["t_start"].tolist() == [0.0, 8.0, 18.0]
    assert s["rollout_s"].tolist() == [4.5, 6.5, 2.5]
    assert s["long_round"].tolist() == [False, True, False]
    assert s["dropped"].tolist() == [1, 0, 1] and s["parked_groups"].tolist() == [1, 0, 1]
    assert s["dropped_fraction"].tolist() == [1 / 3, 0.0, 1 / 3]
    req = res.requests
    long = req[req.step == 1]
    assert long[["prompt_len", "response_len", "finished"]].values.tolist() == [[10, 6, True], [10, 5, True]]
    assert res.summary["staleness_max"] == 0 and res.summary["dropped_fraction"] == 2 / (6 + 2)


def test_tail_batching_waits_for_a_full_batch_of_parked_prompts():
    res = run(make_trace([[2, 6], [4, 5], [1, 3], [2, 2]]), "tail-batching", eta=1.5, long_every=10)
    # one prompt parked per short round: the long round comes when two are parked (step 2)
    assert res.steps["long_round"].tolist() == [False, False, True, False]


# --- longest-first ---------------------------------------------------------------------------------
def test_longest_first_with_an_oracle_beats_fifo_where_it_must():
    # one slot per engine; contiguous chunks give engine 1 both long ones: 2 x (0.5 + 8) = 17;
    # longest-first spreads them: each engine 0.5 + 8 then 0.5 + 1 = 10
    trace = make_trace([[1, 1, 8, 8]])
    fifo = run(trace, "verl", gpus=2, max_running=1)
    lf = run(trace, "longest-first", gpus=2, max_running=1, predictor="oracle")
    assert fifo.summary["rollout_s"] == 17.0 and lf.summary["rollout_s"] == 10.0
    assert sorted(lf.requests.groupby("engine").response_len.max().tolist()) == [8, 8]


def test_longest_first_history_learns_a_prompts_length():
    # step 0 has no history: round-robin puts both 8s on engine 0 (17 s); step 1 predicts from step 0 (10 s)
    res = run(make_trace([[8, 1, 8, 1], [8, 1, 8, 1]]), "longest-first", gpus=2, max_running=1)
    assert res.steps["rollout_s"].tolist() == [17.0, 10.0]


def test_noisy_oracle_is_seeded_and_on_policy():
    trace = load("traces/synthetic/dapo_like.parquet").select_steps([0, 1])
    cfg = SimConfig(cluster=ClusterConfig(gpus=16, tp=4))
    a, b = (Simulator(trace, cfg, make_policy("longest-first", {"predictor": "oracle", "noise": 1.0})).run()
            for _ in range(2))
    assert a.summary == b.summary and a.summary["staleness_max"] == 0 and a.summary["dropped_fraction"] == 0


# --- migration -------------------------------------------------------------------------------------
class LogprobCost(ConstantCost):
    def logprob_time(self, tokens, gpus, sq_tokens=0.0):
        return tokens / 10 / gpus


def test_migration_moves_the_tail_at_the_threshold_and_releases_the_rest():
    # engines get 2, 10 | 3, 9 | 1, 1 (all admitted at 0; finish 0.5 + L). remaining 2/6 of 6 -> move when 2 are
    # left: at 3.5. Engine 0 (first with most left) keeps the tail: 10 and 9 have 3 tokens each; it re-prefills
    # both (0.5) and finishes 7 and 6 more: 11.0. Engines 1 and 2 are released at 3.5 (engine 2 finished at 1.5).
    trace = make_trace([[2, 10, 3, 9, 1, 1]])
    res = run(trace, "migrate", gpus=3, cost=LogprobCost(), remaining=2 / 6, to_engines=1)
    assert res.steps["rollout_s"].tolist() == [11.0]
    assert res.steps["migrated"].tolist() == [2] and res.steps["migrate_at_s"].tolist() == [3.5]
    # next stage: the log-probs of the 4 responses done by 3.5 (4 x 10 + 7 tokens -> 4.7 GPU-s) on 2 released GPUs
    assert spans(res, 0)[:3] == [("prefill", 0.0, 0.5), ("decode", 0.5, 3.5), ("prefill", 3.5, 4.0)]
    assert spans(res, 0)[3][:2] == ("decode", 4.0) and spans(res, 0)[3][2] == 11.0
    assert spans(res, 1)[:4] == [("prefill", 0.0, 0.5), ("decode", 0.5, 3.5), ("reward", 3.5, 3.5 + 2.35),
                                 ("idle", 3.5 + 2.35, 11.0)]
    assert spans(res, 2)[2:4] == [("idle", 1.5, 3.5), ("reward", 3.5, 5.85)]
    # the reward stage after the barrier: 0.5 + (86 tokens / 10 - 4.7) / 3 GPUs
    assert res.steps["reward_s"].iloc[0] == pytest.approx(0.5 + (8.6 - 4.7) / 3)
    req = res.requests.sort_values("finished_at")
    # one row per response: a moved one counts its tokens before and after the move, on the engine that finished it
    assert req[["response_len", "engine", "finished_at"]].values.tolist() == [
        [1, 2, 1.5], [1, 2, 1.5], [2, 0, 2.5], [3, 1, 3.5], [9, 0, 10.0], [10, 0, 11.0]]
    idle = run(trace, "migrate", gpus=3, remaining=2 / 6, to_engines=1, release="idle")
    assert spans(idle, 1)[2] == ("idle", 3.5, 11.0)


def test_no_migration_above_the_threshold_or_when_the_tail_is_already_on_few_engines():
    trace = make_trace([[2, 10, 3, 9, 1, 1]])
    none = run(trace, "migrate", gpus=3, remaining=0.0, to_engines=1)
    assert none.steps["migrated"].tolist() == [0] and none.summary["rollout_s"] == 10.5
    few = run(trace, "migrate", gpus=3, remaining=2 / 6, to_engines=2)  # 2 engines hold the tail already
    assert few.steps["migrated"].tolist() == [0]


def test_migration_frees_gpus_only_after_the_threshold_on_a_shipped_trace():
    trace = load("traces/synthetic/dapo_like.parquet").select_steps([0, 1, 2])
    cfg = SimConfig(cluster=ClusterConfig(gpus=32, tp=4))
    res = Simulator(trace, cfg, make_policy("migrate", {"remaining": 0.05})).run()
    assert (res.steps.migrated > 0).all()
    for step in res.steps.itertuples():
        if not step.migrated:
            continue
        at = step.t_start + step.migrate_at_s
        fin = np.sort(res.requests[res.requests.step == step.step].groupby(["prompt_id", "sample"]).finished_at.max())
        n = len(fin)
        assert np.sum(fin > at) <= 0.05 * n < np.sum(fin >= at)  # at the threshold, not before
        tl = res.timeline[(res.timeline.step == step.step) & res.timeline.state.isin(["prefill", "decode"])]
        ends = tl.groupby("worker").t_end.max()
        released = ends[ends <= at + 1e-9]
        assert len(released) == 8 - 2 and (ends[ends > at + 1e-9].index.size == 2)


def test_migrate_knob_errors():
    with pytest.raises(TltsimError, match="release = 'drafter' needs a drafter to train; use migrate\\+tlt"):
        run(make_trace([[1]]), "migrate", release="drafter")
    with pytest.raises(TltsimError, match="remaining = 1.5 must be a number in \\[0.0, 1.0\\]"):
        make_policy("migrate", {"remaining": 1.5})
    with pytest.raises(TltsimError, match="to_engines = 0 must be an integer >= 1"):
        make_policy("migrate", {"to_engines": 0})
    assert make_policy("migrate+tlt").parts[0].k.release == "drafter"
