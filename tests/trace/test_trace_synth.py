"""Synthetic families: determinism, structure, calibration to the published figures."""
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from tltsim.core.errors import TltsimError
from tltsim.trace import load, stats, synth
from tltsim.trace.synth import FAMILIES, MATH_SIGMA, intern_s1_cdf, lognormal_median

TRACES = Path(__file__).resolve().parents[2] / "traces" / "synthetic"
# docs/design.md#response-length-shapes: DAPO text, 96 prompts x 8, per-step ranges.
DAPO_RANGES = {"median": (436, 496), "p90": (956, 1129), "p99": (1900, 3000), "max": (3700, 10100)}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_same_seed_same_trace_other_seed_other_trace(family):
    a = synth(family, 3, 16, 4, 20000, seed=5)
    b = synth(family, 3, 16, 4, 20000, seed=5)
    c = synth(family, 3, 16, 4, 20000, seed=6)
    assert a.df.equals(b.df) and a.meta == b.meta
    assert not a.df["response_len"].equals(c.df["response_len"])


def test_shape_and_metadata():
    t = synth("lognormal", 4, 10, 3, 5000, seed=0, drift=0.1)
    assert len(t.df) == 4 * 10 * 3 and t.steps == [0, 1, 2, 3]
    assert t.df.groupby(["step", "prompt_id"]).size().eq(3).all()
    assert t.df.groupby(["step", "prompt_id"])["prompt_len"].nunique().eq(1).all()  # one prompt, one length
    assert t.meta.source == "synth:lognormal" and t.meta.max_response_len == 5000 and t.meta.group_size == 3
    assert "drift=0.1" in t.meta.provenance and "seed 0" in t.meta.provenance
    assert t.meta.provenance.endswith(
        "Regenerate: tltsim trace synth lognormal --steps 4 --prompts 10 --group 3 --max-len 5000 --seed 0 --drift 0.1 -o FILE")


def dapo_in_range(trace):
    per_step = stats(trace)["per_step"]
    share = {k: np.mean([lo <= e[k] <= hi for e in per_step]) for k, (lo, hi) in DAPO_RANGES.items()}
    middle = {k: float(np.median([e[k] for e in per_step])) for k in DAPO_RANGES}
    return share, middle


@pytest.mark.parametrize("source", ["dapo_like.parquet", 1, 2, 3])
def test_dapo_family_matches_published_per_step_ranges(source):
    """Most steps fall in the published per-step ranges (which are themselves the extremes of a
    real run, so a calibrated model puts a few steps outside), and the typical step is inside."""
    trace = load(TRACES / source) if isinstance(source, str) else synth("dapo", 20, 96, 8, 8192, seed=source)
    share, middle = dapo_in_range(trace)
    assert share["median"] >= 0.9 and share["p90"] >= 0.9 and share["p99"] >= 0.8, share
    for k, (lo, hi) in DAPO_RANGES.items():
        assert lo <= middle[k] <= hi, (k, middle[k])


def test_mixture_follows_intern_s1_fit():
    t = synth("mixture", 40, 64, 8, 32768, seed=3)
    x = np.sort(t.df["response_len"].to_numpy())
    for q in [2000, 5000, 8000, 12000, 18000, 25000]:
        assert abs(np.searchsorted(x, q, side="right") / len(x) - intern_s1_cdf(q + 0.5)) < 0.015, q
    assert abs(x.mean() - 9595) < 150  # the fit's mean, conditioned on length >= 1
    assert abs(t.df.groupby(["step", "prompt_id"])["prompt_len"].first().mean() - 141) < 5


def test_lognormal_median_sigma_and_within_group_correlation():
    for rho in [0.0, 0.8]:
        t = synth("lognormal", 20, 128, 2, 10**6, seed=1, median=1500, sigma=0.5, rho=rho)
        logs = np.log(t.df["response_len"].to_numpy()).reshape(-1, 2)  # rows: prompts, cols: samples
        assert abs(np.exp(np.median(logs)) / 1500 - 1) < 0.03
        assert abs(logs.std() - 0.5) < 0.02
        assert abs(np.corrcoef(logs[:, 0], logs[:, 1])[0, 1] - rho) < 0.06


def test_drift_grows_lengths_geometrically():
    t = synth("lognormal", 11, 128, 4, 10**6, seed=2, drift=0.1)
    medians = t.df.groupby("step")["response_len"].median().to_numpy()
    assert medians[-1] / medians[0] == pytest.approx(1.1**10, rel=0.08)


def test_cap_piles_up_and_marks_unfinished():
    cap = 3000
    t = synth("lognormal", 5, 128, 8, cap, seed=4, median=2000, sigma=0.8)
    L, fin = t.df["response_len"].to_numpy(), t.df["finished"].to_numpy()
    assert L.max() == cap and (L[~fin] == cap).all()
    expected = 1 - norm.cdf(np.log((cap + 0.5) / 2000) / 0.8)  # P(round(x) > cap) = 0.30
    assert abs((~fin).mean() - expected) < 0.03
    assert stats(t)["truncated_fraction"] == (~fin).mean()


@pytest.mark.parametrize("call, text", [
    (lambda: synth("gamma", 1, 1, 1, 10, 0), "unknown synthetic family 'gamma'; choose one of lognormal, dapo, mixture, agentic"),
    (lambda: synth("mixture", 1, 1, 1, 10, 0, sigma=1), "family 'mixture' has no parameter 'sigma'; its parameters are rho, drift, prompt_mean, prompt_sigma"),
    (lambda: synth("dapo", 1, 1, 1, 10, 0, rho=1.5), "parameter rho=1.5 is out of range; it must be >= 0 and <= 1"),
    (lambda: synth("dapo", 1, 1, 1, 10, 0, drift=-1), "parameter drift=-1 is out of range; it must be > -1"),
    (lambda: synth("dapo", 1, 1, 1, 10, 0, median=float("nan")), "parameter median=nan is out of range; it must be > 0"),
    (lambda: synth("dapo", 0, 1, 1, 10, 0), "synth: steps is 0; it must be a whole number >= 1"),
    (lambda: synth("dapo", 1, 1, 1, 10, -3), "synth: seed is -3; it must be a whole number >= 0"),
])
def test_bad_arguments(call, text):
    with pytest.raises(TltsimError) as e:
        call()
    assert str(e.value) == text


@pytest.mark.parametrize("mean, cap", [(7615, 40960), (20000, 25000), (450, 8192)])
def test_lognormal_median_gives_the_mean_under_the_cap(mean, cap):
    """The median lognormal_median returns draws, capped, to the asked mean, where the cap binds hard too."""
    median = lognormal_median(mean, cap, MATH_SIGMA)
    lengths = synth("lognormal", 1, 2000, 8, cap, 0, median=median, sigma=MATH_SIGMA).df["response_len"]
    assert lengths.mean() == pytest.approx(mean, rel=0.03)


@pytest.mark.parametrize("mean", [30000, 0])
def test_lognormal_median_refuses_a_mean_no_median_gives(mean):
    with pytest.raises(TltsimError, match="no median gives a mean"):
        lognormal_median(mean, 30000, MATH_SIGMA)
