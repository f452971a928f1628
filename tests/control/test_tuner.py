import math

import numpy as np
import pytest

from tltsim.core.errors import TltsimError
from tltsim.control.strategy import DEFAULT_ARMS, Strategy
from tltsim.control.tuner import (
    BEGTuner, EpsilonGreedyTuner, FixedTuner, OracleTuner, RewardWindow, UCB1Tuner, make_tuner)

S = Strategy.parse


def names(arms):
    return [str(a) for a in arms]


def test_default_arm_buckets():
    beg = BEGTuner(rng=0)
    got = {bs: names(beg.candidates(bs)) for bs in (1, 2, 4, 5, 20, 21, 256)}
    assert got == {1: ["8_4_48"], 2: ["8_4_32"], 4: ["8_4_32"], 5: ["8_4_16"],
                   20: ["8_4_16"], 21: ["8_4_8"], 256: ["8_4_8"]}


def test_custom_arm_buckets_more_groups_than_buckets():
    arms = ["4_2_8", "8_4_64", "8_4_48", "12_8_64", "8_4_32", "6_2_16", "8_4_24"]
    beg = BEGTuner(arms, rng=0, max_verify_tokens=None)
    # verify groups, largest first: 64 (two arms), 48, 32, 24, 16, 8 -> m=6, B=4:
    # group j goes to bucket j*4//6 = 0,0,1,2,2,3
    assert [names(b) for b in beg.buckets] == [
        ["8_4_64", "12_8_64", "8_4_48"], ["8_4_32"], ["8_4_24", "6_2_16"], ["4_2_8"]]


def test_custom_arm_buckets_fewer_groups_than_buckets():
    beg = BEGTuner(["8_4_16", "8_4_48", "4_4_48"], rng=0)
    assert [names(b) for b in beg.buckets] == [
        ["8_4_48", "4_4_48"], ["8_4_48", "4_4_48"], ["8_4_16"], ["8_4_16"]]


def test_guard_excludes_and_falls_back_to_smallest_verify():
    beg = BEGTuner(["8_4_128", "8_4_64", "8_4_32"], rng=0, thresholds=(1, 8, 40))
    assert [names(b) for b in beg.buckets] == [["8_4_128"], ["8_4_64"], ["8_4_32"]]
    assert names(beg.candidates(4)) == ["8_4_128"]     # 128 x 4 = 512 <= 2048
    assert names(beg.candidates(32)) == ["8_4_64"]     # 64 x 32 = 2048: allowed
    assert names(beg.candidates(33)) == ["8_4_32"]     # 64 x 33 = 2112: bucket empty -> smallest verify
    assert names(beg.candidates(500)) == ["8_4_32"]    # fallback even though 32 x 500 > 2048
    one_bucket = BEGTuner(["8_4_128", "8_4_64"], rng=0, thresholds=(1,))
    assert names(one_bucket.candidates(16)) == ["8_4_128", "8_4_64"]
    assert names(one_bucket.candidates(17)) == ["8_4_64"]   # 128 x 17 = 2176 > 2048
    assert names(BEGTuner(["8_4_128", "8_4_64"], rng=0, thresholds=(1,),
                          max_verify_tokens=None).candidates(17)) == ["8_4_128", "8_4_64"]


def test_untried_arms_first_then_greedy_median():
    beg = BEGTuner(["8_4_48", "6_4_48", "4_4_48"], rng=0, eps=0.0)
    assert beg.choose(1) == S("8_4_48")
    beg.update(S("8_4_48"), 1, 100.0)
    assert beg.choose(1) == S("6_4_48")          # untried = +inf
    beg.update(S("6_4_48"), 1, 300.0)
    beg.update(S("4_4_48"), 1, 200.0)
    assert beg.choose(1) == S("6_4_48")
    # rewards are kept per bucket: at bs 2 all arms are untried again
    assert beg.median_reward(S("6_4_48"), 2) == math.inf


def test_median_resists_outliers():
    beg = BEGTuner(["8_4_48", "4_4_48"], rng=0, eps=0.0)
    for r in (100, 100, 100):
        beg.update(S("8_4_48"), 1, r)
    for r in (90, 90, 10_000):
        beg.update(S("4_4_48"), 1, r)            # mean 3393, median 90
    assert beg.choose(1) == S("8_4_48")


def test_exploration_fraction_near_eps():
    arms = ["8_4_48", "6_4_48", "4_4_48", "2_4_48"]
    beg = BEGTuner(arms, rng=np.random.default_rng(11), eps=0.1)
    for i, arm in enumerate(arms):
        beg.update(S(arm), 1, 100.0 + 10 * i)
    picks = [beg.choose(1) for _ in range(20_000)]
    off_best = np.mean([p != S("2_4_48") for p in picks])
    # exploring picks one of 4 uniformly: 3/4 of explorations miss the best arm
    assert off_best == pytest.approx(0.1 * 3 / 4, abs=0.01)


def test_same_seed_same_choices_and_different_seed_differs():
    def run(seed):
        beg = BEGTuner(["8_4_48", "6_4_48", "4_4_48"], rng=seed, eps=0.3)
        out = []
        for t in range(200):
            arm = beg.choose(1)
            beg.update(arm, 1, float(arm.depth * 10 + t % 7))
            out.append(str(arm))
        return out
    assert run(5) == run(5)
    assert run(5) != run(6)


def test_rng_instance_is_used_not_copied():
    rng = np.random.default_rng(1)
    beg = BEGTuner(["8_4_48", "6_4_48"], rng=rng, eps=1.0)
    assert beg.rng is rng


@pytest.mark.parametrize("size,counts", [(300, [1, 1, 3, 17, 120]), (8, [1, 1, 1, 2]), (1, [1, 2])])
def test_reward_window_matches_np_median(size, counts):
    rng = np.random.default_rng(0)
    w = RewardWindow(size)
    samples = []
    for _ in range(400):
        r, n = float(rng.normal(100, 30)), int(rng.choice(counts))
        w.add(r, n)
        samples += [r] * n
        assert w.count == min(len(samples), size)
        assert w.median() == pytest.approx(np.median(samples[-size:]))
    w = RewardWindow(300)
    w.add(5.0, 1000)
    assert w.count == 300 and w.median() == 5.0
    assert RewardWindow(3).median() == math.inf


def test_window_forgets_old_rewards():
    beg = BEGTuner(["8_4_48", "4_4_48"], rng=0, eps=0.0, window=300)
    beg.update(S("8_4_48"), 1, 500.0, n=300)
    beg.update(S("4_4_48"), 1, 400.0, n=300)
    assert beg.choose(1) == S("8_4_48")
    beg.update(S("8_4_48"), 1, 100.0, n=151)     # 151 of 300 samples now 100: median drops
    assert beg.choose(1) == S("4_4_48")


def test_egreedy_ignores_batch_size():
    eg = EpsilonGreedyTuner(DEFAULT_ARMS, rng=0, eps=0.0)
    assert names(eg.candidates(1)) == names(DEFAULT_ARMS) == names(eg.candidates(4096))
    for arm, r in zip(DEFAULT_ARMS, (1.0, 2.0, 5.0, 3.0)):
        eg.update(arm, 64, r)
    assert eg.choose(1) == S("8_4_16") == eg.choose(300)


def test_ucb_tries_every_arm_first_then_balances():
    ucb = UCB1Tuner(DEFAULT_ARMS, rng=0)
    first = []
    for _ in DEFAULT_ARMS:
        arm = ucb.choose(8)
        first.append(arm)
        ucb.update(arm, 8, 100.0)
    assert first == list(DEFAULT_ARMS)
    # one arm clearly best: it gets most pulls, the others still a few
    rewards = {S("8_4_48"): 50.0, S("8_4_32"): 60.0, S("8_4_16"): 100.0, S("8_4_8"): 55.0}
    pulls = {a: 0 for a in DEFAULT_ARMS}
    for _ in range(2000):
        arm = ucb.choose(8)
        pulls[arm] += 1
        ucb.update(arm, 8, rewards[arm])
    assert pulls[S("8_4_16")] > 1500
    assert all(pulls[a] >= 1 for a in DEFAULT_ARMS)


def test_fixed_and_oracle():
    fixed = FixedTuner("12_8_64")
    assert fixed.choose(1) == fixed.choose(500) == S("12_8_64")
    with pytest.raises(ValueError, match="not one of the arms"):
        fixed.update(S("8_4_48"), 1, 1.0)
    oracle = OracleTuner(DEFAULT_ARMS, expected_reward=lambda s, bs: -abs(s.verify * bs - 64))
    assert [oracle.choose(bs) for bs in (1, 2, 4, 8)] == [S("8_4_48"), S("8_4_32"),
                                                        S("8_4_16"), S("8_4_8")]


def test_update_rejects_bad_arguments():
    beg = BEGTuner(rng=0)
    for args in [(S("8_4_48"), 0, 1.0), (S("8_4_48"), 1, float("nan")), (S("8_4_48"), 1, 1.0, 0)]:
        with pytest.raises(ValueError):
            beg.update(*args)


def test_registry():
    assert isinstance(make_tuner("beg", seed=1), BEGTuner)
    assert isinstance(make_tuner("egreedy", seed=1, eps=0.2), EpsilonGreedyTuner)
    assert isinstance(make_tuner("ucb", DEFAULT_ARMS, 3, c=0.5), UCB1Tuner)
    assert make_tuner("fixed", "8_4_16,8_4_8").choose(1) == S("8_4_16")
    assert make_tuner("fixed", strategy="4_2_8").choose(1) == S("4_2_8")
    assert make_tuner("oracle", expected_reward=lambda s, b: s.verify).choose(1) == S("8_4_48")
    a, b = make_tuner("beg", seed=9, eps=0.5), make_tuner("beg", seed=9, eps=0.5)
    assert [a.choose(8) for _ in range(30)] == [b.choose(8) for _ in range(30)]


@pytest.mark.parametrize("call, match", [
    (lambda: make_tuner("thompson"), "beg, egreedy, ucb, fixed, oracle"),
    (lambda: make_tuner("beg", epsilon=0.1), "tuner 'beg': unknown knob.*epsilon; its knobs are eps, window"),
    (lambda: make_tuner("oracle"), "needs expected_reward"),
    (lambda: make_tuner("beg", eps=1.5), "eps=1.5"),
    (lambda: make_tuner("beg", thresholds=[5, 2]), "increasing"),
    (lambda: make_tuner("beg", window=0), "window=0"),
    (lambda: make_tuner("beg", arms="8_4"), "expected depth_topk_verify"),
])
def test_registry_errors(call, match):
    with pytest.raises(TltsimError, match=match):
        call()
