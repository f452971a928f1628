"""A verl run that speculated: its draft tree read from the config, its drafter's quality and drift fitted to the
accepted lengths verl logs (compute_spec_decode_metrics, verl/trainer/ppo/ray_trainer.py), saved and replayed."""
import json

import numpy as np
import pytest

from tltsim.analysis.calibration import apply, load_calibration
from tltsim.analysis.drafter.calibrate import calibrate_drafter
from tltsim.config import SimConfig
from tltsim.core.errors import TltsimError
from tltsim.drafter.acceptance import AcceptanceModel, invert_quality
from tltsim.verl_config import read_speculation
from tltsim.verl_metrics import read_metrics

MODEL = AcceptanceModel()


def _config(path, rollout: dict, mtp: dict | None = None, drafter: dict | None = None):
    model = {"path": "Qwen/Qwen3-8B", **({"mtp": mtp} if mtp is not None else {})}
    rollout = {"name": "vllm", "n": 4, **rollout, **({"drafter": drafter} if drafter is not None else {})}
    import yaml

    path.write_text(yaml.safe_dump({"trainer": {"n_gpus_per_node": 8, "nnodes": 1},
                                    "actor_rollout_ref": {"model": model, "rollout": rollout}}))
    return path


def _spec_metrics(accepts, verifies):
    """verl's compute_spec_decode_metrics: per request 1 + accepted / verify steps (0 with none), averaged."""
    lengths = [(1.0 + a / v) if v > 0 else 0.0 for a, v in zip(accepts, verifies)]
    rates = [a / (v * 3) if v > 0 else 0.0 for a, v in zip(accepts, verifies)]
    return {"rollout/spec_accept_length": float(sum(lengths) / len(lengths)),
            "rollout/spec_accept_rate": float(sum(rates) / len(rates))}


def _run(path, spec, lengths, requests=64, seed=0):
    """A metrics file as verl writes it: per step, each request's verify steps and accepted drafts drawn from the
    acceptance model at the quality that gives that step's accepted length, then verl's per-request mean."""
    rng = np.random.default_rng(seed)
    lines = []
    for step, target in enumerate(lengths, start=1):
        q = invert_quality(MODEL, spec.strategy, target)
        verifies = rng.integers(50, 400, size=requests)
        accepts = [int((MODEL.sample(spec.strategy, q, rng, int(v)) - 1).sum()) for v in verifies]
        data = {"timing_s/gen": 60.0, "timing_s/step": 100.0, "response_length/mean": 500.0,
                **_spec_metrics(accepts, verifies)}
        lines.append(json.dumps({"step": step, "data": data}))
    path.write_text("\n".join(lines) + "\n")
    return read_metrics(path)


def test_vllm_mtp_rollout_gives_the_mtp_method_and_a_chain(tmp_path):
    spec = read_speculation(_config(tmp_path / "c.yaml", {},
                                    {"enable": True, "enable_rollout": True, "enable_train": True,
                                     "method": "mtp", "num_speculative_tokens": 2}))
    assert (spec.method, str(spec.strategy), spec.training, spec.engine) == ("mtp", "2_1_2", "cotrain", "vllm")


def test_sglang_mtp_rollout_gives_its_tree_without_the_root(tmp_path):
    spec = read_speculation(_config(tmp_path / "c.yaml", {"name": "sglang"},
                                    {"enable": True, "enable_rollout": True, "speculative_algorithm": "EAGLE",
                                     "speculative_num_steps": 3, "speculative_eagle_topk": 2,
                                     "speculative_num_draft_tokens": 6}))
    assert (spec.method, str(spec.strategy), spec.training) == ("mtp", "3_2_5", "frozen")


def test_mtp_loaded_but_not_used_in_rollout_does_not_speculate(tmp_path):
    assert read_speculation(_config(tmp_path / "c.yaml", {}, {"enable": True, "enable_train": True})) is None
    assert read_speculation(_config(tmp_path / "d.yaml", {})) is None


def test_a_speco_drafter_gives_its_method_and_training_interval(tmp_path):
    spec = read_speculation(_config(tmp_path / "c.yaml", {}, drafter={
        "enable": True, "enable_drafter_training": True, "speculative_algorithm": "EAGLE3",
        "rollout": {"spec_steps": 3, "spec_topk": 1, "spec_verify_tokens": 3},
        "training": {"training_interval_steps": 5}}))
    assert (spec.method, str(spec.strategy), spec.training, spec.train_interval) == ("eagle3", "3_1_3", "periodic", 5)


def test_an_unknown_method_is_refused_naming_the_key(tmp_path):
    path = _config(tmp_path / "c.yaml", {}, {"enable": True, "enable_rollout": True, "method": "medusa"})
    with pytest.raises(TltsimError, match="model.mtp.method = 'medusa'"):
        read_speculation(path)


@pytest.mark.parametrize("drift", [0.03, 0.01])
def test_a_frozen_drafters_drift_comes_back_within_10_percent(tmp_path, drift):
    spec = read_speculation(_config(tmp_path / "c.yaml", {"name": "sglang"},
                                    {"enable": True, "enable_rollout": True, "speculative_num_steps": 4,
                                     "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 5}))
    lengths = 3.6 - drift * np.arange(30)
    fit = calibrate_drafter(spec, _run(tmp_path / "m.jsonl", spec, lengths))
    assert fit.drift_per_step == pytest.approx(drift, rel=0.1)
    assert fit.quality_drift_per_step > 0 and fit.metric == "rollout/spec_accept_length"
    assert fit.per_step["fitted"].iloc[0] == pytest.approx(3.6, rel=0.03)
    assert np.abs(fit.per_step["measured"] - lengths).max() < 0.1  # verl's per-request mean of the draws


def test_a_drafter_co_trained_every_step_leaves_the_drift_unmeasured(tmp_path):
    spec = read_speculation(_config(tmp_path / "c.yaml", {}, {"enable": True, "enable_rollout": True,
                                                              "enable_train": True, "num_speculative_tokens": 3}))
    fit = calibrate_drafter(spec, _run(tmp_path / "m.jsonl", spec, 2.8 - 0.01 * np.arange(12)))
    assert fit.drift_per_step is None and fit.net_change_per_step < 0
    assert any("co-trained every step" in n for n in fit.notes)


def test_a_periodically_co_trained_drafter_gives_its_drift_and_recovery(tmp_path):
    spec = read_speculation(_config(tmp_path / "c.yaml", {}, drafter={
        "enable": True, "enable_drafter_training": True, "speculative_algorithm": "EAGLE3",
        "rollout": {"spec_steps": 3, "spec_topk": 1, "spec_verify_tokens": 3},
        "training": {"training_interval_steps": 5}}))
    steps = np.arange(1, 31)
    lengths = 3.0 - 0.04 * (steps % 5)  # trained at every 5th step: back to 3.0, then 0.04 lost a step
    fit = calibrate_drafter(spec, _run(tmp_path / "m.jsonl", spec, lengths, requests=128))
    assert fit.drift_per_step == pytest.approx(0.04, rel=0.1)
    # a training gives back the 5 steps' drift the drafter would have had at that step without it
    assert fit.recovery_per_training == pytest.approx(0.2, rel=0.15)


def test_metrics_without_accepted_lengths_are_refused(tmp_path):
    spec = read_speculation(_config(tmp_path / "c.yaml", {}, {"enable": True, "enable_rollout": True}))
    (tmp_path / "m.jsonl").write_text(json.dumps({"step": 1, "data": {"timing_s/gen": 1.0, "timing_s/step": 2.0}}))
    with pytest.raises(TltsimError, match="no rollout/spec_accept_length"):
        calibrate_drafter(spec, read_metrics(tmp_path / "m.jsonl"))


def _saved(tmp_path, drafter):
    d = {"format": "tltsim.analysis.calibration/2", "reward_s": 0.5, "fitted_steps": 3,
         "phases": {"rollout": 1.0, "rollout_fixed_s": 0.0, "logprob": 1.0, "train": 1.0, "sync": 1.0,
                    "other_s": 0.0}, "drafter": drafter}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(d))
    return path


def test_a_saved_drafter_is_replayed_as_the_simulations_drafter(tmp_path):
    spec = read_speculation(_config(tmp_path / "c.yaml", {}, {"enable": True, "enable_rollout": True,
                                                              "num_speculative_tokens": 3}))
    fit = calibrate_drafter(spec, _run(tmp_path / "m.jsonl", spec, 2.9 - 0.02 * np.arange(10)))
    path = _saved(tmp_path, json.loads(json.dumps(fit.to_json())))
    cfg = apply(load_calibration(path), SimConfig())
    assert cfg.drafter.method == "mtp" and cfg.drafter.q_start == pytest.approx(fit.quality_start)
    assert cfg.drafter.drift == pytest.approx(fit.quality_drift_per_step) and "mtp drafter" in cfg.drafter.source


def test_a_saved_drafter_with_an_unknown_key_is_refused(tmp_path):
    path = _saved(tmp_path, {"method": "mtp", "training": "frozen", "quality_start": 0.7, "drfit_per_step": 0.1})
    with pytest.raises(TltsimError, match="unknown drafter key 'drfit_per_step'; did you mean 'drift_per_step'"):
        load_calibration(path)


CLUSTER = ["--gpus", "8", "--tp", "2", "--gpu", "h100", "--model", "qwen2.5-7b", "--max-num-seqs", "16"]


def _calibrated(tmp_path, trace, tpath, conf):
    """`tltsim calibrate` of the speculating run whose metrics _run wrote to spec.jsonl (with step times and lengths
    of `trace` added) on CLUSTER, saved: the calibration's path."""
    from tltsim.cli import main

    lines = []
    for i, line in enumerate((tmp_path / "spec.jsonl").read_text().splitlines()):
        rec = json.loads(line)
        lens = trace.step(i)["response_len"]
        rec["step"] = i
        rec["data"].update({"timing_s/gen": 20.0 + i, "timing_s/step": 40.0 + i,
                            "response_length/mean": float(lens.mean()) + 1, "response_length/max": int(lens.max()) + 1})
        lines.append(json.dumps(rec))
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--verl-metrics", str(tmp_path / "m.jsonl"), "--trace", str(tpath), "--verl-config",
                 str(conf), *CLUSTER, "--save-calibration", str(cal)]) == 0
    return cal


def test_calibrate_fits_the_drafter_and_compare_replays_it(tmp_path, capsys):
    from tltsim.cli import main
    from tltsim.core.records import Result
    from tltsim.trace import save
    from tests.analysis.conftest import tiny_trace

    trace = tiny_trace(8)
    tpath = save(trace, tmp_path / "t.parquet")
    conf = _config(tmp_path / "c.yaml", {"name": "sglang"},
                   {"enable": True, "enable_rollout": True, "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                    "speculative_num_draft_tokens": 4})
    spec = read_speculation(conf)
    _run(tmp_path / "spec.jsonl", spec, 2.9 - 0.02 * np.arange(8))
    cal = _calibrated(tmp_path, trace, tpath, conf)
    out = capsys.readouterr().out
    assert "drafter: mtp, frozen, draft tree 3_1_3" in out and "drift_per_step" in out
    saved = json.loads(cal.read_text())["drafter"]
    assert saved["drift_per_step"] == pytest.approx(0.02, rel=0.3) and len(saved["accept_length"]) == 8
    assert main(["compare", "--trace", str(tpath), *CLUSTER, "--calibration", str(cal), "--policies", "verl,static-sd",
                 "-o", str(tmp_path / "cmp"), "--no-progress", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["drift_sensitivity"]
    fitted = [r for r in rows if r["fitted"]]
    assert fitted and fitted[0]["drift_per_step"] == saved["drift_per_step"]
    run = Result.load(tmp_path / "cmp" / "static-sd")
    assert run.config["drafter"]["method"] == "mtp"
    assert run.config["drafter"]["q_start"] == pytest.approx(saved["quality_start"])


def test_a_calibration_saved_with_the_older_drafter_keys_still_applies(tmp_path, recwarn):
    from tltsim.core.errors import TltsimNote

    path = _saved(tmp_path, {"family": "draft-model", "cotrained": True, "train_interval": 4, "quality_start": 0.6,
                             "quality_drift_per_step": 0.01, "metric": "rollout/spec_accept_length"})
    saved = load_calibration(path)
    assert (saved["drafter"]["method"], saved["drafter"]["training"]) == ("draft_model", "periodic")
    assert "family" not in saved["drafter"] and "cotrained" not in saved["drafter"]
    cfg = apply(saved, SimConfig())
    assert (cfg.drafter.method, cfg.drafter.q_start, cfg.drafter.drift) == ("draft_model", 0.6, 0.01)
    assert [str(w.message) for w in recwarn if w.category is TltsimNote] == [
        f"{path}: its drafter's family and cotrained read as method = 'draft_model', training = 'periodic'"]


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_a_model_free_verl_rollout_calibrates_and_compares(tmp_path, capsys, method):
    """A verl run whose MTP rollout drafts with vLLM's ngram or suffix calibrates as that method, and compare takes
    its calibration: tlt-base's n-gram drafter drafts at the run's measured quality where the run drafted so; the
    trained drafter keeps its defaults (the run measured none)."""
    from tltsim.cli import main
    from tltsim.core.records import Result
    from tltsim.drafter.quality import Q_NGRAM
    from tltsim.trace import save
    from tests.analysis.conftest import tiny_trace

    trace = tiny_trace(6)
    tpath = save(trace, tmp_path / "t.parquet")
    conf = _config(tmp_path / "c.yaml", {}, {"enable": True, "enable_rollout": True, "method": method,
                                             "num_speculative_tokens": 3})
    spec = read_speculation(conf)
    assert (spec.method, spec.training, str(spec.strategy)) == (method, "frozen", "3_1_3")
    _run(tmp_path / "spec.jsonl", spec, np.full(6, 1.6))
    cal = _calibrated(tmp_path, trace, tpath, conf)
    assert f"drafter: {method}, frozen" in capsys.readouterr().out
    saved = json.loads(cal.read_text())["drafter"]
    assert (saved["method"], saved["training"]) == (method, "frozen")
    assert main(["compare", "--trace", str(tpath), *CLUSTER, "--calibration", str(cal), "--policies",
                 "verl,tlt,tlt-base", "-o", str(tmp_path / "cmp"), "--no-progress", "--no-report"]) == 0
    base = Result.load(tmp_path / "cmp" / "tlt-base").steps["drafter_quality"]
    tlt = Result.load(tmp_path / "cmp" / "tlt").config
    assert tlt["drafter"]["method"] == method and tlt["policy_knobs"]["drafter"] == "eagle"
    if method == "ngram":  # the run's own n-gram acceptance, not tltsim's default
        assert base.eq(saved["quality_start"]).all() and saved["quality_start"] != pytest.approx(Q_NGRAM)
    else:
        assert base.eq(Q_NGRAM).all()
