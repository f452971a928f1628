import numpy as np
import pytest

from tltsim.core.errors import TltsimError
from tltsim.drafter.acceptance import (
    PUBLISHED_ACCEPTED, PUBLISHED_TOPK_RANGE, Q_ADAPTIVE_RL, Q_STATIC_RL, Q_TRAINED,
    RL_REFERENCE_STRATEGY, AcceptanceModel, fit)
from tltsim.control.strategy import Strategy

MODEL = AcceptanceModel()


def table(rows):
    return "\n".join(f"{name:>10} published {pub:5.2f} model {got:5.2f} err {got / pub - 1:+6.1%}"
                     for name, pub, got in rows)


def test_reproduces_design_table_within_10_percent():
    rows = [(str(s), pub, MODEL.mean(s, Q_TRAINED)) for s, pub in PUBLISHED_ACCEPTED.items()]
    worst = max(abs(got / pub - 1) for _, pub, got in rows)
    assert worst <= 0.10, "\n" + table(rows)


def test_topk_4_to_16_barely_matters():
    lo, hi = PUBLISHED_TOPK_RANGE
    got = [MODEL.mean(Strategy(12, k, 64), Q_TRAINED) for k in (4, 8, 16)]
    rows = [(f"12_{k}_64", lo, g) for k, g in zip((4, 8, 16), got)]
    assert max(got) / min(got) <= hi / lo * 1.05, "\n" + table(rows)
    assert all(lo * 0.9 <= g <= hi * 1.1 for g in got), "\n" + table(rows)


def test_rl_qualities_reproduce_static_and_adaptive():
    static = MODEL.mean(RL_REFERENCE_STRATEGY, Q_STATIC_RL)
    adaptive = MODEL.mean(RL_REFERENCE_STRATEGY, Q_ADAPTIVE_RL)
    assert static == pytest.approx(4.59, rel=0.01)
    assert adaptive == pytest.approx(6.53, rel=0.01)
    assert Q_STATIC_RL < Q_ADAPTIVE_RL < Q_TRAINED


def test_stored_constants_are_the_fit():
    """Refitting from the stored constants does not move them: they are the fit of the table."""
    q, model = fit(PUBLISHED_ACCEPTED)
    assert q == pytest.approx(Q_TRAINED, abs=1e-4)
    assert model.delta == pytest.approx(MODEL.delta, abs=1e-3)
    assert model.beta == pytest.approx(MODEL.beta, abs=1e-3)


@pytest.mark.parametrize("name", ["8_4_48", "8_4_8", "12_8_64", "4_1_4", "3_2_20"])
def test_bounds_and_extremes(name):
    s = Strategy.parse(name)
    assert MODEL.mean(s, 0.0) == 1.0                    # a useless drafter: bonus token only
    assert MODEL.mean(s, 1.0) == pytest.approx(min(s.depth, s.verify) + 1)
    for q in (0.3, 0.7, Q_TRAINED):
        assert 1.0 < MODEL.mean(s, q) < s.depth + 1
        surv = MODEL.survival(s, q)
        assert np.all(np.diff(surv) <= 1e-12) and surv[0] <= 1.0


def test_monotone_in_quality_verify_and_depth():
    qs = np.linspace(0.05, 0.99, 12)
    means = [MODEL.mean(Strategy(8, 4, 32), q) for q in qs]
    assert np.all(np.diff(means) > 0)
    by_verify = [MODEL.mean(Strategy(8, 4, v), Q_TRAINED) for v in (8, 16, 32, 48, 64)]
    assert np.all(np.diff(by_verify) > 0)
    by_depth = [MODEL.mean(Strategy(d, 4, 48), Q_TRAINED) for d in (2, 4, 8, 12)]
    assert np.all(np.diff(by_depth) > 0)


def test_tree_beats_chain_of_same_depth():
    assert MODEL.mean(Strategy(8, 4, 32), Q_TRAINED) > MODEL.mean(Strategy.chain(8), Q_TRAINED)


@pytest.mark.parametrize("name, q", [("8_4_48", Q_ADAPTIVE_RL), ("8_4_8", Q_STATIC_RL),
                                     ("12_8_64", Q_TRAINED), ("4_2_6", 0.4)])
def test_samples_match_mean_and_var(name, q):
    s = Strategy.parse(name)
    x = MODEL.sample(s, q, np.random.default_rng(7), 200_000)
    assert x.dtype.kind == "i" and x.min() >= 1 and x.max() <= s.depth + 1
    se = np.sqrt(MODEL.var(s, q) / x.size)
    assert abs(x.mean() - MODEL.mean(s, q)) < 5 * se
    assert x.var() == pytest.approx(MODEL.var(s, q), rel=0.03)


def test_sampling_is_seeded():
    s = RL_REFERENCE_STRATEGY
    a = MODEL.sample(s, 0.8, np.random.default_rng(3), 50)
    b = MODEL.sample(s, 0.8, np.random.default_rng(3), 50)
    assert np.array_equal(a, b)
    one = MODEL.sample(s, 0.8, np.random.default_rng(3))  # no size: one draw, the first of the seeded sequence
    assert np.ndim(one) == 0 and one == a[0]


def test_quality_out_of_range():
    with pytest.raises(TltsimError, match="quality 1.5"):
        MODEL.mean(RL_REFERENCE_STRATEGY, 1.5)


def test_a_quality_per_row_draws_as_one_quality_does():
    """Rows drafted for at their own qualities take the same draws: equal qualities give the scalar's samples, and
    a row's accepted length follows its own quality."""
    s = Strategy.parse("4_1_4")
    one = MODEL.sample(s, 0.6, np.random.default_rng(5), 1000)
    assert np.array_equal(MODEL.sample(s, np.full(1000, 0.6), np.random.default_rng(5), 1000), one)
    q = np.tile([0.2, 0.9], 20_000)
    x = MODEL.sample(s, q, np.random.default_rng(5), q.size)
    for qi in (0.2, 0.9):
        rows = x[q == qi]
        assert abs(rows.mean() - MODEL.mean(s, qi)) < 5 * np.sqrt(MODEL.var(s, qi) / rows.size)
    with pytest.raises(TltsimError, match="3 qualities for 4 samples"):
        MODEL.sample(s, np.full(3, 0.5), np.random.default_rng(5), 4)
