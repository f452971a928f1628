"""The profiled cost model: fitting recovers known coefficients; closed-form segments; clear errors."""
import numpy as np
import pandas as pd
import pytest

from tltsim.cost.profiled import Profiled, read_profile
from tltsim.core.errors import TltsimError

TRUE = {"c0": 2e-3, "c_q": 1e-4, "c_kv": 3e-7, "c_att": 5e-8, "d0": 5e-4, "d_q": 2e-5,
        "p0": 1e-3, "p_t": 4e-5, "p_sq": 1e-9, "train0": 0.1, "train_t": 1e-4, "train_sq": 2e-7, "logprob0": 0.01,
        "logprob_t": 3e-5, "logprob_sq": 5e-8, "g0": 3e-4, "g_q": 6e-6, "g_kv": 2e-8, "g_att": 4e-9}


def synthetic_profile(noise=0.0, seed=0) -> pd.DataFrame:
    """A profile generated from known coefficients (optionally with multiplicative noise)."""
    truth = Profiled({**TRUE, "drafter_tokens_per_s": 5000.0})
    rng = np.random.default_rng(seed)
    rows = []
    for b in (1, 2, 4, 8, 16):
        for ctx in (64, 512, 2048):
            C = b * ctx
            rows.append(("decode", b, C, 0, 0, 0, 0, 0, float(truth.decode_time(b, C))))
            rows.append(("prefill", b, 0, b * ctx, b * ctx**2, 0, 0, 0, float(truth.prefill_time(b * ctx, b * ctx**2))))
            for d, k, v in ((4, 1, 4), (8, 4, 16), (8, 4, 48)):
                t = d * float(truth.draft_time(b, k)) + float(truth.verify_time(b, v + 1, C))
                rows.append(("spec", b, C, 0, 0, d, k, v, t))
            for per_row in (1, 4, 16, ctx):  # catch-ups, and the build over every token (the SD switch)
                rows.append(("catchup", b, C, b * per_row, 0, 0, 0, 0, float(truth.catchup_time(b, per_row, C))))
    for n, length in ((256, 64), (1024, 64), (4096, 512), (4096, 128)):
        sq = n * length  # n / length sequences of `length` tokens
        rows.append(("train", 0, 0, n, sq, 0, 0, 0, float(truth.train_time(n, 1, sq))))
        rows.append(("logprob", 0, 0, n, sq, 0, 0, 0, float(truth.logprob_time(n, 1, sq))))
        rows.append(("drafter_train", 0, 0, n, 0, 0, 0, 0, n / 5000.0))
    df = pd.DataFrame(rows, columns=["kind", "batch", "context", "tokens", "sq_tokens", "depth", "topk", "verify", "seconds"])
    df["seconds"] *= np.exp(noise * rng.standard_normal(len(df)))
    return df


def test_fit_recovers_the_coefficients_that_made_the_profile():
    fit = Profiled.fit(synthetic_profile())
    for k, v in TRUE.items():
        assert fit.c[k] == pytest.approx(v, rel=1e-6), k
    assert fit.drafter_train_tokens_per_s(2) == pytest.approx(10000.0)


def test_catchup_rows_price_the_switch_and_catch_ups_else_the_drafter_and_a_prefill():
    df = synthetic_profile()
    fit = Profiled.fit(df)
    # the switch: the drafter ingests every token of the batch (4 rows holding 2048 tokens in all)
    g = TRUE
    assert float(fit.switch_time(4, 2048, 4 * 512**2)) == pytest.approx(
        g["g0"] + g["g_q"] * 2048 + g["g_kv"] * 2048 + g["g_att"] * 512 * 2048)
    assert float(fit.catchup_time(4, 3, 2048)) == pytest.approx(
        g["g0"] + g["g_q"] * 12 + g["g_kv"] * 2048 + g["g_att"] * 3 * 2048)
    old = Profiled.fit(df[df.kind != "catchup"])  # a profile from before catch-up rows
    assert "g0" not in old.c
    assert float(old.catchup_time(4, 3, 2048)) == pytest.approx(float(old.draft_time(12, 1)))
    assert float(old.switch_time(4, 2048, 4 * 512**2)) == pytest.approx(float(old.prefill_time(2048, 4 * 512**2)))


def test_noisy_profile_predicts_within_a_few_percent():
    fit = Profiled.fit(synthetic_profile(noise=0.05, seed=1))
    res = fit.residuals(synthetic_profile())
    err = (res.predicted_s / res.measured_s - 1).abs()
    assert err.median() < 0.03 and err.max() < 0.15


def test_segment_time_is_the_sum_of_its_iterations():
    m = Profiled(TRUE)
    for q, k, c0, g, n in [(4, 1, 100, 4, 50), (64, 16, 5000, 40, 7), (1, 1, 0, 1, 0)]:
        ref = sum(float(m._step(q, k, c0 + i * g)) for i in range(n))
        assert float(m.segment_time(q, k, c0, g, n)) == pytest.approx(ref, rel=1e-12, abs=1e-15)


def test_bad_profiles_get_clear_errors(tmp_path):
    f = tmp_path / "p.csv"
    with pytest.raises(TltsimError, match="profile not found"):
        read_profile(f)
    f.write_text("kind,batch\ndecode,1\n")
    with pytest.raises(TltsimError, match="missing column\\(s\\) context"):
        read_profile(f)
    df = synthetic_profile()
    df.loc[3, "kind"] = "decoding"
    df.to_csv(f, index=False)
    with pytest.raises(TltsimError, match="row 4, column 'kind': 'decoding' is not one of"):
        read_profile(f)
    df = synthetic_profile()
    df["seconds"] = df["seconds"].astype(object)
    df.loc[2, "seconds"] = "fast"
    df.to_csv(f, index=False)
    with pytest.raises(TltsimError, match="row 3, column 'seconds': 'fast' is not a non-negative number"):
        read_profile(f)
    df = synthetic_profile()
    i = int(df.index[df.kind == "catchup"][0])
    df.loc[i, "batch"] = 0
    df.to_csv(f, index=False)
    with pytest.raises(TltsimError, match=f"row {i + 1}, column 'batch': 0 for a catchup row"):
        read_profile(f)
    with pytest.raises(TltsimError, match="no decode rows"):
        Profiled.fit(synthetic_profile().query("kind != 'decode'"))
