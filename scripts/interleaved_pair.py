"""Two (or more) real runs made a step at a time in turn, so that the machine's drift falls on all alike.

    python scripts/interleaved_pair.py STEPS "RUN ARGS A" "RUN ARGS B" ["RUN ARGS C" ...]

e.g. the shipped long-tail pair:

    python scripts/interleaved_pair.py 6 \\
      "-o runs/verl --policy verl --answers traces/runs/real_verl_smollm2_longtail --task longtail ..." \\
      "-o runs/tlt --policy tlt --answers traces/runs/real_verl_smollm2_longtail --task longtail ..."

On a shared machine whose speed wanders by tens of percent from one quarter hour to the next, a run made after
another one measures the machine as much as the policy. Here each step of each run is one `tltsim real run
--steps S+1 --resume` of its own (the first without --resume), and the order turns every step (A B, B A, A B,
...; with three, A B C, B C A, C A B, ...), so a steady drift lands on every run alike. A resumed run continues from
its checkpoint with the same records and clock (real/run/launch.py), so each directory holds an ordinary run:
`tltsim validate A B` reads it as any other. Give the runs the same --answers to have them emit the same tokens (a
policy that draws its own groups, such as partial, takes none: give the same seed and settings). Prints each call's
wall time and, at the end, each step's measured time of every run and A/B, A/C, ...: A's time over each other's
(its speedup over A, the baseline). A run that fails stops them all with one line and its exit status; rerun the same
command with the failed run's steps so far and `--resume` to go on, or start afresh.
"""
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd


def out_dir(words: list[str]) -> Path | None:
    """The run directory its arguments give (-o / --out), or None."""
    for flag in ("-o", "--out"):
        if flag in words[:-1]:
            return Path(words[words.index(flag) + 1])
    return None


def step_times(run: Path) -> pd.Series:
    return pd.read_parquet(run / "steps.parquet").set_index("step")["total_s"]


def main() -> int:
    if len(sys.argv) < 4 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        print(__doc__, file=sys.stderr)
        print("interleaved_pair.py: expected STEPS (a whole number, at least 1) and two or more quoted argument lists",
              file=sys.stderr)
        return 2
    n = int(sys.argv[1])
    runs = [shlex.split(words) for words in sys.argv[2:]]
    names = [chr(ord("A") + i) for i in range(len(runs))]
    dirs = [out_dir(words) for words in runs]
    if None in dirs:
        print(f"interleaved_pair.py: run {names[dirs.index(None)]}'s arguments give no -o RUN_DIR; add one to each",
              file=sys.stderr)
        return 2
    for step in range(n):
        order = [(step + i) % len(runs) for i in range(len(runs))]
        for i in order:
            words = ["tltsim", "real", "run", *runs[i], "--steps", str(step + 1), "--no-progress"]
            if step:
                words.append("--resume")
            t0 = time.time()
            rc = subprocess.run(words).returncode
            if rc:
                print(f"interleaved_pair.py: step {step} of run {names[i]} failed (exit {rc}; its message is above): "
                      f"{shlex.join(words)}", file=sys.stderr)
                return rc
            print(f"# step {step} {names[i]} ({dirs[i]}): {time.time() - t0:.1f} s wall, "
                  f"{time.strftime('%H:%M:%S', time.gmtime())} UTC", flush=True)
    times = pd.DataFrame({name: step_times(d) for name, d in zip(names, dirs)})
    for name in names[1:]:
        times[f"A/{name}"] = times["A"] / times[name]
    print(times.round(3).to_string())
    total = {name: times[name].sum() for name in names}
    print("total: " + ", ".join(f"{name} {total[name]:.1f} s" for name in names) + ", "
          + ", ".join(f"A/{name} {total['A'] / total[name]:.3f}" for name in names[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
