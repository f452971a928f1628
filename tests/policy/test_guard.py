"""SpeculationGuard: plain decoding's measured rate against the tuner's per-arm medians."""
import math

from tltsim.policy import FixedTuner, SpeculationGuard, make_tuner


def beg(arms="4_1_4,2_2_4"):  # one verify size: one bucket at every batch
    return make_tuner("beg", arms, seed=0)


def test_untried_arms_pay_until_measured_slower_than_plain():
    tuner = beg()
    guard = SpeculationGuard(tuner)
    guard.observe_plain(2, 0.01)  # 200 tokens/s at batch 2
    assert guard.pays(2)  # both arms untried (+inf)
    tuner.update(tuner.arms[0], 2, 150.0)
    assert guard.pays(2)  # the other arm is still untried
    tuner.update(tuner.arms[1], 2, 190.0)
    assert not guard.pays(2)  # both measured below 200
    tuner.update(tuner.arms[1], 2, 400.0)
    tuner.update(tuner.arms[1], 2, 400.0)
    assert guard.pays(2)  # its median moved above plain decoding's rate


def test_plain_rate_uses_the_nearest_batch_at_or_above():
    guard = SpeculationGuard(beg())
    assert guard.plain_rate(3) == 0.0  # nothing observed: any arm beats it
    guard.observe_plain(4, 0.02)
    guard.observe_plain(8, 0.04)
    assert guard.plain_rate(3) == 3 / 0.02
    assert guard.plain_rate(5) == 5 / 0.04
    assert guard.plain_rate(16) == 16 / 0.04  # above every observed batch: the largest one
    # the median of the window: one slow outlier does not move it
    for s in (0.02, 0.02, 1.0):
        guard.observe_plain(4, s)
    assert guard.plain_rate(4) == 4 / 0.02
    guard.observe_plain(4, 0.03, n=8)  # n equal samples fill the window
    assert math.isclose(guard.plain_rate(4), 4 / 0.03)


def test_tuners_without_medians_are_never_guarded():
    guard = SpeculationGuard(FixedTuner("4_1_4"))
    guard.observe_plain(1, 1e-9)
    assert guard.pays(1)
