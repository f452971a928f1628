"""Sweeps: the grid in order, cache keys, identical tables for any worker count, resume after a kill, Ray."""
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tltsim.analysis import sweep
from tltsim.cli import main
from tltsim.core.errors import TltsimError
from tltsim.core.records import Result
from tltsim.analysis.sweep import load_spec, run_sweep, swept_keys


def write_spec(tmp_path, trace_file, body, name="sweep.toml"):
    path = tmp_path / name
    path.write_text(f'[base]\ntrace = "{trace_file}"\n[base.cluster]\ngpus = 8\ntp = 2\nmax_running = 16\n\n{body}')
    return path


GRID = """
[[grid]]
policy = ["verl"]
"cluster.gpus" = [4, 8]

[[grid]]
policy = ["tlt"]
"cluster.gpus" = [4, 8]
"policy_knobs.threshold" = [4, 8]
"""  # 2 + 4 = 6 runs


def test_grid_and_runs_expand_in_file_order(tmp_path, trace_file):
    spec = write_spec(tmp_path, trace_file, GRID + '\n[[runs]]\npolicy = "tlt"\ncluster = { gpus = 2 }\n')
    runs = load_spec(spec)
    got = [(r.config.policy, r.config.cluster.gpus, r.config.policy_knobs.get("threshold")) for r in runs]
    assert got == [("verl", 4, None), ("verl", 8, None),
                   ("tlt", 4, 4), ("tlt", 4, 8), ("tlt", 8, 4), ("tlt", 8, 8), ("tlt", 2, None)]
    assert all(r.config.cluster.tp == 2 and r.config.cluster.max_running == 16 for r in runs)
    assert runs[-1].overrides == {"policy": "tlt", "cluster.gpus": 2}
    assert len({r.key for r in runs}) == 7
    assert swept_keys(runs) == ["policy", "cluster.gpus", "policy_knobs.threshold"]


def test_base_from_a_config_file(tmp_path, trace_file):
    base = tmp_path / "base.toml"
    base.write_text(f'trace = "{trace_file}"\n[cluster]\ngpus = 8\ntp = 2\n')
    spec = tmp_path / "s.toml"
    spec.write_text(f'base = "{base}"\n[grid]\n"rl.reward_s" = [0.5, 2.0]\n')
    runs = load_spec(spec)
    assert [r.config.rl.reward_s for r in runs] == [0.5, 2.0] and runs[0].config.cluster.gpus == 8


def test_cache_key_follows_config_and_trace_content(tmp_path, trace_file):
    spec = write_spec(tmp_path, trace_file, '[grid]\npolicy = ["verl", "verl", "tlt"]\n')
    a, b, c = load_spec(spec)
    assert a.key == b.key != c.key
    data = trace_file.read_bytes()
    trace_file.write_bytes(data + b"\0")  # same config, different trace bytes
    assert load_spec(spec)[0].key != a.key
    trace_file.write_bytes(data)
    assert load_spec(spec)[0].key == a.key


@pytest.mark.parametrize("body, message", [
    ("[grid]\npolicy = \"verl\"\n", 'grid] "policy" must be a non-empty list'),
    ("[grid]\n\"cluster.gpus\" = [3]\n", "run 0 (cluster.gpus=3): cluster: gpus = 3 is not a multiple of tp = 2"),
    ("[grid]\n\"cluster.gpu_count\" = [8]\n", "run 0 (cluster.gpu_count=8)"),
    ("[grid]\n\"policy_knobs.threshold\" = [8]\n", "run 0 (policy_knobs.threshold=8): policy 'verl'"),
    ("[grid]\npolicy = [\"nope\"]\n", "unknown policy 'nope'"),
    ("[grid]\ntrace = [\"missing.parquet\"]\n", "trace 'missing.parquet' does not exist"),
    ("[grids]\npolicy = [\"verl\"]\n", "unknown top-level key(s) grids"),
    ("", "no runs"),
])
def test_bad_sweep_files_name_the_run_and_the_fix(tmp_path, trace_file, body, message):
    with pytest.raises(TltsimError) as e:
        load_spec(write_spec(tmp_path, trace_file, body))
    assert message in str(e.value) and str(tmp_path / "sweep.toml") in str(e.value)


@pytest.fixture
def grid_runs(tmp_path, trace_file):
    return load_spec(write_spec(tmp_path, trace_file, GRID))


def test_tables_identical_with_one_and_two_workers(grid_runs, tmp_path):
    one = run_sweep(grid_runs, tmp_path / "w1", workers=1, progress=False)
    two = run_sweep(grid_runs, tmp_path / "w2", workers=2, progress=False)
    pd.testing.assert_frame_equal(one.table, two.table)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "w1" / "results.parquet"),
                                  pd.read_parquet(tmp_path / "w2" / "results.parquet"))
    assert (tmp_path / "w1" / "results.csv").read_text() == (tmp_path / "w2" / "results.csv").read_text()
    t = one.table
    assert t["run"].tolist() == [r.key for r in grid_runs]  # the file's order
    assert t["policy"].tolist() == ["verl"] * 2 + ["tlt"] * 4
    assert t["policy_knobs.threshold"].tolist()[2:] == [4, 8, 4, 8] and t["policy_knobs.threshold"].isna()[:2].all()
    assert str(t["policy_knobs.threshold"].dtype) == "Int64"
    assert t["result.steps"].tolist() == [3] * 6 and t["engines"].tolist() == [2, 4, 2, 2, 4, 4]
    # each row's metrics are those of its saved result
    r = Result.load(tmp_path / "w2" / "runs" / grid_runs[3].key)
    assert t.loc[3, "makespan_s"] == r.summary["makespan_s"]
    assert sorted(two.executed) == sorted(r.key for r in grid_runs) and two.reused == []


class Killed(Exception):
    pass


def test_interrupted_sweep_resumes_with_only_the_remaining_runs(grid_runs, tmp_path, monkeypatch):
    real = sweep.simulate
    calls = []

    def dies_at_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise Killed
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep, "simulate", dies_at_third)
    with pytest.raises(Killed):
        run_sweep(grid_runs, tmp_path / "out", workers=1, progress=False)
    runs_dir = tmp_path / "out" / "runs"
    assert sorted(p.name for p in runs_dir.iterdir()) == sorted(r.key for r in grid_runs[:2])
    assert not (tmp_path / "out" / "results.parquet").exists()

    monkeypatch.setattr(sweep, "simulate", real)
    resumed = run_sweep(grid_runs, tmp_path / "out", workers=1, progress=False)
    assert resumed.reused == [r.key for r in grid_runs[:2]]
    assert resumed.executed == [r.key for r in grid_runs[2:]]
    fresh = run_sweep(grid_runs, tmp_path / "fresh", workers=1, progress=False)
    pd.testing.assert_frame_equal(resumed.table, fresh.table)
    again = run_sweep(grid_runs, tmp_path / "out", workers=2, progress=False)
    assert again.executed == [] and len(again.reused) == 6


def test_a_run_killed_while_saving_leaves_no_result(grid_runs, tmp_path, monkeypatch):
    real_save = Result.save

    def dies_after_timeline(self, out_dir):
        Path(out_dir).mkdir(parents=True)
        self.timeline.to_parquet(Path(out_dir) / "timeline.parquet")
        raise Killed

    monkeypatch.setattr(Result, "save", dies_after_timeline)
    with pytest.raises(Killed):
        run_sweep(grid_runs[:1], tmp_path / "out", workers=1, progress=False)
    runs_dir = tmp_path / "out" / "runs"
    assert not (runs_dir / grid_runs[0].key).exists()
    assert [p.name.startswith(f".{grid_runs[0].key}.") for p in runs_dir.iterdir()] == [True]  # hidden, partial
    monkeypatch.setattr(Result, "save", real_save)
    outcome = run_sweep(grid_runs[:1], tmp_path / "out", workers=1, progress=False)
    assert outcome.executed == [grid_runs[0].key]
    assert [p.name for p in runs_dir.iterdir()] == [grid_runs[0].key]  # the partial one is gone


def _complete_runs(runs_dir: Path) -> list[str]:
    return [p.name for p in runs_dir.iterdir() if not p.name.startswith(".")] if runs_dir.exists() else []


@pytest.mark.slow
def test_sweep_process_killed_and_restarted_runs_only_what_did_not_finish(tmp_path, trace_file):
    # exact mode makes each run take a fraction of a second, so the kill lands mid-sweep
    spec = write_spec(tmp_path, trace_file, '[grid]\nexact = [true]\npolicy = ["tlt"]\n'
                      '"policy_knobs.threshold" = [2, 3, 4, 5, 6, 7, 8, 9]\n')
    runs = load_spec(spec)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tltsim", "sweep", str(spec), "-o", str(out), "--workers", "1", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not _complete_runs(out / "runs") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = _complete_runs(out / "runs")
    assert 1 <= len(done) < len(runs), "the kill should land after the first run and before the last"
    for key in done:  # whatever is visible is a complete result
        Result.load(out / "runs" / key)
    resumed = run_sweep(runs, out, workers=2, progress=False)
    assert sorted(resumed.reused) == sorted(done)
    assert sorted(resumed.executed) == sorted(r.key for r in runs if r.key not in done)


def test_bad_backend_or_workers(grid_runs, tmp_path):
    with pytest.raises(TltsimError, match="backend 'dask': choose one of local, ray"):
        run_sweep(grid_runs, tmp_path / "out", backend="dask", progress=False)
    with pytest.raises(TltsimError, match="workers = 0: must be >= 1"):
        run_sweep(grid_runs, tmp_path / "out", workers=0, progress=False)


def test_ray_missing_is_a_one_line_message(grid_runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(TltsimError, match=r"needs Ray: pip install tltsim\[sweep\]"):
        run_sweep(grid_runs[:2], tmp_path / "out", backend="ray", progress=False)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install tltsim[sweep])")
def test_ray_backend_on_a_local_instance_matches_local(grid_runs, tmp_path):
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = run_sweep(grid_runs, tmp_path / "ray", backend="ray", progress=False)
    finally:
        ray.shutdown()
    local = run_sweep(grid_runs, tmp_path / "local", workers=1, progress=False)
    pd.testing.assert_frame_equal(on_ray.table, local.table)
    assert sorted(on_ray.executed) == sorted(r.key for r in grid_runs)


def test_sweep_cli_prints_table_and_writes_outputs(tmp_path, trace_file, capsys):
    spec = write_spec(tmp_path, trace_file, '[grid]\n"cluster.gpus" = [4, 8]\n"rl.reward_s" = [0.5, 1.0]\n')
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "-o", str(out), "--workers", "1", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "cluster.gpus" in text and "rl.reward_s" in text and "mean_step_s" in text
    assert "4 run(s) simulated, 0 reused" in text
    assert (out / "sweep.png").stat().st_size > 5000
    assert len(pd.read_csv(out / "results.csv")) == 4
    assert main(["sweep", str(spec), "-o", str(out), "--no-progress", "--metric", "idle_fraction"]) == 0
    assert "0 run(s) simulated, 4 reused" in capsys.readouterr().out
    assert main(["sweep", str(spec), "-o", str(out), "--no-progress", "--metric", "nope"]) == 2
    assert "--metric 'nope' is not a summary metric" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted(str(p) for p in Path("examples/sweeps").glob("*.toml") if p.name != "base.toml"))
def test_example_sweep_files_parse(path):
    runs = load_spec(path)
    assert len(runs) > 1 and len({r.key for r in runs}) == len(runs) and swept_keys(runs)


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is `pid`, from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _alive(pids) -> list[int]:
    alive = []
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(p)
    return alive


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_killing_the_sweep_ends_its_pool_workers(tmp_path):
    from tltsim.trace import save, synth

    # runs of several seconds each (exact mode, long responses), so the workers are mid-run at the kill
    trace = save(synth("dapo", steps=4, prompts=32, group=8, max_len=16384, seed=1), tmp_path / "long.parquet")
    spec = write_spec(tmp_path, trace, '[grid]\nexact = [true]\npolicy = ["tlt"]\n'
                      '"policy_knobs.threshold" = [8, 16, 32, 64]\n')
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tltsim", "sweep", str(spec), "-o", str(out), "--workers", "2", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(workers := _children(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert len(workers) == 2, "the pool did not start"
    time.sleep(0.5)  # into their first runs
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while _alive(workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(workers), "pool workers outlived the sweep"
    assert _complete_runs(out / "runs") == []  # nobody finished a run after the sweep was gone


def test_a_damaged_cached_run_is_run_again(grid_runs, tmp_path):
    first = run_sweep(grid_runs[:2], tmp_path / "out", workers=1, progress=False)
    damaged = tmp_path / "out" / "runs" / first.executed[0] / "steps.parquet"
    damaged.write_bytes(damaged.read_bytes()[:100])
    again = run_sweep(grid_runs[:2], tmp_path / "out", workers=1, progress=False)
    assert again.executed == first.executed[:1] and again.reused == first.executed[1:]
    pd.testing.assert_frame_equal(again.table, first.table)
