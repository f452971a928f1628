"""Every bad input the CLI can be given: exit 2, one line on stderr, no traceback, nothing left behind.

Each case of CASES builds its command line in a fresh sandbox directory that holds a file, a user's
directory, TOML files that are not UTF-8 and damaged copies of a result; `fails` runs it and checks the
line and that the sandbox is byte for byte as it was.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import CLUSTER, tltsim
from tltsim.cli import main


def sandbox(root: Path, result: Path, trace: Path) -> Path:
    root.mkdir()
    (root / "file.txt").write_text("a user's file\n")
    (root / "userdir").mkdir()
    (root / "userdir" / "notes.txt").write_text("a user's notes\n")
    (root / "dir.csv").mkdir()  # a directory named like a file
    (root / "bad.toml").write_bytes(b'trace = "t.parquet"\n# caf\xe9 in Latin-1\n')
    (root / "badgpu.toml").write_bytes(b'name = "H100 \xff"\n')
    for name, damage in DAMAGE.items():
        shutil.copytree(result, root / name)
        damage(root / name)
    sweep = ('[base]\ntrace = "{}"\n[base.cluster]\ngpus = 2\ntp = 1\ngpu = "a100"\nmodel = "{}"\n'
             '[grid]\nseed = [0, 1]\n')
    (root / "sweep.toml").write_text(sweep.format(trace, "qwen2.5-7b"))
    (root / "sweep_too_big.toml").write_text(sweep.format(trace, "llama-3.3-70b"))
    return root


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _scramble(path: Path) -> None:  # the same size, not Parquet any more: its middle third zeroed
    data = bytearray(path.read_bytes())
    third = len(data) // 3
    data[third: 2 * third] = bytes(third)
    path.write_bytes(bytes(data))


DAMAGE = {  # copies of a complete result, each damaged one way
    "truncated_parquet": lambda d: _truncate(d / "timeline.parquet"),
    "scrambled_parquet": lambda d: _scramble(d / "steps.parquet"),
    "truncated_summary": lambda d: _truncate(d / "summary.json"),
    "no_summary": lambda d: (d / "summary.json").unlink(),
    "no_manifest": lambda d: (d / "manifest.json").unlink(),
    "bad_manifest": lambda d: (d / "manifest.json").write_text('{"files": '),
}


def _sim(t):
    return ["simulate", "--trace", t, *CLUSTER, "--policy", "verl"]


def _cmp(t):
    return ["compare", "--trace", t, *CLUSTER, "--policies", "verl,tlt"]


def _synth(out):
    return ["trace", "synth", "dapo", "--steps", "1", "--prompts", "2", "--group", "2", "--max-len", "64",
            "--seed", "0", "-o", out]


# name -> (argv from the sandbox `s` and the trace `t`, what the line says)
CASES = {
    "config file not UTF-8": (lambda s, t: [*_sim(t), "--config", s / "bad.toml", "-o", s / "o"],
                              "bad.toml: not UTF-8 text (byte 25); save the TOML file as UTF-8"),
    "gpu file not UTF-8": (lambda s, t: [*_sim(t), "--gpu", s / "badgpu.toml", "-o", s / "o"],
                           "badgpu.toml: not UTF-8 text (byte 13)"),
    "simulate -o a file": (lambda s, t: [*_sim(t), "-o", s / "file.txt"], "file.txt: is a file, not a directory"),
    "simulate -o under a file": (lambda s, t: [*_sim(t), "-o", s / "file.txt" / "o"],
                                 "file.txt is a file, so nothing can be written under it"),
    "simulate -o a user's directory": (lambda s, t: [*_sim(t), "-o", s / "userdir"],
                                       "userdir: exists and is not a tltsim result"),
    "compare -o a file": (lambda s, t: [*_cmp(t), "-o", s / "file.txt"], "file.txt: is a file, not a directory"),
    "compare -o under a file": (lambda s, t: [*_cmp(t), "-o", s / "file.txt" / "o"], "so nothing can be written"),
    "compare -o a user's directory": (lambda s, t: [*_cmp(t), "-o", s / "userdir"], "not a tltsim result"),
    "trace synth -o a directory": (lambda s, t: _synth(s / "dir.csv"), "dir.csv: is a directory; name a file"),
    "trace synth -o under a file": (lambda s, t: _synth(s / "file.txt" / "t.csv"), "so nothing can be written"),
    "trace convert to a directory": (lambda s, t: ["trace", "convert", t, s / "dir.csv"], "dir.csv: is a directory"),
    "trace convert under a file": (lambda s, t: ["trace", "convert", t, s / "file.txt" / "t.csv"],
                                   "so nothing can be written"),
    "report -o a directory": (lambda s, t: ["report", s / "no_manifest", "-o", s / "userdir"],
                              "userdir: is a directory; name a file"),  # the output is checked first
    "report -o under a file": (lambda s, t: ["report", s / "truncated_summary", "-o", s / "file.txt" / "r.html"],
                               "file.txt is a file, so nothing can be written under it"),
    "report: truncated Parquet": (lambda s, t: ["report", s / "truncated_parquet", "-o", s / "r.html"],
                                  "timeline.parquet has"),
    "report: scrambled Parquet": (lambda s, t: ["report", s / "scrambled_parquet", "-o", s / "r.html"],
                                  "steps.parquet is damaged (its sha256 is not the one in manifest.json"),
    "report: truncated summary": (lambda s, t: ["report", s / "truncated_summary", "-o", s / "r.html"],
                                  "summary.json has"),
    "report: no summary": (lambda s, t: ["report", s / "no_summary", "-o", s / "r.html"],
                           "summary.json is missing (the manifest.json lists it)"),
    "report: no manifest": (lambda s, t: ["report", s / "no_manifest", "-o", s / "r.html"],
                            "not a complete result (no manifest.json"),
    "report: damaged manifest": (lambda s, t: ["report", s / "bad_manifest", "-o", s / "r.html"],
                                 "manifest.json is damaged"),
    "report of a compare directory": (lambda s, t: ["report", s, "-o", s.parent / "r.html"],
                                      "holds results (bad_manifest, no_summary, scrambled_parquet, truncated_parquet, "
                                      "truncated_summary), is not one; give those"),
    "report: no such directory": (lambda s, t: ["report", s / "nope", "-o", s / "r.html"], "nope: does not exist"),
    "bad value": (lambda s, t: ["simulate", "--gpus", "x", "-o", s / "o"],
                  "tltsim simulate: error: argument --gpus: invalid int value: 'x'; see `tltsim simulate --help`"),
    "bad choice": (lambda s, t: ["sweep", s / "sweep.toml", "--backend", "dask", "-o", s / "sw"],
                   "tltsim sweep: error: argument --backend: invalid choice: 'dask'"),
    "misspelt flag": (lambda s, t: [*_sim(t), "--polcy", "tlt", "-o", s / "o"],
                      "tltsim simulate: error: unrecognized argument(s): --polcy tlt; see `tltsim simulate --help`"),
    "missing argument": (lambda s, t: ["trace", "stats"],
                         "tltsim trace stats: error: the following arguments are required: file; "
                         "see `tltsim trace stats --help`"),
    "sweep metric": (lambda s, t: ["sweep", s / "sweep.toml", "-o", s / "sw", "--metric", "speed", "--workers", "1"],
                     "--metric 'speed' is not a summary metric; choose one of makespan_s"),
    "sweep whose runs fail": (lambda s, t: ["sweep", s / "sweep_too_big.toml", "-o", s / "sw", "--workers", "1",
                                            "--no-progress"], "does not fit"),
    "real run --model missing": (lambda s, t: ["real", "run", "--model", s / "missing", "-o", s / "run"],
                                 "missing': neither a save_pretrained directory, a known model nor a preset"),
}


def tree(root: Path) -> dict:
    """Every path under `root` with its bytes (None for a directory)."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def fails(capsys, argv) -> str:
    """Run `tltsim argv`; assert exit 2, nothing on stdout, exactly one line on stderr; return that line."""
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's errors exit
        rc = e.code
    out, err = capsys.readouterr()
    assert (rc, out) == (2, ""), (rc, out, err)
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    return err.rstrip("\n")


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(case, tmp_path, tiny, result_dir, capsys):
    if case.startswith("real "):
        pytest.importorskip("torch")
    argv, says = CASES[case]
    root = sandbox(tmp_path / "sandbox", result_dir, tiny)
    before = tree(root)
    line = fails(capsys, argv(root, tiny))
    assert says in line
    assert tree(root) == before, "a failed command changed its sandbox"


def test_in_a_real_process_too(tmp_path, tiny, result_dir):
    root = sandbox(tmp_path / "sandbox", result_dir, tiny)
    for case in ("misspelt flag", "config file not UTF-8", "report: truncated Parquet"):
        argv, says = CASES[case]
        r = tltsim(*argv(root, tiny))
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
