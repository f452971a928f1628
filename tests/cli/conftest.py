"""A tiny trace and a finished result to point the CLI at; `tltsim(...)` runs the CLI in a subprocess, `start(...)` in
a forked one (to kill it mid-work)."""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tltsim.cli import main
from tltsim.trace import save, synth

ROOT = Path(__file__).resolve().parents[2]
# 4 engines of 2 GPUs, 16 requests each at most: a 3-step trace of 96 responses simulates in milliseconds
CLUSTER = ["--gpus", "8", "--tp", "2", "--max-running", "16", "--no-progress"]


def tltsim(*argv, **kwargs) -> subprocess.CompletedProcess:
    """`python -m tltsim ARGV` with this checkout first on the path; text output captured."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "tltsim", *map(str, argv)], capture_output=True, text=True,
                          env=env, cwd=kwargs.pop("cwd", ROOT), **kwargs)


def _run(argv) -> None:
    os._exit(main([str(a) for a in argv]))


def start(argv):
    """`tltsim argv` in a forked process (this one's imports already done: the kill lands in the work)."""
    proc = multiprocessing.get_context("fork").Process(target=_run, args=(argv,))
    proc.start()
    return proc


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Path:
    return save(synth("dapo", steps=3, prompts=8, group=4, max_len=2048, seed=1),
                tmp_path_factory.mktemp("trace") / "tiny.parquet")


@pytest.fixture(scope="session")
def result_dir(tiny, tmp_path_factory) -> Path:
    """A complete `simulate` result (verl) that tests copy and damage."""
    out = tmp_path_factory.mktemp("result") / "verl"
    assert main(["simulate", "--trace", str(tiny), *CLUSTER, "--policy", "verl", "-o", str(out)]) == 0
    return out
