"""The long-tail policies' decisions on hand-worked cases, without a simulator: partial rollout, tail batching,
longest-first placement, tail migration (tltsim.control: groups, partial, tail, placement, migration)."""
import json

import numpy as np
import pytest

from tltsim.control.async_rl import AsyncControl
from tltsim.control.groups import GroupQuota, concat, groups_in, needs_engine, quota_stop, take_rows
from tltsim.control.knobs import build
from tltsim.control.migration import MigrateKnobs, MigrationControl, next_stage_span
from tltsim.control.partial import PartialControl, PartialKnobs, groups_to_launch, rest_of_trajectories
from tltsim.control.placement import HistoryPredictor, lpt_shares
from tltsim.control.tail import TailBatchingKnobs, TailControl, is_long_round, short_round_groups
from tltsim.core.errors import TltsimError


def rows(groups, response_len, step=0, first_group=0):
    """Rows of `groups` prompt groups of `len(response_len) // groups` samples, numbered from `first_group`."""
    n = len(response_len)
    group = first_group + np.repeat(np.arange(groups), n // groups)
    return {"step": np.full(n, step), "prompt_id": group % 100, "prompt_len": np.full(n, 10),
            "response_len": np.asarray(response_len, np.int64), "group": group, "origin": np.full(n, step),
            "carried": np.zeros(n, np.int64)}


def roundtrip(state: dict) -> dict:
    return json.loads(json.dumps(state))  # a checkpoint holds plain data


# groups: the quota stop

def test_quota_stops_at_the_target_th_group_and_keeps_ties():
    group = np.array([0, 0, 1, 1, 2, 2])
    finish = np.array([1.0, 5.0, 2.0, 3.0, 3.0, 9.0])  # groups finish at 5, 3, 9
    stop, done = quota_stop(group, finish, 2)
    assert stop == 5.0 and done.tolist() == [True, True, True, True, False, False]
    stop, done = quota_stop(group, np.array([1.0, 3.0, 2.0, 3.0, 3.0, 9.0]), 1)  # two groups finish at 3
    assert stop == 3.0 and done.tolist() == [True, True, True, True, False, False]
    assert quota_stop(group, finish, 0)[0] == 0.0 and quota_stop(group, finish, 7)[0] == 9.0


def test_group_quota_told_online_agrees_with_the_offline_stop():
    rng = np.random.default_rng(0)
    group = np.repeat(np.arange(6), 3)
    finish = rng.integers(1, 8, len(group)).astype(float)  # integer times: ties
    for target in range(7):
        stop, done = quota_stop(group, finish, target)
        q = GroupQuota(group, target)
        at = 0.0 if q.stopped else next(t for t in np.unique(finish) if q.finished(np.flatnonzero(finish == t)))
        assert at == stop and q.done.tolist() == done.tolist()


def test_rows_helpers_and_which_rows_run():
    a, b = rows(2, [1, 2, 3, 4]), rows(1, [5, 6], first_group=2)
    both = concat([{}, a, b])
    assert groups_in(both) == 3 and both["response_len"].tolist() == [1, 2, 3, 4, 5, 6]
    assert concat([{}, take_rows(a, np.zeros(4, bool))]) == {}
    assert needs_engine(np.array([0, 3, 0]), np.array([True, False, False])).tolist() == [True, True, False]
    assert needs_engine(np.array([0, 3])).tolist() == [False, True]


# partial rollout

def test_partial_launches_ratio_times_need_carried_first():
    assert groups_to_launch(2.0, 4, 0) == (8, 8)
    assert groups_to_launch(2.0, 4, 3) == (8, 5)
    assert groups_to_launch(1.5, 3, 0) == (5, 5)  # ceil(4.5)
    assert groups_to_launch(2.0, 4, 10) == (10, 0)  # never fewer than it carries
    assert groups_to_launch(1.1, 10, 0) == (11, 11)  # 11.000000000000002 is 11


def test_partial_carries_unfinished_rows_with_their_tokens_and_first_version():
    c = PartialControl(PartialKnobs(ratio=2.0))
    assert c.begin_step(1) == 2 and c.launched == 2
    step0 = c.rows(rows(2, [4, 6, 8, 10]))  # groups 0 and 1, two samples each
    done = np.array([True, True, False, False])
    assert c.end_step(0, step0, done, generated=np.array([4, 6, 6, 0])) == 0
    carry = c.carry
    assert carry["group"].tolist() == [1, 1] and c.carried_groups == 1
    assert carry["prompt_len"].tolist() == [16, 10] and carry["response_len"].tolist() == [2, 10]
    assert carry["carried"].tolist() == [6, 0]
    assert carry["origin"].tolist() == [0, 1]  # a row with no tokens yet gets its first from step 1 at the earliest
    state = roundtrip(c.state_dict())

    assert c.begin_step(1) == 1 and c.launched == 2  # one carried, one fresh
    step1 = c.rows(rows(1, [5, 5], step=1, first_group=2))
    assert step1["group"].tolist() == [1, 1, 2, 2] and c.carry == {}
    c.end_step(1, step1, np.array([False, False, True, True]), generated=np.array([1, 3, 5, 5]))
    assert c.carry["carried"].tolist() == [7, 3] and c.carry["origin"].tolist() == [0, 1]

    again = PartialControl(PartialKnobs(ratio=2.0))
    again.load_state_dict(state)  # resumed after step 0: the same carry, the same next step
    assert {k: v.tolist() for k, v in again.carry.items()} == {k: v.tolist() for k, v in carry.items()}
    assert again.begin_step(1) == 1 and again.rows({})["carried"].dtype == np.int64


def test_partial_drop_throws_the_unfinished_tokens_away():
    c = PartialControl(PartialKnobs(unfinished="drop"))
    c.begin_step(1)
    r = c.rows(rows(2, [4, 6, 8, 10]))
    assert c.end_step(0, r, np.array([True, True, False, False]), np.array([4, 6, 8, 0])) == 1
    assert c.carry == {} and c.carried_groups == 0 and c.begin_step(1) == 2


def test_a_trajectory_goes_on_from_the_turn_it_was_in():
    lists = lambda *v: np.array(list(v) + [None], dtype=object)[:-1]  # noqa: E731
    r = {"turn_response_len": lists([3, 4, 5], [2, 2]), "tool_latency_s": lists([1.0, 2.0, None], [0.5, None]),
         "tool_tokens": lists([7, 8, 0], [9, 0])}
    seen = {0: (np.array([3, 1, 0]), np.array([0.0, 6.0, np.nan]), np.array([2.0, np.nan, np.nan]), 7.0)}
    rest = rest_of_trajectories(r, np.array([True, True]), seen)
    assert rest["turn_response_len"].tolist() == [[3, 5], [2, 2]]  # row 1 had run nothing
    assert rest["tool_latency_s"].tolist() == [[2.0, None], [0.5, None]]
    assert rest["tool_done"].tolist() == [7, 0] and rest["tool_pending_s"].tolist() == [0.0, 0.0]
    seen = {0: (np.array([3, 0, 0]), np.array([0.0, np.nan, np.nan]), np.array([2.0, np.nan, np.nan]), 2.5)}
    rest = rest_of_trajectories(r, np.array([True, False]), seen)  # stopped in its first tool call
    assert rest["turn_response_len"].tolist() == [[4, 5]] and rest["tool_pending_s"].tolist() == [0.5]
    assert rest["dropped_done"].tolist() == [0] and "turn_kept_len" not in rest  # every token kept


def test_a_trajectory_that_keeps_fewer_tokens_than_it_generated_goes_on_without_them():
    """Its first turn generated 3 and kept 1: the resumed row's prompt leaves out the 2 it dropped, and the turn it
    was in (1 of 4 generated) keeps what it keeps less what it generated of it."""
    lists = lambda *v: np.array(list(v) + [None], dtype=object)[:-1]  # noqa: E731
    r = {"turn_response_len": lists([3, 4, 5]), "tool_latency_s": lists([1.0, 2.0, None]),
         "tool_tokens": lists([7, 8, 0]), "turn_kept_len": lists([1, 4, 5])}
    seen = {0: (np.array([3, 1, 0]), np.array([0.0, 6.0, np.nan]), np.array([2.0, np.nan, np.nan]), 7.0)}
    rest = rest_of_trajectories(r, np.array([True]), seen)
    assert rest["turn_response_len"].tolist() == [[3, 5]] and rest["turn_kept_len"].tolist() == [[3, 5]]
    assert rest["tool_done"].tolist() == [7] and rest["dropped_done"].tolist() == [2]


# tail batching

def test_tail_long_round_rule_and_short_round_size():
    assert is_long_round(parked=4, need=4, short_rounds=0, long_every=4)
    assert not is_long_round(parked=3, need=4, short_rounds=3, long_every=4)
    assert is_long_round(parked=1, need=4, short_rounds=4, long_every=4)
    assert not is_long_round(parked=0, need=4, short_rounds=9, long_every=4)
    assert short_round_groups(1.25, 4) == 5 and short_round_groups(1.0, 4) == 4


def test_tail_parks_aborted_groups_and_runs_the_oldest_in_a_long_round():
    c = TailControl(TailBatchingKnobs(eta=1.5, long_every=2))
    assert c.begin_step(2) == 3 and not c.long
    r = c.rows(0, rows(3, [1, 1, 9, 9, 1, 1]))
    assert c.end_step(r, np.array([True, True, False, False, True, True]), np.array([1, 1, 4, 0, 1, 1])) == 1
    assert c.parked["group"].tolist() == [1, 1] and c.short_rounds == 1

    assert c.begin_step(2) == 3 and not c.long  # one parked of two needed, one short round so far
    r = c.rows(1, rows(3, [9, 9, 1, 1, 1, 1], step=1, first_group=3))
    c.end_step(r, np.array([False, False, True, True, True, True]), np.array([2, 2, 1, 1, 1, 1]))
    assert c.parked_groups == 2 and c.short_rounds == 2
    state = roundtrip(c.state_dict())

    for d in (c, TailControl(TailBatchingKnobs(eta=1.5, long_every=2))):
        d.load_state_dict(state)
        assert d.begin_step(1) == 0 and d.long  # parked fill the batch: group 1, the oldest, runs anew
        long = d.rows(2, {})
        assert long["group"].tolist() == [1, 1]
        assert long["origin"].tolist() == [2, 2] and long["step"].tolist() == [2, 2]
        assert d.parked["group"].tolist() == [3, 3]
        assert d.end_step(long, None, np.array([9, 9])) == 0 and d.short_rounds == 0 and d.parked_groups == 1


def test_tail_long_round_after_long_every_short_rounds_tops_up_with_fresh():
    c = TailControl(TailBatchingKnobs(eta=2.0, long_every=1))
    c.begin_step(2)
    r = c.rows(0, rows(4, [1, 1, 1, 9]))
    c.end_step(r, np.array([True, True, True, False]), np.array([1, 1, 1, 3]))
    assert c.begin_step(2) == 1 and c.long  # one parked, after one short round: it and one fresh group
    assert c.rows(1, rows(1, [2], step=1, first_group=4))["group"].tolist() == [3, 4]


# longest-first

def test_history_predicts_a_prompts_mean_and_the_overall_mean_for_a_new_one():
    p = HistoryPredictor()
    assert p.predict(np.array([1, 2])).tolist() == [0.0, 0.0]
    p.observe(np.array([1, 1, 2]), np.array([10, 20, 60]))
    assert p.predict(np.array([1, 2, 3])).tolist() == [15.0, 60.0, 30.0]
    q = HistoryPredictor()
    q.load_state_dict(roundtrip(p.state_dict()))
    assert q.predict(np.array([1, 2, 3])).tolist() == [15.0, 60.0, 30.0]


def test_lpt_places_longest_first_on_the_least_loaded_engine():
    shares = lpt_shares(np.array([1.0, 8.0, 3.0, 5.0, 4.0]), 2)
    # 8 -> e0; 5 -> e1; 4 -> e1 (5 < 8); 3 -> e0 (8 < 9); 1 -> e1 (9 < 11)
    assert [s.tolist() for s in shares] == [[1, 2], [3, 4, 0]]
    # equal predictions (step 0: nothing known) are dealt round-robin, in row order
    assert [s.tolist() for s in lpt_shares(np.zeros(5), 2)] == [[0, 2, 4], [1, 3]]


# migration

def test_migration_point_targets_and_round_robin():
    c = MigrationControl(MigrateKnobs(remaining=0.25, to_engines=2))
    assert c.keep(8) == 2 and c.keep(3) == 0
    assert c.due(2, 8) and not c.due(3, 8) and not c.due(0, 3)
    finish = np.array([1.0, 2, 3, 4, 5, 6, 7, 8])
    assert c.when(finish) == 6.0  # the 6th finish leaves 2
    assert c.when(finish[:3]) is None  # keep 0: never
    assert c.targets({0: 1, 1: 3, 2: 3, 3: 0}) == [1, 2]  # most unfinished, lowest index on a tie
    assert c.targets({0: 1, 1: 3, 2: 0}) is None  # already on two engines
    assert {e: p.tolist() for e, p in c.assign(5, [1, 2]).items()} == {1: [0, 2, 4], 2: [1, 3]}
    assert c.released([0, 1, 2, 3], [1, 2]) == [0, 3]
    assert next_stage_span(work_gpu_s=80.0, tp=4, released=2, time_left=30.0) == 10.0
    assert next_stage_span(80.0, 4, 2, 5.0) == 5.0 and next_stage_span(80.0, 4, 0, 5.0) == 0.0


def test_knobs_are_checked_where_both_executors_build_them():
    with pytest.raises(TltsimError, match="ratio = 0.5"):
        build(PartialKnobs, "partial", {"ratio": 0.5})
    with pytest.raises(TltsimError, match="release"):
        build(MigrateKnobs, "migrate", {"release": "nope"})
    assert build(TailBatchingKnobs, "tail-batching", {"eta": 2}).eta == 2.0


def test_async_gate_lets_rollout_run_max_staleness_versions_ahead():
    c = AsyncControl(2, [3, 3, 5])
    assert [c.may_start(n, 0) for n in (8, 9)] == [True, False]  # (0 + 2 + 1) x 3 groups by version 0
    assert c.may_start(11, 1) and not c.may_start(12, 1)
    assert c.may_start(24, 2) and not c.may_start(25, 2)
    assert c.may_start(49, 7) and not c.may_start(50, 7)  # beyond the run: the last batch
    assert not AsyncControl(0, [2]).may_start(2, 0)


def test_async_trainer_takes_the_oldest_fresh_groups_and_drops_the_stale():
    c = AsyncControl(1, [2, 2, 2, 2])
    assert c.select(0, {5: 0}) == (None, [])  # one of the two it needs: it waits
    assert c.select(0, {7: 0, 5: 0, 6: 0}) == ([5, 6], [])  # oldest version first, then the order they started
    assert c.select(2, {3: 0, 4: 1, 9: 2, 8: 1}) == ([4, 8], [3])  # version 0 is 2 behind step 2: dropped
    assert c.select(3, {3: 1, 4: 2}) == (None, [3])
    with pytest.raises(ValueError):
        AsyncControl(-1, [2])
