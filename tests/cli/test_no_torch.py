"""No `--help` and no simulator command imports torch or transformers (4-12 s on a CPU): torch is loaded only
where a real command runs."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Walks every (sub)command of both command lines (test_help_text's walk), asks each for --help, then runs a simulator command, all in
# one fresh interpreter, and prints which heavy modules were imported along the way.
CODE = r"""
import contextlib, io, json, sys
from tests.cli.test_help_text import _parsers  # the walk over both command lines' (sub)commands
from tltsim.cli import build_parser, main

commands = [list(path[1:]) for path, _ in _parsers(build_parser())]
for argv in commands:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv + ["--help"])
        except SystemExit as e:
            assert e.code in (0, None), (argv, e.code)
with contextlib.redirect_stdout(io.StringIO()):
    main(["trace", "stats", "traces/synthetic/dapo_like.parquet"])
    main(["simulate", "--trace", "traces/synthetic/dapo_like.parquet", "--steps", "0:1", "--gpus", "8", "-o", sys.argv[1]])
print(json.dumps({"commands": len(commands), "loaded": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def test_help_and_the_simulator_load_no_torch(tmp_path):
    out = subprocess.run([sys.executable, "-c", CODE, str(tmp_path / "sim")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["commands"] >= 20  # every command group and command was asked
    assert seen["loaded"] == []


def test_import_real_loads_nothing_until_its_api_is_used():
    """`import real` loads no torch; each name of its public API (real.API) then resolves to the object its
    module defines (real.generate: the engine's generate), loading torch only then."""
    code = ("import sys, importlib, real; before = 'torch' in sys.modules; "
            "same = all(getattr(real, n) is getattr(importlib.import_module(m), real._ALIASES.get(n, n)) "
            "for n, m in real.API.items()); "
            "print(before, same, real.generate.__module__, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["False", "True", "real.engine.generate", "True"]
