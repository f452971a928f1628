"""How long every `tltsim real` subcommand takes to refuse bad input: flag values, paths, models, tasks, drafters.

    python benchmarks/bench_bad_input.py | tee benchmarks/results/bench_bad_input.txt

Each case is a command line with one thing wrong, run as `python -m tltsim real ...` in a fresh process (a
Python start and tltsim's own imports included: about 0.4 s on 2 CPU cores), in a sandbox directory that holds a
user's file (notes.txt), a file that is no checkpoint (file.txt), a user's directory (userdir/) and a copy of the
shipped gcd target (target/). It must exit 2 with nothing on stdout and one line on stderr, `tltsim: error: ...`
or the argument parser's. It is timed from the start of the process to its exit (wall seconds), and by the CPU
seconds the process used (user + system: what a busy machine changes least). Target: every refusal under 2 s, so
none waits for torch (3 s to import on 2 idle cores) or a model to load.

The cases marked "empty cache" run with $TLTSIM_CACHE set to an empty directory; the others with the user's
cache, where those CASES marks FETCHED need smollm2-135m fetched (`tltsim real model fetch smollm2-135m`; they
are skipped, and said so, where it is not). Exit status 1 where a case is not refused as it should be; the timings
are the data: run on an idle machine.
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from real.models import hub  # noqa: E402  (torch-free)

KNOWN = "smollm2-135m"
EMPTY = "empty cache"
FETCHED = "fetched"

# (the words after `tltsim real`, the cache it runs with: None for the user's, EMPTY, or FETCHED: the user's,
# which must hold smollm2-135m)
CASES = [
    ("pretrain -o notes.txt", None),
    ("pretrain -o userdir", None),
    ("pretrain -o file.txt/ckpt", None),
    ("pretrain -o ckpt --batch-tokens 100", None),
    ("pretrain -o ckpt --steps 0", None),
    ("pretrain -o ckpt --preset huge", None),
    ("pretrain -o ckpt --seconds nan", None),
    ("evaluate nope", None),
    ("evaluate userdir", None),
    ("evaluate smollm2-135m", EMPTY),
    ("evaluate smollm2-135m", FETCHED),
    ("evaluate target --device banana", None),
    ("evaluate target --device cuda", None),
    ("evaluate target --problems 0", None),
    ("profile -o notes.txt", None),
    ("profile -o userdir", None),
    ("profile -o p.csv --batches 0,1", None),
    ("profile -o p.csv --batches x", None),
    ("profile -o p.csv --contexts -1", None),
    ("profile -o p.csv --train-rows ,", None),
    ("profile -o p.csv --strategies 4_x", None),
    ("profile -o p.csv --strategies 1_1_9", None),
    ("profile -o p.csv --model nope", None),
    ("profile -o p.csv --model userdir", None),
    ("profile -o p.csv --model smollm2-135m", EMPTY),
    ("profile -o p.csv --task wordproblems", None),
    ("profile -o p.csv --drafter-checkpoint file.txt", None),
    ("profile -o p.csv --drafter-checkpoint nope.pt", None),
    ("profile -o p.csv --drafter-checkpoint userdir", None),
    ("profile -o p.csv --drafter-checkpoint suffix", None),
    ("profile -o p.csv --drafter-checkpoint shipped", None),
    ("profile -o file.txt --drafter-checkpoint file.txt", None),
    ("profile -o p.csv --device banana", None),
    ("profile -o p.csv --device mps", None),
    ("profile -o p.csv --device cuda", None),
    ("profile -o p.csv --repeats 0", None),
    ("run -o r --model nope", None),
    ("run -o r --model userdir", None),
    ("run -o r --model smollm2-135m", EMPTY),
    ("run -o notes.txt", None),
    ("run -o userdir", None),
    ("run -o r --resume", None),
    ("run -o r --task wordproblems", None),
    ("run -o r --task longtail --model target", None),
    ("run -o r --policy das --probe-static", None),
    ("run -o r --policy das --drafter-checkpoint file.txt", None),
    ("run -o r --policy verl --knob threshold=4", None),
    ("run -o r --knob nope=1", None),
    ("run -o r --knob threshold", None),
    ("run -o r --knob tuner=oracle", None),
    ("run -o r --knob arms=x", None),
    ("run -o r --prompts 1 --workers 2", None),
    ("run -o r --drafter-checkpoint file.txt", None),
    ("run -o r --drafter-checkpoint nope.pt", None),
    ("run -o r --answers userdir", None),
    ("run -o r --device cuda", None),
    ("run -o r --workers 0", None),
    ("run -o r --policy tlt-base", None),
    ("model fetch gpt-17", None),
    ("model fetch smollm2-135m --cache file.txt/cache", None),
    ("model fetch", None),
    ("model", None),
    ("drafter -o notes.txt", None),
    ("drafter -o userdir", None),
    ("drafter -o d.pt --data d.pt", None),
    ("drafter -o d.pt --data userdir", None),
    ("drafter -o d.pt --model nope", None),
    ("drafter -o d.pt --model smollm2-135m", EMPTY),
    ("drafter -o d.pt --model tiny-llama", None),
    ("drafter -o d.pt --model target", None),
    ("drafter -o d.pt --init file.txt", FETCHED),
    ("drafter -o d.pt --init nope.pt", FETCHED),
    ("drafter -o d.pt --temperature 0", None),
    ("speed --model smollm2-135m --batches x", FETCHED),
    ("speed --model smollm2-135m --batches 0", FETCHED),
    ("speed --model smollm2-135m --batches 1,,4", FETCHED),
    ("speed --model smollm2-135m --batches 10000", FETCHED),
    ("speed --model smollm2-135m --drafters shipped,shipped", FETCHED),
    ("speed --model smollm2-135m --drafters nope", FETCHED),
    ("speed --model smollm2-135m --drafters hybrid:", FETCHED),
    ("speed --model smollm2-135m --strategy 4_x", FETCHED),
    ("speed --model smollm2-135m --strategy 1_1_9", FETCHED),
    ("speed --model smollm2-135m --device banana", FETCHED),
    ("speed --model smollm2-135m --rounds 0", FETCHED),
    ("speed --model smollm2-135m", EMPTY),
    ("speed --model nope", None),
    ("speed --model tiny-llama", None),
    ("speed --model target --drafters suffix", None),
]


def sandbox(root: Path) -> None:
    """The files the cases name, as a user's working directory might hold them."""
    (root / "notes.txt").write_text("my notes\n")
    (root / "file.txt").write_text("not a checkpoint\n")
    (root / "userdir").mkdir()
    (root / "userdir" / "mine.txt").write_text("mine\n")
    shutil.copytree(ROOT / "real" / "assets" / "gcd-tiny-llama", root / "target")
    (root / "empty-cache").mkdir()


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def refuse(words: str, cwd: Path, env: dict, timeout: float) -> tuple[float, float, str | None, str]:
    """(wall seconds to exit, CPU seconds, what is wrong with the refusal or None, the stderr line)."""
    t0, c0 = time.perf_counter(), cpu_of_children()
    try:
        done = subprocess.run([sys.executable, "-m", "tltsim", "real", *shlex.split(words)], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t0, cpu_of_children() - c0, f"still running after {timeout:.0f} s (killed)", ""
    seconds, cpu = time.perf_counter() - t0, cpu_of_children() - c0
    lines = done.stderr.splitlines()
    line = lines[-1] if lines else ""
    if done.returncode != 2:
        return seconds, cpu, f"exit {done.returncode}", line
    if done.stdout or len(lines) != 1 or "Traceback" in done.stderr:
        return seconds, cpu, f"{len(lines)} lines on stderr, {len(done.stdout)} characters on stdout", line
    return seconds, cpu, None, line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=float, default=2.0, help="seconds a refusal should take at most")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds after which a case is killed")
    ap.add_argument("--only", default=None, help="run only the cases whose command contains this text")
    args = ap.parse_args()

    user_cache = hub.cache_root()
    fetched = hub.is_fetched(KNOWN, user_cache)
    print(f"# python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at the start; one process a case; the user's cache "
          f"{'holds' if fetched else 'lacks'} {KNOWN}")
    rows, wrong, skipped = [], [], []
    with tempfile.TemporaryDirectory(prefix="tltsim-bad-input-") as tmp:
        root = Path(tmp)
        sandbox(root)
        base = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        print(f"{'command':<66} {'wall s':>7} {'CPU s':>6}  under {args.limit:g} s")
        for words, cache in CASES:
            if args.only and args.only not in words:
                continue
            shown = f"tltsim real {words}" + (f"   ({cache})" if cache == EMPTY else "")
            if cache == FETCHED and not fetched:
                skipped.append(shown)
                continue
            env = {**base, hub.CACHE_ENV: "empty-cache" if cache == EMPTY else str(user_cache)}
            seconds, cpu, problem, line = refuse(words, root, env, args.timeout)
            line = line.replace(str(root) + os.sep, "").replace(str(ROOT) + os.sep, "")  # paths as typed
            line = line.replace(str(user_cache), "$TLTSIM_CACHE")
            rows.append((seconds, shown, cpu))
            print(f"{shown:<66} {seconds:7.2f} {cpu:6.2f}  {'yes' if seconds < args.limit else 'NO'}", flush=True)
            print(f"    {line}" if problem is None else f"    NOT REFUSED AS IT SHOULD BE: {problem}: {line}", flush=True)
            if problem is not None:
                wrong.append(shown)
    slowest, most = max(rows), max(rows, key=lambda r: r[2])
    under = sum(s < args.limit for s, _, _ in rows)
    print(f"{len(rows)} bad inputs, {len(rows) - len(wrong)} refused in one line with exit 2, {under} of them under "
          f"{args.limit:g} s; slowest {slowest[0]:.2f} s ({slowest[1]}), most CPU {most[2]:.2f} s ({most[1]})"
          + (f"; {len(skipped)} skipped ({KNOWN} not fetched)" if skipped else ""))
    for shown in wrong:
        print(f"not refused as it should be: {shown}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
