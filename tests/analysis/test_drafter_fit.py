"""The drafter-staleness model fitted to real runs' probes, and its prediction for a run at another learning rate."""
import json

import numpy as np
import pandas as pd
import pytest

from tltsim.analysis.drafter.fit import (fit_drafter, predict_gap, read_probes, spot_trajectory,
                                                  static_trajectory)
from tltsim.cli import main
from tltsim.control import DEFAULT_STRATEGY
from tltsim.core.errors import TltsimError
from tltsim.core.records import Result
from tltsim.policies import make_policy
from tltsim.drafter.acceptance import AcceptanceModel

MODEL = AcceptanceModel()
BATCHES = [10, 30, 5, 40, 20, 0, 25, 12]  # drafter training batches per step, x 8 samples each


def accepted(qs):
    return [MODEL.mean(DEFAULT_STRATEGY, q) for q in qs]


def fake_run(path, spot, batches, static=None, lr=1e-4):
    """A run directory with only what calibration reads: per-step probes, training batches, the target's lr."""
    steps = pd.DataFrame({"step": range(len(spot)), "drafter_accepted": spot, "drafter_train_batches": batches})
    if static is not None:
        steps["static_drafter_accepted"] = static
    Result(pd.DataFrame(), steps, pd.DataFrame(), {"steps": len(spot)},
           {"drafter_batch": 8, "grpo": {"lr": lr}}).save(path)
    return path


def model_run(path, lr, drift, q0=0.80, q_max=0.90, tau=300.0):
    """A run whose probes are exactly the staleness model's, spot and static in one run (--probe-static)."""
    n = np.array(BATCHES, float) * 8
    return fake_run(path, accepted(spot_trajectory(q0, n, q_max, tau, drift)), BATCHES,
                    accepted(static_trajectory(q0, len(BATCHES), drift)), lr)


def test_calibration_recovers_the_drift_and_learning_curve_that_made_two_runs(tmp_path):
    q0, q_max, drift, tau = 0.80, 0.90, 0.02, 300.0
    n = np.array(BATCHES[:7], float) * 8
    ad = fake_run(tmp_path / "ad", accepted(spot_trajectory(q0, n, q_max, tau, drift)), BATCHES[:7])
    st = fake_run(tmp_path / "st", accepted(static_trajectory(q0, 7, drift)), [0] * 7)
    fit = fit_drafter(ad, st)
    assert fit.drift == pytest.approx(drift, rel=1e-6)
    assert fit.q_max == pytest.approx(q_max, rel=1e-3) and fit.tau_samples == pytest.approx(tau, rel=1e-2)
    assert fit.rms_error < 1e-4 and fit.knobs()["q_start"] == pytest.approx(q0, abs=1e-9)
    make_policy("tlt", fit.knobs())  # the fitted figures are valid simulator knobs


def test_one_run_with_static_probes_fits_alone(tmp_path):
    fit = fit_drafter(model_run(tmp_path / "a", 1e-4, 0.015))
    assert fit.drift == pytest.approx(0.015, rel=1e-6) and fit.lr == 1e-4
    assert fit.tau_samples == pytest.approx(300.0, rel=1e-2)


def test_the_drift_is_robust_to_one_bad_probe(tmp_path):
    """Theil-Sen: one probe far off the line does not move the fitted drift much (a least-squares or end-to-end
    slope would)."""
    q = list(static_trajectory(0.80, 8, 0.01))
    q[7] -= 0.2  # one wild last probe
    run = fake_run(tmp_path / "a", accepted(q), [0] * 8, accepted(q))
    assert fit_drafter(run).drift == pytest.approx(0.01, rel=0.15)


def test_a_gap_predicted_at_another_learning_rate_scales_the_drift_by_the_ratio(tmp_path):
    """Runs made by the model with the drift in proportion to the learning rate: fitted on one, the other's
    spot-vs-static gap comes back exactly; where the drift does not follow the learning rate, it does not."""
    low, high = model_run(tmp_path / "low", 1e-5, 0.002), model_run(tmp_path / "high", 1e-4, 0.02)
    fit = fit_drafter(high)
    p = predict_gap(fit, read_probes(low), 1e-5 / 1e-4)
    assert p.drift_scale == pytest.approx(0.1)
    assert p.predicted_gap == pytest.approx(p.measured_gap, rel=1e-3) and abs(p.error) < 1e-3
    assert p.measured_gap > 0 and len(p.per_step) == len(BATCHES)
    off = model_run(tmp_path / "off", 1e-5, 0.02)  # drift as large at a tenth of the learning rate
    assert predict_gap(fit, read_probes(off), 0.1).error < -0.1


def test_fit_drafter_predicts_the_other_run_from_the_command_line(tmp_path, capsys):
    low, high = model_run(tmp_path / "low", 1e-5, 0.002), model_run(tmp_path / "high", 1e-4, 0.02)
    assert main(["fit-drafter", "--spot", str(high), "--predict", str(low), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["drift"] == pytest.approx(0.02, rel=1e-6) and out["lr"] == 1e-4
    (p,) = out["predictions"]
    assert p["drift_scale"] == pytest.approx(0.1) and abs(p["error"]) < 1e-3
    assert [r["step"] for r in p["steps"]] == list(range(len(BATCHES)))
    assert main(["fit-drafter", "--spot", str(high), "--predict", str(low)]) == 0
    text = capsys.readouterr().out
    assert "drift x 0.1 (the ratio of the target learning rates)" in text and "spot-vs-static gap" in text


def test_calibration_needs_probed_runs(tmp_path):
    run = fake_run(tmp_path / "x", [float("nan")] * 3, [0] * 3)
    with pytest.raises(TltsimError, match="no drafter_accepted per step"):
        fit_drafter(run, run)


def test_runs_of_one_learning_rate_fit_together_each_from_its_own_start(tmp_path):
    runs = [model_run(tmp_path / f"s{i}", 1e-4, 0.01, q0=q0) for i, q0 in enumerate((0.70, 0.80))]
    fit = fit_drafter(runs)
    assert fit.drift == pytest.approx(0.01, rel=1e-6) and fit.q_start == pytest.approx(0.75)
    assert fit.q_max == pytest.approx(0.90, rel=1e-3) and fit.tau_samples == pytest.approx(300.0, rel=1e-2)
    assert set(fit.qualities.run) == {"s0", "s1"} and set(fit.qualities.drafter) == {"spot", "static"}
    with pytest.raises(TltsimError, match="fit runs of one learning rate"):
        fit_drafter([runs[0], model_run(tmp_path / "other", 1e-5, 0.01)])


def test_a_step_without_a_probe_is_refused_naming_it(tmp_path):
    """invert_quality reads NaN as quality 0, which would drag the fit without a word: refuse instead."""
    q = accepted(static_trajectory(0.8, 4, 0.01))
    spot_gap = fake_run(tmp_path / "a", [q[0], float("nan"), q[2], q[3]], [1] * 4, q)
    with pytest.raises(TltsimError, match=r"drafter_accepted is missing at step\(s\) 1;"):
        read_probes(spot_gap)
    static_gap = fake_run(tmp_path / "b", q, [1] * 4, [q[0], q[1], float("nan"), float("nan")])
    with pytest.raises(TltsimError, match=r"static_drafter_accepted is missing at step\(s\) 2, 3;"):
        read_probes(static_gap)


def test_a_learning_rate_of_zero_is_refused(tmp_path):
    with pytest.raises(TltsimError, match="grpo.lr is 0; a target learning rate must be > 0"):
        read_probes(model_run(tmp_path / "a", 0, 0.01))


def test_no_measured_gap_gives_no_relative_error(tmp_path):
    """Spot and static alike (nothing trained, nothing drifted): the gap is 0, its relative error none (null in
    JSON, never NaN)."""
    q = accepted([0.8] * 4)
    run = fake_run(tmp_path / "a", q, [0] * 4, q)
    p = predict_gap(fit_drafter(run), read_probes(run))
    assert p.measured_gap == 0 and p.error is None and p.to_json()["error"] is None
