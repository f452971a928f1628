"""How long a user waits on a fresh clone, setting up included: `make demo` (the first result) and `make test`.

    python benchmarks/bench_setup.py [--base REV] [--demos 2] [--no-test] | tee benchmarks/results/bench_setup.txt

Each measurement clones this repository (its committed HEAD, or REV) into a temporary directory with `../shared`
beside it as CI has it (a link to this checkout's, where there is one), and times the make target from the clone's
root to its exit: the virtual environment, pip's installs (from pip's cache, as on a user's second machine) and
the run. The model cache (~/.cache/tltsim) is the user's: warm where SmolLM2 was fetched before. With --base, the
two revisions run in turn (base, head, base, head, ...), so a change of the machine's speed falls on both. Targets:
`make demo` under a minute, `make test` under 8 minutes. Run it on an idle machine: the seconds are the data.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(rev: str, target: str) -> tuple[float, int, str]:
    """(wall seconds, exit status, pytest's last line or '') of `make target` on a fresh clone of `rev`."""
    with tempfile.TemporaryDirectory(prefix="tltsim-setup-") as tmp:
        clone = Path(tmp) / ROOT.name
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", rev], check=True)
        shared = ROOT.parent / "shared"
        if shared.is_dir():
            os.symlink(shared, Path(tmp) / "shared")
        start = time.perf_counter()
        proc = subprocess.run(["make", target], cwd=clone, capture_output=True, text=True)
        wall = time.perf_counter() - start
    tally = [line for line in proc.stdout.splitlines() if re.search(r"\d+ passed", line)]
    return wall, proc.returncode, tally[-1].strip("= ") if tally else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", help="a revision to time in turn with HEAD (e.g. the commit before a change)")
    ap.add_argument("--demos", type=int, default=2, help="make demo runs per revision (default 2)")
    ap.add_argument("--no-test", action="store_true", help="time make demo alone")
    args = ap.parse_args()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    revs = [args.base, head] if args.base else [head]
    print(f"fresh clones, setting up included; {platform.python_version()} on {platform.machine()}, "
          f"{os.cpu_count()} CPUs; revisions in turn: {', '.join(revs)}")
    print(f"{'revision':10s} {'target':6s} {'wall s':>8s}  exit  tests")
    failed = False
    runs = [(rev, "demo") for _ in range(args.demos) for rev in revs]
    runs += [] if args.no_test else [(rev, "test") for rev in revs]
    for rev, target in runs:
        wall, rc, tally = timed(rev, target)
        failed |= rc != 0
        print(f"{rev:10s} {target:6s} {wall:8.1f}  {rc:4d}  {tally}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
