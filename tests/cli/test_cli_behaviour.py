"""What the CLI says besides errors: warnings, help, version, a closed pipe, no bars in a log, what the seed does."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from importlib.metadata import version

import pandas as pd
import pytest

from tests.cli.conftest import CLUSTER, ROOT, tltsim
from tltsim.cli import main
from tltsim.cli.sim_cmd import compare
from tltsim.config import ClusterConfig, SimConfig
from tltsim.policies import make_policy, policy_names
from tltsim.core.records import Result
from tltsim.sim.simulator import simulate
from tltsim.trace import load


def run(capsys, argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_step_range_past_the_trace_is_clipped_with_one_warning(tiny, tmp_path, capsys):
    rc, _, err = run(capsys, ["simulate", "--trace", tiny, *CLUSTER, "--steps", "1:100", "-o", tmp_path / "o"])
    assert rc == 0 and err == "tltsim: warning: --steps 1:100: the trace has steps 0..2; running steps 1..2 (2 steps)\n"
    assert Result.load(tmp_path / "o").steps["step"].tolist() == [1, 2]
    rc, _, err = run(capsys, ["simulate", "--trace", tiny, *CLUSTER, "--steps", "1:3", "-o", tmp_path / "o"])
    assert rc == 0 and err == ""


def test_a_knob_that_does_nothing_is_one_warning(tiny, tmp_path, capsys):
    argv = ["compare", "--trace", tiny, *CLUSTER, "--policies", "longest-first", "--no-report", "-o", tmp_path / "o"]
    rc, _, err = run(capsys, [*argv, "--knob", "noise=0.5"])  # compare builds the policy twice: warned once
    assert rc == 0 and err == ("tltsim: warning: policy 'longest-first': knob noise = 0.5 is ignored unless "
                               "predictor = 'oracle'\n")
    rc, _, err = run(capsys, [*argv, "--knob", "noise=0.5", "--knob", "predictor=oracle"])
    assert rc == 0 and err == ""


def test_compare_gives_each_policy_the_knobs_it_takes(tiny, tmp_path, capsys):
    """verl, the baseline, takes no knob: a knob goes to the policies that take it, and one that none of them
    takes is refused in one line."""
    argv = ["compare", "--trace", tiny, *CLUSTER, "--no-report", "-o", tmp_path / "o"]
    rc, _, err = run(capsys, [*argv, "--policies", "verl,tlt,partial", "--knob", "threshold=3", "--knob", "ratio=1.5"])
    assert rc == 0 and err == ""
    knobs = {p: Result.load(tmp_path / "o" / p).config["policy_knobs"] for p in ("verl", "tlt", "partial")}
    assert knobs["verl"] == {} and knobs["tlt"]["threshold"] == 3 and knobs["partial"]["ratio"] == 1.5
    assert "ratio" not in knobs["tlt"] and "threshold" not in knobs["partial"]
    rc, _, err = run(capsys, [*argv, "--policies", "verl,partial", "--knob", "threshold=3"])
    assert rc == 2 and err == ("tltsim: error: --knob threshold: no policy compared takes it; `tltsim policies verl "
                               "partial` lists their knobs\n")


def test_bare_commands_version_and_help():
    bare = tltsim()
    assert bare.returncode == 0 and bare.stdout.startswith("usage: tltsim") and "simulate" in bare.stdout
    assert tltsim("--version").stdout == f"tltsim {version('tltsim')}\n"
    group = tltsim("trace")
    assert group.returncode == 0 and "stats" in group.stdout and "trace_command" not in group.stdout + group.stderr
    sim = tltsim("simulate", "--help").stdout.replace("\n", " ")
    assert " ".join(sim.split()).count("(default: ") >= 5  # the cluster flags show their defaults
    assert all(name in "".join(sim.split()) for name in policy_names())
    assert "`tltsim simulate --help` lists them" in (ROOT / "docs" / "cli.md").read_text()


def test_a_closed_pipe_ends_quietly(tiny):
    proc = subprocess.Popen([sys.executable, "-m", "tltsim", "trace", "stats", str(tiny)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written, as `| head -1` after its line
    err = proc.stderr.read()
    assert proc.wait() == 128 + 13 and err == b""


def test_no_progress_bars_when_stderr_is_not_a_terminal(tiny, tmp_path):
    r = tltsim("simulate", "--trace", tiny, "--gpus", "8", "--tp", "2", "-o", tmp_path / "o")
    assert r.returncode == 0 and r.stderr == ""


@pytest.fixture(scope="module")
def seeded(tiny):
    cfg = SimConfig(trace=str(tiny), policy="tlt", cluster=ClusterConfig(gpus=8, tp=2, max_running=16),
                    policy_knobs={"threshold": 8})
    return lambda **kw: simulate(load(tiny), replace(cfg, **kw), make_policy("tlt", cfg.policy_knobs))


def test_the_seed_changes_nothing_on_the_default_fast_path_as_help_says(seeded):
    fast = [seeded(seed=s) for s in (0, 1, 2)]
    assert (fast[0].timeline["state"] == "spec_decode").any()  # TLT speculated: there was something to draw
    for other in fast[1:]:
        pd.testing.assert_frame_equal(fast[0].timeline, other.timeline)
        assert fast[0].summary == other.summary
    exact = [seeded(seed=s, exact=True) for s in (0, 1)]
    assert exact[0].summary["makespan_s"] != exact[1].summary["makespan_s"]
    assert "so there the seed changes nothing" in " ".join(tltsim("simulate", "--help").stdout.split())


def test_compare_on_several_processes_writes_the_same_bytes_as_one_after_the_other(tiny, tmp_path):
    """compare runs its policies on a process each core (here 2), each seeded by its own config: the same files,
    byte for byte, and the same rows, as one process running them in turn."""
    cfg = SimConfig(trace=str(tiny), cluster=ClusterConfig(gpus=8, tp=2, max_running=16))
    policies = ["verl", "tlt", "partial", "async"]
    rows = {w: compare(load(tiny), cfg, policies, tmp_path / str(w), False, workers=w) for w in (1, 2)}
    assert rows[1] == rows[2] and [r["policy"] for r in rows[2]] == policies
    files = {w: sorted(p.relative_to(tmp_path / str(w)) for p in (tmp_path / str(w)).rglob("*") if p.is_file())
             for w in (1, 2)}
    assert files[1] == files[2] and len(files[1]) >= 4 * 6
    assert all((tmp_path / "1" / f).read_bytes() == (tmp_path / "2" / f).read_bytes() for f in files[1])


def test_compare_forks_no_process_while_a_pools_threads_run(tiny, tmp_path, capsys, monkeypatch):
    """A process forked while another thread holds a lock (an import's, one pickling a task) inherits it held: a
    compare whose runs were forked while the drift rows' pool fed its worker hung in a run's parquet write. Every
    fork of a compare that computes the drift's rows beside its runs comes while no pool's thread runs."""
    import os
    import threading
    from concurrent.futures import process

    forks = []
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # a run a core: both policies on the pool beside the drift's
    monkeypatch.setattr(os, "fork", lambda fork=os.fork: (forks.append([
        t.name for t in threading.enumerate()
        if isinstance(t, process._ExecutorManagerThread) or t.name == "QueueFeederThread"]), fork())[1])
    rc, out, _ = run(capsys, ["compare", "--trace", tiny, *CLUSTER, "--policies", "verl,tlt", "--json",
                              "--no-report", "-o", tmp_path / "o"])
    assert rc == 0 and '"drift_sensitivity"' in out
    assert len(forks) == 3 and forks == [[]] * 3  # the drift's worker and one a policy


def test_compare_runs_where_forkserver_is_the_default_start_method(tiny, tmp_path):
    """Python 3.14 makes forkserver the default: compare's pool forks all the same, so its workers' parent is the
    compare (end_with would end a worker of the server at once, and the pool would break)."""
    code = ("import multiprocessing, sys; multiprocessing.set_start_method('forkserver'); "
            "from tltsim.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "compare", "--trace", str(tiny), *CLUSTER, "--policies",
                           "verl,tlt", "--no-report", "-o", str(tmp_path / "o")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if p.is_dir()) == ["tlt", "verl"]
