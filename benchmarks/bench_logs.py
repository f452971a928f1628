"""Every length or workload log a public repository holds, read as it stands: counts and seconds per log.

    python benchmarks/bench_logs.py REPO_DIR | tee benchmarks/results/bench_logs.txt

REPO_DIR is a checkout of PolyTrace (github.com/Zhou-jiecheng/PolyTrace; it carries no license, so no copy ships
here) or any directory holding logs. Every directory under it that tltsim recognises as a log (`tltsim.trace.formats.
detect`: PolyTrace's multi-turn workload log, a packed_length_log directory of length logs; a verl rollout dump
needs its run's tokenizer and is not looked for) is read as `tltsim trace convert` reads it; a line per log: its
path under REPO_DIR, the format, the steps, responses (trajectories), turns and tool calls where it has them, the
cap, what was left out, the warnings and the seconds the read took (one process, one read each). A log that cannot
be read is a line with its error, and the exit status is then 1.
"""
from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

from tltsim.core.errors import TltsimError
from tltsim.trace.formats import detect

LOGS = ("length log", "PolyTrace's multi-turn workload log")  # a verl rollout dump needs its run's tokenizer


def logs(root: Path) -> list[Path]:
    """The log directories under `root`: those a log format recognises, none inside another."""
    found: list[Path] = []
    for d in sorted(p for p in root.rglob("*") if p.is_dir() and any(p.glob("*.jsonl"))):
        if any(d.is_relative_to(f) for f in found):
            continue
        try:
            if detect(d).name in LOGS:
                found.append(d)
        except TltsimError:
            continue
    return found


def main() -> int:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print(__doc__, file=sys.stderr)
        print("bench_logs.py: give one directory, a checkout holding the logs", file=sys.stderr)
        return 2
    root = Path(sys.argv[1])
    failed = 0
    print(f"python {sys.version.split()[0]}, one process; the logs under the directory given")
    for d in logs(root):
        fmt = detect(d)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                trace = fmt.read(d)
            except TltsimError as e:
                failed += 1
                print(f"{d.relative_to(root)}: {fmt.name}: refused: {str(e).replace(str(root) + '/', '')}")
                continue
        seconds = time.perf_counter() - t0
        turns = trace.turns
        shape = (f", {len(turns)} turns, {int((turns['tool_latency_s'].notna()).sum())} followed by tool calls"
                 if turns is not None else "")
        print(f"{d.relative_to(root)}: {fmt.name}: {len(trace.steps)} steps, {len(trace.df)} responses{shape}, "
              f"group {trace.meta.group_size}, cap {trace.meta.max_response_len or 'not recorded'}; "
              f"left out: {trace.meta.left_out or 'nothing'}; {len(caught)} warning(s); {seconds:.2f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
