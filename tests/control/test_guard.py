"""SpeculationGuard: speculation's measured rate at a batch against plain decoding's. Most tests judge every
iteration (trial=1) to test one rule at a time; the trial itself has tests of its own at the end."""
import numpy as np
import pytest

from tltsim.control import SpeculationGuard


def test_each_batch_is_tried_then_kept_only_where_it_beats_plain():
    guard = SpeculationGuard(trial=1)
    guard.observe_plain(2, 0.01)  # 200 tokens/s at batch 2
    guard.observe_plain(1, 0.01)  # 100 tokens/s at batch 1
    assert guard.pays(2) and guard.pays(1)  # untried
    guard.observe_spec(2, 150.0)
    assert not guard.pays(2) and guard.pays(1)  # slower at 2; 1 still untried
    guard.observe_spec(1, 150.0)
    assert guard.pays(1)  # 150 > 100 at batch 1
    for _ in range(2):
        guard.observe_spec(2, 400.0)
    assert guard.pays(2)  # the mean of the window moved above plain decoding's rate


def test_plain_rate_uses_the_nearest_batch_at_or_above():
    guard = SpeculationGuard()
    assert guard.plain_rate(3) == 0.0  # nothing observed: any speculation beats it
    guard.observe_plain(4, 0.02)
    guard.observe_plain(8, 0.04)
    assert guard.plain_rate(3) == 3 / 0.02
    assert guard.plain_rate(5) == 5 / 0.04
    assert guard.plain_rate(16) == 16 / 0.04  # above every observed batch: the largest one
    for s in (0.02, 0.02, 1.0):  # the median of the window: one slow outlier does not move it
        guard.observe_plain(4, s)
    assert guard.plain_rate(4) == 4 / 0.02
    guard.observe_plain(4, 0.03, n=8)  # n equal samples fill the window
    assert guard.plain_rate(4) == 4 / 0.03


def test_a_stalled_plain_iteration_is_bounded_by_larger_batches():
    guard = SpeculationGuard()
    guard.observe_plain(5, 0.1)  # stalled: the only observation at 5
    guard.observe_plain(8, 0.003)
    assert guard.plain_rate(4) == 4 / 0.003  # a batch of 4 decodes no slower than one of 8


def test_a_refusal_expires_after_retry_after_rollouts():
    guard = SpeculationGuard(retry_after=2, trial=1)
    guard.begin_rollout()
    guard.observe_plain(1, 0.01)  # 100 tokens/s
    guard.observe_spec(1, 50.0)
    assert not guard.pays(1)
    guard.begin_rollout()
    assert not guard.pays(1)  # still standing one rollout later
    guard.begin_rollout()
    assert guard.pays(1) and not guard.tried(1)  # expired: try again (the drafter may have changed)
    guard.observe_spec(1, 300.0)  # a fresh window: the old 50 no longer counts
    assert guard.pays(1)


def test_a_refused_batch_is_tried_again_within_the_rollout_after_a_doubling_wait():
    guard = SpeculationGuard(retry_plain=4, trial=1)
    guard.begin_rollout()
    guard.observe_plain(1, 0.01)  # 100 tokens/s
    guard.observe_spec(1, 50.0)  # a stretch of misses: refused
    assert not guard.pays(1) and guard.plain_left(1) == 4
    for left in (3, 2, 1):
        guard.observe_plain(1, 0.01)
        assert not guard.pays(1) and guard.plain_left(1) == left
    guard.observe_plain(1, 0.01)  # the fourth plain iteration: tried again, with a fresh window
    assert guard.pays(1) and not guard.tried(1) and guard.plain_left(1) == float("inf")
    guard.observe_spec(1, 60.0)  # refused again: the wait doubles
    assert guard.plain_left(1) == 8
    guard.observe_plain(1, 0.01, n=8)
    assert guard.pays(1) and not guard.tried(1)
    guard.observe_spec(1, 300.0)  # the drafter accepts again: speculation is back on, and a refusal waits 4 again
    assert guard.pays(1)
    guard.observe_spec(1, 20.0, n=3)  # mean of 300, 20, 20, 20: 90, refused
    assert not guard.pays(1) and guard.plain_left(1) == 4


def test_the_retry_wait_is_kept_in_the_state():
    guard = SpeculationGuard(retry_plain=4, trial=1)
    guard.observe_plain(1, 0.01)
    guard.observe_spec(1, 50.0)
    guard.observe_plain(1, 0.01, n=4)
    guard.observe_spec(1, 50.0)
    guard.observe_plain(1, 0.01, n=3)
    back = SpeculationGuard(retry_plain=4, trial=1)
    back.load_state_dict(guard.state_dict())
    assert back.plain_left(1) == guard.plain_left(1) == 5


def test_bursty_gains_are_judged_by_their_mean():
    """A history drafter's row gains one token or the whole draft: a window of mostly one-token iterations
    has a median below plain decoding's rate, while speculation over the window delivers more than plain."""
    guard = SpeculationGuard(trial=1)
    guard.observe_plain(1, 0.1)  # 10 tokens/s
    for tokens in (1, 1, 5, 1, 1, 5, 1, 1):  # each iteration 0.11 s: 9.1 or 45.5 tokens/s
        guard.observe_spec(1, tokens / 0.11)
    assert guard.spec_rate(1) == pytest.approx(sum((1, 1, 5, 1, 1, 5, 1, 1)) / 8 / 0.11)  # 18.2 tokens/s
    assert guard.pays(1)
    for _ in range(8):  # the bursts stop: speculation at 9.1 tokens/s is refused
        guard.observe_spec(1, 1 / 0.11)
    assert not guard.pays(1)


def test_a_fresh_measurement_is_judged_after_the_trial_or_once_it_cannot_pay():
    guard = SpeculationGuard(retry_plain=4)  # trial 4
    guard.observe_plain(1, 0.01)  # 100 tokens/s
    assert guard.to_try(1) == 4
    guard.observe_spec(1, 50.0)  # the best seen here: 50 over the rest of the trial cannot pay
    assert not guard.pays(1) and guard.to_try(1) == 0 and guard.plain_left(1) == 4  # refused after one
    guard.observe_plain(1, 0.01, n=4)
    assert guard.pays(1) and guard.to_try(1) == 4  # tried again: a whole trial
    guard.observe_spec(1, 300.0)  # a burst: the best seen here
    for left in (2, 1):
        guard.observe_spec(1, 20.0)
        assert guard.pays(1) and guard.to_try(1) == left  # mean below plain's, but a burst may still come
    guard.observe_spec(1, 20.0)  # trial over: mean (300 + 3 x 20) / 4 = 90, refused
    assert not guard.pays(1) and guard.to_try(1) == 0 and guard.plain_left(1) == 8  # a refused retry: doubled
    guard.observe_plain(1, 0.01, n=8)
    guard.observe_spec(1, 20.0, n=2)
    assert guard.to_try(1) == 2  # 2 x 20 + 2 x 300 = 640 > 400: the trial goes on
    guard.observe_spec(1, 20.0)  # 3 x 20 + 300 = 360 <= 400: cannot pay, judged before the trial's end
    assert not guard.pays(1) and guard.to_try(1) == 0 and guard.plain_left(1) == 16
    guard.observe_plain(1, 0.01, n=16)
    guard.observe_spec(1, 300.0, n=4)  # judged: pays, so the wait starts over
    assert guard.pays(1) and guard.to_try(1) == 0
    guard.observe_spec(1, 20.0, n=7)  # window 8: (300 + 7 x 20) / 8 = 55, refused
    assert not guard.pays(1) and guard.plain_left(1) == 4
    back = SpeculationGuard(retry_plain=4)
    back.load_state_dict(guard.state_dict())  # the best rate is kept
    back.observe_plain(1, 0.01, n=4)
    back.observe_spec(1, 20.0)
    assert back.to_try(1) == 3
    first = SpeculationGuard()
    first.observe_plain(1, 0.01)
    first.observe_spec(1, 300.0)
    assert first.to_try(1) == 3
    back = SpeculationGuard()
    back.load_state_dict({k: v for k, v in first.state_dict().items() if k != "best"})  # from before the trial
    assert back.pays(1) and back.to_try(1) == 0  # no best rate to hope for: judged on what it has
    assert SpeculationGuard(window=2, trial=4).to_try(1) == 2  # a trial is at most a window


def speculated_share(guard: SpeculationGuard, gains: list[int], spec_s: float, plain_s: float = 0.1,
                     iterations: int = 2000, rollout: int = 250) -> float:
    """Share of `iterations` at batch 1 that `guard` speculates, each speculative one gaining a token count
    drawn from `gains` (seeded) in `spec_s` seconds, each plain one a token in `plain_s`; a rollout every
    `rollout` iterations, plain decoding measured first (as the switch's plain iterations do)."""
    rng = np.random.default_rng(0)
    guard.observe_plain(1, plain_s)
    spec = 0
    for i in range(iterations):
        if i % rollout == 0:
            guard.begin_rollout()
        if guard.pays(1):
            guard.observe_spec(1, float(rng.choice(gains)) / spec_s)
            spec += 1
        else:
            guard.observe_plain(1, plain_s)
    return spec / iterations


def test_the_trial_keeps_bursty_speculation_that_pays_and_still_refuses_what_loses():
    """A history drafter's bursts: a row gains 1 token (70%) or 5 (30%) per 0.13 s iteration, 16.9 tokens/s
    on average against plain decoding's 10, while every one-token iteration (7.7) is below plain. Judged on
    one iteration, a retry is refused 70% of the time and the doubling waits keep speculation off almost
    always; a trial of 4 keeps it on most of the time. Where it loses (1 or 2 tokens, 9.2 tokens/s on
    average), a trial that cannot pay ends early and speculation stays off about as much as judged on one."""
    pays, loses = [1] * 7 + [5] * 3, [1] * 8 + [2] * 2
    assert speculated_share(SpeculationGuard(trial=1), pays, 0.13) < 0.1
    assert speculated_share(SpeculationGuard(), pays, 0.13) > 0.6
    judged_on_one = speculated_share(SpeculationGuard(trial=1), loses, 0.13)
    assert speculated_share(SpeculationGuard(), loses, 0.13) < 1.2 * judged_on_one


def test_the_fast_path_runs_a_trial_that_paid_as_one_chunk():
    """EngineControl.trial_chunk: the first iteration of a trial alone; once it paid, the trial's rest at once
    (a steady reward above plain decoding's never ends a trial early); where it lost, nothing more once the
    trial cannot pay, and one at a time while an earlier best rate there still might."""
    from tltsim.control import EngineControl, FixedTuner, SDSwitch, Strategy

    def control():
        c = EngineControl(SDSwitch("always", 32, 0), FixedTuner("4_1_4"), SpeculationGuard())
        c.observe_plain(4, 0.1)  # 40 tokens/s at batch 4
        return c

    s = Strategy.parse("4_1_4")
    pays, loses = control(), control()
    assert pays.trial_chunk(4) == 1
    pays.observe_spec(s, 4, tokens=8, seconds=0.1)  # 80 tokens/s
    assert pays.trial_chunk(4) == 3
    pays.observe_spec(s, 4, tokens=24, seconds=0.1, iters=3)
    assert pays.trial_chunk(4) == 0 and pays.decide(4) is not None  # judged: it pays
    loses.observe_spec(s, 4, tokens=2, seconds=0.1)  # 20 tokens/s, the best seen there
    assert loses.trial_chunk(4) == 0 and loses.decide(4) is None  # cannot pay: refused after one
    guard = SpeculationGuard()
    hoped = EngineControl(SDSwitch("always", 32, 0), FixedTuner("4_1_4"), guard)
    hoped.observe_plain(4, 0.1)
    guard.load_state_dict({**guard.state_dict(), "best": [[4, 200.0]]})  # it paid well there before
    hoped.observe_spec(s, 4, tokens=2, seconds=0.1)
    assert hoped.trial_chunk(4) == 1  # below plain now, but a burst like the best may come: one at a time
    assert EngineControl(SDSwitch("always", 32, 0), FixedTuner("4_1_4"), None).trial_chunk(4) == 0
