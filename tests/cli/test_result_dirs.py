"""A result directory holds one complete run: written whole, swapped in, checked on reading, even when killed."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cli.conftest import CLUSTER, start
from tltsim.cli import main
from tltsim.core.errors import TltsimError
from tltsim.core.io import atomic_dir, is_temporary
from tltsim.core.records import Result
from tltsim.trace import save, synth


def files(root: Path) -> dict:
    """Every file under `root` with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_plain_run_replaces_an_exact_run_whole(tiny, tmp_path):
    out = tmp_path / "o"
    assert main(["simulate", "--trace", str(tiny), *CLUSTER, "--policy", "tlt", "--exact", "-o", str(out)]) == 0
    assert (out / "iterations.parquet").exists()
    assert main(["simulate", "--trace", str(tiny), *CLUSTER, "--policy", "verl", "-o", str(out)]) == 0
    assert not (out / "iterations.parquet").exists() and Result.load(out).iterations is None
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no temporary left beside it


def test_an_in_place_save_drops_the_frames_it_does_not_write(tiny, tmp_path):
    out = tmp_path / "o"
    assert main(["simulate", "--trace", str(tiny), *CLUSTER, "--policy", "tlt", "--exact", "-o", str(out)]) == 0
    res = Result.load(out)
    res.iterations = None
    res.save(out)
    assert not (out / "iterations.parquet").exists() and Result.load(out).iterations is None


def test_a_result_directory_that_is_not_one_result_is_refused_and_kept(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "thesis.tex").write_text("years of work")
    with pytest.raises(TltsimError, match="not a tltsim result .*; it is left as is"):
        with atomic_dir(target, lambda p: False):
            raise AssertionError("not reached: refused before anything is written")
    assert [p.name for p in target.iterdir()] == ["thesis.tex"]
    with pytest.raises(RuntimeError):  # a failure inside leaves the old directory and no temporary
        with atomic_dir(target, lambda p: True) as tmp:
            (tmp / "half").write_text("x")
            raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"] and (target / "thesis.tex").exists()




COMMANDS = {  # the old result, then the new one written over it (different files, so a mix would show)
    "simulate": (["simulate", *CLUSTER, "--policy", "verl"], ["simulate", *CLUSTER, "--policy", "tlt", "--exact"]),
    "compare": (["compare", *CLUSTER, "--policies", "verl", "--no-report"],  # a report says when it was made:
                ["compare", *CLUSTER, "--policies", "tlt,verl", "--exact", "--no-report"]),  # not byte-stable
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_killed_at_any_moment_the_directory_is_the_old_result_or_the_new_one(command, tmp_path):
    trace = save(synth("dapo", steps=2, prompts=4, group=4, max_len=1024, seed=1), tmp_path / "t.parquet")
    old_argv, new_argv = ([*argv, "--trace", trace] for argv in COMMANDS[command])
    out, reference = tmp_path / "out", tmp_path / "reference"
    t0 = time.monotonic()
    proc = start([*new_argv, "-o", reference])
    proc.join()
    duration = time.monotonic() - t0
    assert proc.exitcode == 0
    new = files(reference)

    def write_old():
        assert main([str(a) for a in [*old_argv, "-o", out]]) == 0
        return files(out)

    old = write_old()
    seen = []
    kills = 10
    for i in range(kills + 1):  # from the start to the end of a run as long as the reference's; then one not killed
        proc = start([*new_argv, "-o", out])
        if i < kills:
            time.sleep(duration * i / (kills - 1))
            proc.kill()
        proc.join()
        now = files(out)
        assert now in (old, new), f"kill {i}: a mix of two runs"
        seen.append("new" if now == new else "old")
        dirs = [out] if command == "simulate" else [p for p in out.iterdir() if p.is_dir()]
        assert all(Result.load(d).summary for d in dirs)  # what report would read loads whole
        if now == new:
            write_old()
    assert seen[0] == "old" and seen[-1] == "new", seen
    assert main([str(a) for a in [*new_argv, "-o", out]]) == 0  # a complete run cleans the killed ones' temporaries
    assert not [p.name for p in tmp_path.iterdir() if is_temporary(p.name)]
