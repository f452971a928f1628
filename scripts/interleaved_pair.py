"""Two real runs made a step at a time in turn, so that the machine's drift falls on both alike.

    python scripts/interleaved_pair.py STEPS "RUN ARGS A" "RUN ARGS B"

e.g. the shipped long-tail pair:

    python scripts/interleaved_pair.py 6 \\
      "-o runs/verl --policy verl --answers traces/runs/real_verl_smollm2_longtail --task longtail ..." \\
      "-o runs/tlt --policy tlt --answers traces/runs/real_verl_smollm2_longtail --task longtail ..."

On a shared machine whose speed wanders by tens of percent from one quarter hour to the next, a run made after
another one measures the machine as much as the policy. Here each step of each run is one `tltsim real run
--steps S+1 --resume` of its own (the first without --resume), and the order turns every step (A B, B A, A B,
...), so a steady drift lands on both runs alike. A resumed run continues from its checkpoint with the same
records and clock (real/run/launch.py), so each directory holds an ordinary run: `tltsim validate A B` reads it as
any other. Give both runs the same --answers to have them emit the same tokens. Prints each call's wall time
and, at the end, each step's measured time of both runs and A/B, A's time over B's (B's speedup over A). A run
that fails stops the pair with one line and its exit status; rerun the same command with the failed run's
steps so far and `--resume` to go on, or start both afresh.
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
    if len(sys.argv) != 4 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        print(__doc__, file=sys.stderr)
        print("interleaved_pair.py: expected STEPS (a whole number, at least 1) and two quoted argument lists",
              file=sys.stderr)
        return 2
    n = int(sys.argv[1])
    runs = [shlex.split(sys.argv[2]), shlex.split(sys.argv[3])]
    dirs = [out_dir(words) for words in runs]
    if None in dirs:
        print(f"interleaved_pair.py: run {'AB'[dirs.index(None)]}'s arguments give no -o RUN_DIR; add one to each",
              file=sys.stderr)
        return 2
    for step in range(n):
        order = (0, 1) if step % 2 == 0 else (1, 0)
        for i in order:
            words = ["tltsim", "real", "run", *runs[i], "--steps", str(step + 1), "--no-progress"]
            if step:
                words.append("--resume")
            t0 = time.time()
            rc = subprocess.run(words).returncode
            if rc:
                print(f"interleaved_pair.py: step {step} of run {'AB'[i]} failed (exit {rc}; its message is above): "
                      f"{shlex.join(words)}", file=sys.stderr)
                return rc
            print(f"# step {step} {'AB'[i]} ({dirs[i]}): {time.time() - t0:.1f} s wall, "
                  f"{time.strftime('%H:%M:%S', time.gmtime())} UTC", flush=True)
    times = pd.DataFrame({"A": step_times(dirs[0]), "B": step_times(dirs[1])})
    times["A/B"] = times["A"] / times["B"]
    print(times.round(3).to_string())
    a, b = times["A"].sum(), times["B"].sum()
    print(f"total: A {a:.1f} s, B {b:.1f} s, A/B {a / b:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
