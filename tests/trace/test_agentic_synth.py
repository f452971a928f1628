"""`tltsim trace synth agentic`: call counts and per-turn lengths follow the Intern-S1 fits, tool latency its lognormal,
the cap cuts a trajectory, and the shipped parameters are the derivation's."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from tltsim.cli import main
from tltsim.trace import agentic, load, synth

ROOT = Path(__file__).resolve().parents[2]
POLYTRACE = ROOT / "../shared/data/polytrace"


def clipped_mean(mean, sd):
    """E[max(X, 1)] for X ~ N(mean, sd): the mean of a length drawn from the fit and clipped to >= 1 token."""
    a = (1 - mean) / sd
    return sps.norm.cdf(a) + mean * sps.norm.sf(a) + sd * sps.norm.pdf(a)


def test_call_counts_and_per_turn_means_follow_the_fits():
    n = 300_000
    k, lengths = agentic.sessions(np.random.default_rng(7), n)
    ks, shares = agentic.call_count_shares()
    seen = np.array([np.sum(k == kk) for kk in ks])
    assert sps.chisquare(seen, shares * n).pvalue > 0.01
    assert np.abs(seen / n - shares).max() < 0.005
    tested = 0
    for kk in ks:
        x = np.array([lengths[i] for i in np.flatnonzero(k == kk)])
        mean, cov = agentic.length_fit(int(kk))
        sd = np.sqrt(np.diag(cov))
        expected = clipped_mean(mean, sd)
        se = sd / np.sqrt(len(x)) / expected  # relative standard error of each mean at this sample size
        sure = se <= 0.05 / 2.5  # features whose 5% band is 2.5 standard errors or more wide
        assert np.all(np.abs(x.mean(0)[sure] / expected[sure] - 1) < 0.05), kk
        assert x.min() >= 1
        tested += seen[list(ks).index(kk)] * sure.all()
    assert tested / n > 0.95  # the counts whose every mean was checked hold most sessions


def test_trajectories_and_tool_latencies():
    t = synth("agentic", 4, 64, 8, 100_000, seed=3)
    assert t.agentic and t.meta.source == "synth:agentic" and t.df["finished"].all()
    turns = t.turns
    last = turns.groupby(["step", "prompt_id", "sample"])["turn"].transform("max") == turns["turn"]
    assert turns["tool_latency_s"][last].isna().all() and (turns["tool_tokens"][last] == 0).all()
    assert turns["tool_latency_s"][~last].notna().all() and (turns["tool_tokens"][~last] >= 1).all()
    lat = turns["tool_latency_s"][~last].to_numpy()
    median = agentic.tool_latency_defaults()["tool_latency_median"]
    assert abs(np.median(lat) / median - 1) < 0.1
    other = synth("agentic", 4, 64, 8, 100_000, seed=3, tool_latency_median=2 * median)
    assert other.df["turn_response_len"].equals(t.df["turn_response_len"])
    assert np.nansum(other.turns["tool_latency_s"]) == pytest.approx(2 * np.nansum(turns["tool_latency_s"]))


def test_the_cap_cuts_a_trajectory_at_its_turn():
    full = synth("agentic", 2, 16, 4, 100_000, seed=1)
    cut = synth("agentic", 2, 16, 4, 300, seed=1)
    assert (cut.df["response_len"] <= 300).all() and not cut.df["finished"].all()
    for a, b in zip(full.df.itertuples(), cut.df.itertuples()):
        if a.response_len <= 300:
            assert b.finished and b.turn_response_len == a.turn_response_len and b.tool_tokens == a.tool_tokens
        else:
            assert not b.finished and b.response_len == 300
            n = len(b.turn_response_len)
            assert b.turn_response_len[:-1] == a.turn_response_len[:n - 1]
            assert b.tool_latency_s[-1] is None and b.tool_tokens[:-1] == a.tool_tokens[:n - 1]


def test_cli_writes_the_same_bytes_for_the_same_seed_and_refuses_single_turn_knobs(tmp_path, capsys):
    args = ["trace", "synth", "agentic", "--steps", "2", "--prompts", "3", "--group", "4", "--max-len", "4096",
            "--seed", "5", "--param", "tool_latency_sigma=0.5"]
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(args + ["-o", str(a)]) == 0 and main(args + ["-o", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes() and load(a).agentic
    assert "--param tool_latency_sigma=0.5" in load(a).meta.provenance
    bad = tmp_path / "c.parquet"
    assert main(args[:-2] + ["--drift", "0.1", "-o", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["tltsim: error: family 'agentic' has no parameter 'drift'; its parameters are tool_latency_median, "
                   "tool_latency_sigma"] and not bad.exists()


@pytest.mark.skipif(not (POLYTRACE / "enhanced_task_distribution_parameters.json").is_file(),
                    reason="the PolyTrace reference data lies beside the repository")
def test_the_shipped_parameters_are_the_derivation_of_the_reference_data():
    spec = importlib.util.spec_from_file_location("derive", ROOT / "scripts" / "derive_intern_s1_tool_calling.py")
    derive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(derive)
    assert json.loads(json.dumps(derive.derive(POLYTRACE))) == agentic.fit()
