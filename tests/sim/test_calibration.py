"""Calibrating to a verl run: its metrics and config read as verl writes them, each phase fitted and applied."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tltsim.analysis.calibration import KEYS, calibrate
from tltsim.cli import main
from tltsim.config import ClusterConfig, SimConfig
from tltsim.core.errors import TltsimError
from tltsim.core.records import Result
from tltsim.sim.simulator import Simulator
from tltsim.trace import save, synth
from tltsim.verl_config import read_verl_config
from tltsim.verl_metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
CFG = SimConfig(cluster=ClusterConfig(gpus=16, tp=4, gpu="h100", model="qwen2.5-7b", max_running=64))


@pytest.fixture(scope="module")
def run():
    """A trace with verl's 1-based steps and the simulator's per-step times for it."""
    t = synth("dapo", 8, 16, 4, 4096, seed=2)
    t = type(t)(t.df.assign(step=t.df.step + 1), t.meta)
    return t, Simulator(t, CFG).run().steps.set_index("step")


def _metrics(path, trace, steps, factor, noise, seed=0, bad=()):
    """verl's file-logger JSONL: the simulator's times x factor, noise relative, steps in `bad` 3x slower."""
    rng = np.random.default_rng(seed)
    lines = [{"step": 0, "data": {"val-core/acc/mean@1": 0.3}}]  # validation before training: not a step
    for s, r in steps.iterrows():
        slow = 3.0 if s in bad else 1.0
        lens = trace.step(s)["response_len"] if s in trace.steps else trace.step(trace.steps[0])["response_len"]
        lines.append({"step": int(s), "elapsed_seconds": 1.0 * s, "data": {
            "timing_s/gen": r.rollout_s * factor * slow * (1 + noise * rng.standard_normal()),
            "timing_s/step": r.total_s * factor * slow * (1 + noise * rng.standard_normal()),
            "response_length/mean": float(lens.mean()) + 1, "response_length/max": int(lens.max()) + 1}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _phased(path, trace, steps, gen=(1.3, 0.0), phases=None, reward=0.5, adv=0.2, noise=0.005, seed=0, drop=()):
    """verl's file-logger JSONL with every timer of verl's trainer: timing_s/gen = gen[0] x the simulator's rollout
    + gen[1] s; reward `reward` s; the forwards, update and sync x their factor in `phases` (default 1.2, 1.4,
    0.8); adv `adv` s; step = their sum; each value with relative noise; the timers in `drop` left out."""
    f = {"logprob": 1.2, "train": 1.4, "sync": 0.8, **(phases or {})}
    rng = np.random.default_rng(seed)
    noisy = lambda x: float(x) * (1 + noise * rng.standard_normal())  # noqa: E731
    lines = []
    for s, r in steps.iterrows():
        logprob = r.reward_s - CFG.rl.reward_s  # the simulator's reward phase: reward_s + the forwards
        data = {"timing_s/gen": noisy(gen[0] * r.rollout_s + gen[1]), "timing_s/reward": noisy(reward),
                "timing_s/old_log_prob": noisy(f["logprob"] * logprob / 2), "timing_s/ref": noisy(f["logprob"] * logprob / 2),
                "timing_s/adv": noisy(adv), "timing_s/update_actor": noisy(f["train"] * r.train_s),
                "timing_s/update_weights": noisy(f["sync"] * r.sync_s)}
        data = {k: v for k, v in data.items() if k.removeprefix("timing_s/") not in drop}
        lens = trace.step(s)["response_len"]
        data.update({"timing_s/step": sum(data.values()), "response_length/mean": float(lens.mean()) + 1,
                     "response_length/max": int(lens.max()) + 1})
        lines.append({"step": int(s), "data": data})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture(scope="module")
def long_run():
    """16 steps whose rollouts differ enough for a fixed cost to be told from the factor."""
    t = synth("dapo", 16, 16, 4, 4096, seed=5)
    t = type(t)(t.df.assign(step=t.df.step + 1), t.meta)
    return t, Simulator(t, CFG).run().steps.set_index("step")


def test_the_fitted_factor_comes_back_within_5_percent(run, tmp_path):
    trace, steps = run
    for factor, seed in ((1.7, 0), (0.6, 1)):
        m = read_metrics(_metrics(tmp_path / "m.jsonl", trace, steps, factor, 0.03, seed, bad=(3,)))
        cal = calibrate(trace, CFG, m)
        assert abs(cal.phases.rollout / factor - 1) < 0.05 and cal.phases.rollout_fixed_s == 0
        assert cal.error_after < 0.05 < cal.error_before and cal.step_error_after < cal.step_error_before
        assert cal.per_step.fitted.all()
        untimed = [n for n in cal.notes if "do not time" in n]
        assert len(untimed) == 3 and len(cal.notes) == 4  # gen and step only: three phases untimed, reward absent


def test_every_phase_from_verls_timers_and_the_fixed_costs(long_run, tmp_path):
    trace, steps = long_run
    m = read_metrics(_phased(tmp_path / "m.jsonl", trace, steps, gen=(1.3, 2.0)))
    cal = calibrate(trace, CFG, m)
    p = cal.phases
    assert (p.rollout, p.logprob, p.train, p.sync) == pytest.approx((1.3, 1.2, 1.4, 0.8), rel=0.03)
    assert p.rollout_fixed_s == pytest.approx(2.0, abs=0.2) and cal.reward_s == pytest.approx(0.5, rel=0.02)
    assert p.other_s == pytest.approx(0.2, abs=0.02)  # adv: the rest of the step
    assert "fixed cost" in cal.rollout_fit and "Theil-Sen over 16 steps" in cal.rollout_fit and not cal.notes
    assert cal.error_after < 0.01 and cal.step_error_after < 0.01 < cal.step_error_before
    short = calibrate(trace.select_steps(trace.steps[:4]), CFG, m)  # too few steps: one factor, which folds the fixed cost in
    assert short.phases.rollout_fixed_s == 0 and short.phases.rollout > 1.5 and "at least 6 steps" in short.rollout_fit


def test_a_reward_scored_in_the_agent_loop_and_an_untimed_sync(long_run, tmp_path):
    trace, steps = long_run
    m = read_metrics(_phased(tmp_path / "m.jsonl", trace, steps, gen=(1.3, 1.5), reward=0.002, drop=("update_weights",)))
    cal = calibrate(trace, CFG, m)
    assert cal.reward_s < 0.01 and cal.phases.sync == 0 and cal.phases.rollout_fixed_s == pytest.approx(1.5, abs=0.2)
    assert any("inside the agent loop, its time in timing_s/gen" in n for n in cal.notes)
    assert any("do not time the sync phase (timing_s/update_weights)" in n for n in cal.notes)
    assert cal.step_error_after < 0.01  # the simulation's own reward and sync phases are not added on top
    table = cal.phase_table().set_index("phase")
    assert np.isnan(table.at["sync", "measured_s"]) and table.at["rollout", "fixed_s"] == cal.phases.rollout_fixed_s


def test_validate_and_a_calibrated_compare_give_the_same_step_times(long_run, tmp_path, capsys):
    trace, steps = long_run
    tpath = save(trace, tmp_path / "t.parquet")
    mpath = _phased(tmp_path / "m.jsonl", trace, steps, gen=(1.3, 2.0), reward=0.002)
    cluster = ["--gpus", "16", "--tp", "4", "--gpu", "h100", "--model", "qwen2.5-7b", "--max-num-seqs", "64"]
    cal = tmp_path / "cal.json"
    assert main(["validate", "--verl-metrics", str(mpath), "--trace", str(tpath), *cluster, "--json",
                 "--save-calibration", str(cal)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["phases"]["rollout_fixed_s"] > 1
    validated = pd.DataFrame(out["per_step"]).set_index("step")["calibrated_step_s"]
    assert main(["compare", "--trace", str(tpath), *cluster, "--calibration", str(cal), "--policies", "verl,tlt",
                 "-o", str(tmp_path / "cmp"), "--no-progress"]) == 0
    text = capsys.readouterr().out
    verl = Result.load(tmp_path / "cmp" / "verl")
    simulated = verl.steps.set_index("step")["total_s"]
    assert simulated.to_numpy() == pytest.approx(validated.loc[simulated.index].to_numpy(), rel=0.005)
    assert verl.summary["mean_step_s"] == pytest.approx(validated.mean(), rel=0.005)
    assert text.startswith(f"calibrated with {cal}: rollout x{out['phases']['rollout']:.3f}")
    assert "saved_per_step_s" in text and f"trace {tpath}" in text
    html = (tmp_path / "cmp" / "report.html").read_text()
    assert f"Calibrated with {cal}" in html and "saved per step" in html


def test_metrics_unrelated_to_the_trace_are_reported_not_fitted(run, tmp_path):
    trace, steps = run
    other = synth("lognormal", 8, 16, 4, 16384, seed=9, median=3000)
    other = type(other)(other.df.assign(step=other.df.step + 1), other.meta)
    cal = calibrate(trace, CFG, read_metrics(_metrics(tmp_path / "m.jsonl", other, steps, 1.5, 0.03)))
    assert cal.phases is None and not cal.per_step.fitted.any()
    assert any("not of one run" in n for n in cal.notes) and any("response lengths" in n for n in cal.notes)
    shifted = steps.set_axis(steps.index + 20)  # other steps of the run
    with pytest.raises(TltsimError, match="none in common"):
        calibrate(trace, CFG, read_metrics(_metrics(tmp_path / "s.jsonl", trace, shifted, 1.5, 0.03)))
    part = read_metrics(_metrics(tmp_path / "p.jsonl", trace, steps.iloc[2:], 1.5, 0.0))
    cal = calibrate(trace, CFG, part)
    assert cal.notes[0] == "trace steps 1-2 have no metrics (timing_s/gen): not fitted"
    assert cal.phases.rollout == pytest.approx(1.5)


def test_validate_cli_json_save_and_compare_with_the_calibration(run, tmp_path, capsys):
    trace, steps = run
    tpath = save(trace, tmp_path / "t.parquet")
    mpath = _metrics(tmp_path / "m.jsonl", trace, steps, 1.4, 0.02)
    cluster = ["--gpus", "16", "--tp", "4", "--gpu", "h100", "--model", "qwen2.5-7b", "--max-num-seqs", "64"]
    cal = tmp_path / "cal.json"
    assert main(["validate", "--verl-metrics", str(mpath), "--trace", str(tpath), *cluster, "--json",
                 "--save-calibration", str(cal), "-o", str(tmp_path / "val")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert json.loads((tmp_path / "val" / "calibration.json").read_text()) == out
    assert len((tmp_path / "val" / "per_step.csv").read_text().splitlines()) == 1 + 8
    assert abs(out["phases"]["rollout"] / 1.4 - 1) < 0.05 and out["error_after"] < out["error_before"]
    assert len(out["per_step"]) == 8 and json.loads(cal.read_text())["phases"] == out["phases"]
    assert sorted(json.loads(cal.read_text())) == sorted(KEYS)  # what a calibration file may hold: what it is written with
    for name, extra in (("plain", []), ("cal", ["--calibration", str(cal)])):
        assert main(["compare", "--trace", str(tpath), *cluster, "--policies", "verl,tlt", "-o", str(tmp_path / name),
                     "--no-progress", "--no-report", *extra]) == 0
    text = capsys.readouterr().out
    assert "saved_per_step_s" in text and f"rollout x{out['phases']['rollout']:.3f}" in text
    plain, calibrated = (Result.load(tmp_path / n / "verl") for n in ("plain", "cal"))
    assert calibrated.summary["rollout_s"] == pytest.approx(out["phases"]["rollout"] * plain.summary["rollout_s"], rel=1e-9)
    assert calibrated.config["calibration"]["rollout"] == out["phases"]["rollout"]
    assert main(["simulate", "--trace", str(tpath), *cluster, "--gpu", "a100", "--calibration", str(cal),
                 "--policy", "verl", "-o", str(tmp_path / "a100"), "--no-progress"]) == 0
    assert "fitted on gpu h100 (now a100)" in capsys.readouterr().err


def test_a_step_whose_every_request_aborted_is_left_out_with_a_warning(run, tmp_path, capsys):
    trace, steps = run
    mpath = _metrics(tmp_path / "m.jsonl", trace, steps, 1.4, 0.0)
    lines = mpath.read_text().splitlines()
    step5 = json.loads(lines[5])  # verl's metrics of a step with no response: lengths 0, the undefined means null
    step5["data"].update({"response_length/mean": 0.0, "response_length/max": 0, "response/aborted_ratio": 1.0,
                          "response_length_non_aborted/mean": None})
    lines[5] = json.dumps(step5)
    mpath.write_text("\n".join(lines) + "\n")
    cluster = ["--gpus", "16", "--tp", "4", "--gpu", "h100", "--model", "qwen2.5-7b", "--max-num-seqs", "64"]
    assert main(["calibrate", "--verl-metrics", str(mpath), "--trace", str(save(trace, tmp_path / "t.parquet")),
                 *cluster, "--json"]) == 0
    out, err = capsys.readouterr()
    warned = [w for w in err.splitlines() if w.startswith("tltsim: warning:")]
    assert len(warned) == 1 and "step(s) 5 (line 6): every request aborted" in warned[0], err
    cal = json.loads(out)
    assert any(n.startswith("steps 5: every request aborted") for n in cal["notes"])
    reasons = {r["step"]: r["reason"] for r in cal["per_step"]}
    assert reasons[5] == "every request aborted" and all(reasons[s] == "" for s in reasons if s != 5)
    assert cal["fitted_steps"] == 7 and cal["phases"]["rollout"] == pytest.approx(1.4, rel=1e-6)


def test_unrelated_metrics_cannot_be_saved(run, tmp_path, capsys):
    trace, steps = run
    other = synth("lognormal", 8, 16, 4, 16384, seed=9, median=3000)
    other = type(other)(other.df.assign(step=other.df.step + 1), other.meta)
    tpath = save(trace, tmp_path / "t.parquet")
    mpath = _metrics(tmp_path / "m.jsonl", other, steps, 1.5, 0.03)
    assert main(["validate", "--verl-metrics", str(mpath), "--trace", str(tpath), "--gpus", "16", "--tp", "4",
                 "--save-calibration", str(tmp_path / "cal.json")]) == 2
    captured = capsys.readouterr()
    assert "no calibration" in captured.err and "not of one run" in captured.err
    assert not (tmp_path / "cal.json").exists()


def _verl_yaml(path, **rollout):
    cfg = {"data": {"train_batch_size": 16, "max_response_length": 4096},
           "actor_rollout_ref": {"model": {"path": "/models/Qwen2.5-7B-Instruct"},
                                 "rollout": {"n": 4, "tensor_model_parallel_size": 4, "gpu_memory_utilization": 0.7,
                                             "max_num_seqs": 48,
                                             "response_length": "${oc.select:data.max_response_length,512}",
                                             "prompt_length": "${data.max_prompt_length}", **rollout}},
           "trainer": {"n_gpus_per_node": 8, "nnodes": 2}}
    path.mkdir(parents=True, exist_ok=True)
    (path / ".hydra").mkdir(exist_ok=True)
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    return path


def test_verl_config_sets_the_cluster_and_flags_override_it(run, tmp_path, capsys):
    v = read_verl_config(_verl_yaml(tmp_path / "out"))
    assert (v.gpus, v.tp, v.mem_fraction, v.max_running, v.group_size, v.response_length, v.model) == \
        (16, 4, 0.7, 48, 4, 4096, "qwen2.5-7b")
    trace, _ = run
    checked, notes = v.check_trace(trace)
    assert checked.meta.max_response_len == 4096 and notes == []
    tpath = save(trace, tmp_path / "t.parquet")
    assert main(["simulate", "--trace", str(tpath), "--verl-config", str(tmp_path / "out"), "--tp", "2",
                 "--policy", "verl", "-o", str(tmp_path / "sim"), "--no-progress"]) == 0
    c = Result.load(tmp_path / "sim").config
    assert (c["cluster"]["gpus"], c["cluster"]["tp"], c["cluster"]["max_running"], c["cost"]["mem_fraction"]) == (16, 2, 48, 0.7)
    assert main(["simulate", "--trace", str(tpath), "--verl-config", str(tmp_path / "out"), "--gpu-memory-utilization",
                 "0.5", "--policy", "verl", "-o", str(tmp_path / "sim2"), "--no-progress"]) == 0
    assert Result.load(tmp_path / "sim2").config["cost"]["mem_fraction"] == 0.5
    with pytest.raises(TltsimError, match="tensor_model_parallel_size cannot be resolved .*'TP' not found"):
        read_verl_config(_verl_yaml(tmp_path / "o3", tensor_model_parallel_size="${oc.env:TP}"))
    _, notes = read_verl_config(_verl_yaml(tmp_path / "o4", n=8)).check_trace(trace)
    assert notes and "rollout.n = 8 but the trace has groups of 4" in notes[0]


def test_metrics_from_a_wandb_csv_and_bad_lines(tmp_path):
    csv = tmp_path / "w.csv"
    csv.write_text("Step,run-1 - timing_s/gen,run-1 - timing_s/gen__MIN,run-1 - response_length/mean\n"
                   "1,10.5,10.0,300\n2,,,310\n3,12.0,11.0,320\n")
    m = read_metrics(csv)
    assert m.index.tolist() == [1, 3] and m.gen_s.tolist() == [10.5, 12.0] and m.len_mean.tolist() == [300, 320]
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"step": 1, "data": {"timing_s/gen": 3.0}}\n{"step": 2, "data": {"timing_s/gen": "fast"}}\n')
    with pytest.raises(TltsimError, match=r"b\.jsonl, line 2, key 'timing_s/gen': 'fast' is not a number"):
        read_metrics(bad)
    bad.write_text('{"step": 0, "data": {"val/acc": 1}}\n')
    with pytest.raises(TltsimError, match="no line has 'timing_s/gen'"):
        read_metrics(bad)


def test_the_shipped_example_calibrates_to_its_stated_factor(tmp_path, capsys):
    ex = ROOT / "examples" / "verl"
    trace = tmp_path / "run.parquet"
    assert main(["trace", "convert", str(ex / "rollout"), str(trace), "--tokenizer", str(ex / "tokenizer")]) == 0
    cal = tmp_path / "cal.json"
    assert main(["validate", "--verl-metrics", str(ex / "metrics.jsonl"), "--trace", str(trace),
                 "--verl-config", str(ex / "run"), "--gpu", "h100", "--json", "--save-calibration", str(cal)]) == 0
    out = json.loads(capsys.readouterr().out.split("\n", 1)[1])  # after convert's line
    assert main(["compare", "--trace", str(trace), "--verl-config", str(ex / "run"), "--gpu", "h100", "--calibration",
                 str(cal), "--policies", "verl", "-o", str(tmp_path / "cmp"), "--no-report", "--no-progress"]) == 0
    validated = np.mean([r["calibrated_step_s"] for r in out["per_step"]])  # once 7.138 against compare's 6.848
    assert Result.load(tmp_path / "cmp" / "verl").summary["mean_step_s"] == pytest.approx(validated, rel=0.005)
    p = out["phases"]  # make_examples.py: FACTOR = 1.3 on every phase, the simulator's 1 s reward x 1.3
    assert all(abs(p[k] / 1.3 - 1) < 0.05 for k in ("rollout", "train", "sync")) and not out["notes"]
    assert out["reward_s"] == pytest.approx(1.3, rel=0.1) and p["rollout_fixed_s"] == 0 and p["other_s"] < 0.01


def test_a_calibration_of_another_format_is_refused_with_what_to_do(tmp_path, capsys):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format": "tltsim.analysis.calibration/1", "speed_factor": 1.3}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "tltsim.analysis.calibration/2", "phases": {"rollout": "fast"}, "reward_s": 1}))
    trace = save(synth("dapo", 1, 4, 2, 512, seed=0), tmp_path / "t.parquet")
    for path, says in ((old, "a calibration of another tltsim"), (bad, "are not all numbers")):
        assert main(["simulate", "--trace", str(trace), "--gpus", "4", "--tp", "2", "--calibration", str(path),
                     "-o", str(tmp_path / "out"), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert says in err and "--save-calibration" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
