"""No `--help`, no simulator command and no bad input to a real command imports torch or transformers (4-12 s on a
CPU): torch is loaded only where a real command runs, once its input is checked."""
import json
import os
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


# Bad input to `tltsim real`, each refused by the checks main runs before it imports torch (real.checks): one line,
# exit 2, torch and transformers not imported. "fetched" runs with a cache holding a stand-in for smollm2-135m (its
# config and tokenizer files, no weights: the checks read no more), "empty" with an empty cache.
REAL_BAD = [
    (["pretrain", "-o", "notes.txt"], "", "notes.txt: is a file, not a directory"),
    (["pretrain", "-o", "ckpt", "--batch-tokens", "100"], "", "batch_tokens 100: must hold the longest problem"),
    (["evaluate", "nope"], "", "target 'nope': neither a save_pretrained directory"),
    (["evaluate", "smollm2-135m"], "empty", "run `tltsim real model fetch smollm2-135m` first"),
    (["evaluate", "smollm2-135m"], "fetched", "smollm2-135m/tltsim_task.json: not found"),
    (["evaluate", "SHIPPED", "--device", "mps"], "", "--device 'mps': not a torch device"),
    (["profile", "-o", "notes.txt"], "", "notes.txt: exists and is not a file tltsim wrote"),
    (["profile", "-o", "p.csv", "--contexts", "-1"], "", "--contexts '-1': expected comma-separated positive"),
    (["profile", "-o", "p.csv", "--batches", "1,,4"], "", "--batches '1,,4': expected comma-separated positive"),
    (["profile", "-o", "p.csv", "--strategies", "1_1_9"], "", "verify=9 exceeds the 1 nodes"),
    (["profile", "-o", "p.csv", "--model", "nope"], "", "target 'nope': neither"),
    (["profile", "-o", "p.csv", "--model", "smollm2-135m"], "empty", "tltsim real model fetch smollm2-135m"),
    (["profile", "-o", "p.csv", "--task", "wordproblems"], "", "tiny-llama: no save_pretrained directory"),
    (["profile", "-o", "p.csv", "--drafter-checkpoint", "file.txt"], "", "file.txt: not a drafter checkpoint"),
    (["profile", "-o", "p.csv", "--drafter-checkpoint", "suffix"], "", "--drafter-checkpoint suffix: a profile times a drafter that trains"),
    (["run", "-o", "r", "--model", "nope"], "", "target 'nope': neither"),
    (["run", "-o", "r", "--model", "smollm2-135m"], "empty", "tltsim real model fetch smollm2-135m"),
    (["run", "-o", "r", "--task", "wordproblems"], "", "no tokenizer saved beside the model"),
    (["run", "-o", "r", "--resume"], "", "r: no run to resume"),
    (["run", "-o", "r", "--policy", "das", "--probe-static"], "", "policy 'das' trains no drafter"),
    (["run", "-o", "r", "--knob", "tuner=oracle"], "", "tuner 'oracle' needs the simulator's models"),
    (["run", "-o", "r", "--prompts", "1", "--workers", "2"], "", "prompts=1 < workers=2"),
    (["run", "-o", "r", "--drafter-checkpoint", "file.txt"], "", "file.txt: not a drafter checkpoint"),
    (["run", "-o", "r", "--answers", "userdir"], "", "userdir: not a run directory"),
    (["model", "fetch", "gpt-17"], "", "model 'gpt-17': not a known model"),
    (["model", "fetch", "smollm2-135m", "--cache", "file.txt/c"], "", "cannot write the model cache there"),
    (["drafter", "-o", "d.pt", "--model", "tiny-llama"], "", "tiny-llama: no save_pretrained directory"),
    (["drafter", "-o", "d.pt", "--model", "smollm2-135m"], "empty", "tltsim real model fetch smollm2-135m"),
    (["drafter", "-o", "d.pt", "--init", "file.txt"], "fetched", "file.txt: not a drafter checkpoint"),
    (["speed", "--model", "smollm2-135m", "--batches", "1,x"], "fetched", "--batches '1,x': expected"),
    (["speed", "--model", "smollm2-135m", "--batches", "10000"], "fetched", "--batches 10000: its KV cache"),
    (["speed", "--model", "smollm2-135m", "--drafters", "nope"], "fetched", "drafter nope: not shipped"),
    (["speed", "--model", "smollm2-135m", "--drafters", "shipped,shipped"], "fetched", "expected distinct"),
    (["speed", "--model", "smollm2-135m", "--strategy", "4_x"], "fetched", "4_x"),
    (["speed", "--model", "smollm2-135m"], "empty", "tltsim real model fetch smollm2-135m"),
    (["speed", "--model", "SHIPPED"], "", "no tokenizer saved beside the model"),
]
# Runs the cases in one interpreter, in the working directory it is given, and prints for each its exit status,
# its stderr and whether torch or transformers had been imported when it was refused.
REAL_CODE = r"""
import contextlib, io, json, os, sys
from real.settings import SHIPPED_TARGET
from tltsim.cli import main

cases, caches, seen = json.loads(sys.argv[1]), json.loads(sys.argv[2]), []
for argv, cache, _ in cases:
    os.environ["TLTSIM_CACHE"] = caches[cache]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
        rc = main(["real", *[str(SHIPPED_TARGET) if a == "SHIPPED" else a for a in argv]])
    seen.append([rc, out.getvalue(), err.getvalue(), [m for m in ("torch", "transformers") if m in sys.modules]])
print(json.dumps(seen))
"""


def test_real_bad_input_is_refused_before_torch_is_imported(tmp_path):
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "file.txt").write_text("not a checkpoint\n")
    (tmp_path / "userdir").mkdir()
    (tmp_path / "userdir" / "mine.txt").write_text("mine\n")
    fake = tmp_path / "fetched" / "models" / "smollm2-135m"  # a cache entry as `tltsim real model fetch` leaves it
    fake.mkdir(parents=True)
    shape = {"num_hidden_layers": 100_000, "num_key_value_heads": 3, "num_attention_heads": 9, "hidden_size": 576}
    (fake / "config.json").write_text(json.dumps(shape))  # layers no machine holds a KV cache of 10,000 rows for
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (fake / name).write_text("{}")
    (fake / "tltsim_model.json").write_text(json.dumps({"name": "smollm2-135m"}))
    (tmp_path / "empty").mkdir()
    caches = {"": str(tmp_path / "empty"), "empty": str(tmp_path / "empty"), "fetched": str(tmp_path / "fetched")}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", REAL_CODE, json.dumps(REAL_BAD), json.dumps(caches)],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    for (argv, _, says), (rc, stdout, stderr, loaded) in zip(REAL_BAD, json.loads(out.stdout)):
        assert (rc, stdout, loaded) == (2, "", []), (argv, rc, stdout, loaded, stderr)
        assert stderr.count("\n") == 1 and stderr.startswith("tltsim: error: ") and says in stderr, (argv, stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "fetched", "file.txt", "notes.txt", "userdir"]
