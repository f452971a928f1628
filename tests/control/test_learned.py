"""The learned switch (tlt-auto's): buckets, the threshold it sets each rollout, its exploration, its guard, its
state as data."""
import json

import pytest

from tltsim.control.learned import LearnedSwitch, bucket_label, bucket_of, bucket_range, learned_summary, prior_from


def rollout(switch, batches, spec_rate, plain_rate):
    """Drive `switch` (as EngineControl does) through one rollout of one iteration at each of `batches`: plain
    iterations at plain_rate(b) tokens/s per row, speculative ones at spec_rate(b). Returns the batches that
    speculated."""
    switch.begin_rollout()
    switch.reset()
    spoke = []
    for b in batches:
        if switch.advance(b, 1) or not switch.pays(b):
            switch.observe_plain(b, 1.0 / plain_rate(b))
        else:
            switch.observe_spec(b, spec_rate(b) * b)
            spoke.append(b)
    return spoke


TAIL = [64] * 20 + [40] * 20 + [20] * 20 + [10] * 20 + [5] * 20 + [2] * 20 + [1] * 20  # a shrinking batch


def test_buckets_are_powers_of_two():
    assert [bucket_of(b) for b in (1, 2, 3, 4, 7, 8, 63, 64)] == [0, 1, 1, 2, 2, 3, 5, 6]
    assert bucket_range(3) == (8, 15) and bucket_label(0) == "1" and bucket_label(2) == "4-7"


def test_without_a_prior_it_starts_from_the_knob_and_climbs_one_bucket_a_rollout_where_speculation_pays():
    switch = LearnedSwitch(threshold=8, patience=0)
    thresholds = []
    for _ in range(6):
        rollout(switch, TAIL, spec_rate=lambda b: 3.0, plain_rate=lambda b: 1.0)
        thresholds.append(switch.threshold)  # the one this rollout ran with
    # rollout 1 at the knob; then the top of the highest paying bucket, plus one bucket explored above it; once
    # the threshold covers the largest batch seen (64), it is on from the start
    assert thresholds == [8, 15, 31, 63, 127, 127]
    assert switch.speculating_buckets() == [0, 1, 2, 3, 4, 5, 6]
    switch.begin_rollout()
    switch.reset()
    assert switch.on


def test_where_speculation_never_pays_it_stops_and_only_re_explores_when_a_measure_expires():
    switch = LearnedSwitch(threshold=32, patience=0, retry_after=4)
    spoke = [rollout(switch, TAIL, spec_rate=lambda b: 0.5, plain_rate=lambda b: 1.0) for _ in range(6)]
    assert set(spoke[0]) == {20, 10, 5, 2, 1}  # each bucket at or below 32 tried once (its first iteration)
    assert all(len(s) == len(set(s)) for s in spoke)  # never more than one iteration a batch
    assert spoke[1] == [] and switch.learned_threshold() == 0 and switch.speculating_buckets() == []
    assert sum(map(len, spoke[1:])) <= 5  # after the first rollout: an expired bucket tried again, once


def test_a_prior_sets_the_first_threshold_and_measures_correct_it():
    # the model says speculation pays up to bucket 3 (8-15); in truth it pays up to batch 40 (bucket 5)
    prior = prior_from(plain_rate=lambda b: b * 1.0, spec_rate=lambda b: b * (2.0 if b < 16 else 0.5), max_batch=64)
    switch = LearnedSwitch(threshold=32, patience=0, prior=prior)
    assert switch.threshold == 31  # bucket 3's top, and bucket 4 (16-31) explored
    truth = lambda b: 2.0 if b <= 40 else 0.5  # noqa: E731
    for _ in range(3):
        rollout(switch, TAIL, spec_rate=truth, plain_rate=lambda b: 1.0)
    assert switch.learned_threshold() == 63 and switch.speculating_buckets() == [0, 1, 2, 3, 4, 5]


def test_its_state_is_plain_data_and_restores_the_same_decisions():
    a = LearnedSwitch(threshold=8, patience=3)
    for _ in range(2):
        rollout(a, TAIL, spec_rate=lambda b: 4.0 / b, plain_rate=lambda b: 1.0)
    b = LearnedSwitch(threshold=8, patience=3)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    runs = [rollout(s, TAIL, spec_rate=lambda b: 4.0 / b, plain_rate=lambda b: 1.0) for s in (a, b)]
    assert runs[0] == runs[1] and a.state_dict() == b.state_dict()


def test_the_knobs_are_checked():
    from tltsim.control.decisions import DecisionKnobs
    from tltsim.core.errors import TltsimError

    with pytest.raises(TltsimError, match="threshold"):
        LearnedSwitch(threshold=0)
    with pytest.raises(TltsimError, match="guard"):
        DecisionKnobs(sd="learned", guard=False).checked("tlt-auto")


def test_a_real_run_offers_tlt_auto_with_no_prior():
    """`tltsim real run --policy tlt-auto`: the learned switch, starting from the threshold knob (a real run has no
    cost model to take a prior from)."""
    from real.run.config import POLICIES, RunConfig

    knobs = RunConfig(policy="tlt-auto", max_new_tokens=8, knobs={"threshold": 4}).checked().tlt_knobs()
    control = knobs.control(0, seed=0)
    assert "tlt-auto" in POLICIES and knobs.sd == "learned"
    assert isinstance(control.switch, LearnedSwitch) and control.guard is control.switch
    assert control.switch.prior is None and control.switch.threshold == 4


def test_the_summary_is_what_most_engines_learned():
    """learned_summary (a run's sd_threshold and sd_buckets, real and simulated): the threshold most switches hold
    (the smallest of a tie), the buckets where most speculate."""
    fast, slow = (lambda b: 3.0 if b < 8 else 0.5), (lambda b: 3.0 if b < 4 else 0.5)
    switches = [LearnedSwitch(threshold=2, patience=0) for _ in range(3)]
    for switch, spec in zip(switches, (fast, fast, slow)):
        for _ in range(8):
            rollout(switch, TAIL, spec_rate=spec, plain_rate=lambda b: 1.0)
    assert [s.learned_threshold() for s in switches] == [7, 7, 3]
    assert learned_summary(switches) == {"sd_threshold": 7, "sd_buckets": ["1", "2-3", "4-7"]}
    assert learned_summary(switches[1:])["sd_threshold"] == 3  # a tie: the smaller
    assert learned_summary(switches[1:])["sd_buckets"] == ["1", "2-3"]  # 4-7: one of two, not most
