import numpy as np
import pytest

from tltsim.core.errors import TltsimError
from tltsim.drafter.acceptance import (
    Q_ADAPTIVE_RL, Q_STATIC_RL, Q_TRAINED, RL_REFERENCE_STRATEGY, AcceptanceModel)
from tltsim.drafter.quality import DrafterConfig, DrafterQuality, NgramDrafter


def test_static_drafter_drifts_down_to_the_floor():
    d = DrafterQuality(trainable=False)
    qs = [d.quality] + [d.policy_update() for _ in range(40)]
    assert qs[0] == Q_TRAINED
    assert np.all(np.diff(qs) <= 0)
    assert qs[1] == pytest.approx(Q_TRAINED - 0.01)
    assert qs[-1] == Q_STATIC_RL                     # settles at the floor
    assert AcceptanceModel().mean(RL_REFERENCE_STRATEGY, qs[-1]) == pytest.approx(4.59, rel=0.01)
    with pytest.raises(ValueError, match="static"):
        d.train(100)


def test_floor_never_raises_a_drafter_already_below_it():
    d = DrafterQuality(DrafterConfig(q_start=0.5, q_floor=0.7))
    assert d.policy_update() == 0.5


def test_training_recovers_monotonically_toward_q_max():
    d = DrafterQuality(DrafterConfig(drift=0.05))
    for _ in range(3):
        d.policy_update()
    qs = [d.quality] + [d.train(500) for _ in range(30)]
    assert np.all(np.diff(qs) > 0)
    assert qs[-1] <= Q_TRAINED and qs[-1] == pytest.approx(Q_TRAINED, abs=1e-4)
    assert d.samples_trained == 15_000


def test_learning_curve_is_exponential_in_samples():
    c = DrafterConfig(q_start=0.5, q_max=0.9, q_floor=0.0, tau_samples=1000)
    d = DrafterQuality(c)
    assert d.train(1000) == pytest.approx(0.9 - 0.4 * np.exp(-1))


def test_training_in_chunks_equals_training_at_once():
    c = DrafterConfig(q_start=0.6, q_floor=0.0)
    whole, pieces = DrafterQuality(c), DrafterQuality(c)
    whole.train(3000)
    for s in (100, 900, 0, 2000):
        pieces.train(s)
    assert pieces.quality == pytest.approx(whole.quality, abs=1e-12)


def test_more_samples_per_step_hold_a_higher_quality():
    """Adaptive beats static, and more harvested samples beat fewer, step after step."""
    def run(samples_per_step, steps=60):
        d = DrafterQuality(trainable=samples_per_step > 0)
        for _ in range(steps):
            d.policy_update()
            if d.trainable:
                d.train(samples_per_step)
        return d.quality
    qualities = [run(s) for s in (0, 200, 1000, 5000)]
    assert np.all(np.diff(qualities) > 0)


def test_steady_state_and_tau_calibration():
    c = DrafterConfig()
    tau = c.tau_for(samples_per_step=1200)
    calibrated = DrafterConfig(tau_samples=tau)
    assert calibrated.steady_state(1200) == pytest.approx(Q_ADAPTIVE_RL)
    d = DrafterQuality(calibrated)
    for _ in range(200):
        d.policy_update()
        d.train(1200)
    assert d.quality == pytest.approx(Q_ADAPTIVE_RL, abs=1e-6)
    assert AcceptanceModel().mean(RL_REFERENCE_STRATEGY, d.quality) == pytest.approx(6.53, rel=0.01)
    assert c.steady_state(0) == c.steady_state(1) == Q_STATIC_RL   # cannot keep up: the floor


def test_negative_samples_rejected():
    with pytest.raises(ValueError, match="samples=-1"):
        DrafterQuality().train(-1)


def test_ngram_drafter_is_low_and_drift_free():
    g = NgramDrafter()
    assert g.model_free and not g.trainable
    assert [g.policy_update() for _ in range(5)] == [g.quality] * 5
    accepted = AcceptanceModel().mean(RL_REFERENCE_STRATEGY, g.quality)
    assert accepted == pytest.approx(2.0, rel=0.01)
    assert accepted < AcceptanceModel().mean(RL_REFERENCE_STRATEGY, Q_STATIC_RL)
    with pytest.raises(ValueError, match="nothing to train"):
        g.train(1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(q_start=1.2), "q_start=1.2"),
    (dict(q_floor=0.95), "q_floor=0.95 > q_max"),
    (dict(drift=-0.1), "drift=-0.1"),
    (dict(tau_samples=0), "tau_samples=0"),
    (dict(load_s=-1), "load_s=-1"),
])
def test_bad_config(kwargs, match):
    with pytest.raises(TltsimError, match=match):
        DrafterConfig(**kwargs)
