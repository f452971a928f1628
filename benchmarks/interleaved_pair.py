"""Two real runs made a step at a time in turn, so that the machine's drift falls on both alike.

    python benchmarks/interleaved_pair.py STEPS "RUN ARGS A" "RUN ARGS B"

e.g. the shipped long-tail pair:

    python benchmarks/interleaved_pair.py 6 \\
      "-o runs/verl --policy verl --answers traces/real_verl_smollm2_longtail --task longtail ..." \\
      "-o runs/tlt --policy tlt --answers traces/real_verl_smollm2_longtail --task longtail ..."

On a shared machine whose speed wanders by tens of percent from one quarter hour to the next, a run made after
another one measures the machine as much as the policy. Here each step of each run is one `tltsim real run
--steps S+1 --resume` of its own (the first without --resume), and the order turns every step (A B, B A, A B,
...), so a steady drift lands on both runs alike. A resumed run continues from its checkpoint with the same
records and clock (real/run.py), so each directory holds an ordinary run: `tltsim validate A B` reads it as
any other. Give both runs the same --answers to have them emit the same tokens. Prints each call's wall time
and, at the end, each step's measured time of both runs and their ratio (B over A is A's time over B's).
"""
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd


def out_dir(words: list[str]) -> Path:
    for flag in ("-o", "--out"):
        if flag in words:
            return Path(words[words.index(flag) + 1])
    raise SystemExit("interleaved_pair.py: each run's arguments need -o RUN_DIR")


def step_times(run: Path) -> pd.Series:
    return pd.read_parquet(run / "steps.parquet").set_index("step")["total_s"]


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    n = int(sys.argv[1])
    runs = [shlex.split(sys.argv[2]), shlex.split(sys.argv[3])]
    dirs = [out_dir(words) for words in runs]
    for step in range(n):
        order = (0, 1) if step % 2 == 0 else (1, 0)
        for i in order:
            words = ["tltsim", "real", "run", *runs[i], "--steps", str(step + 1), "--no-progress"]
            if step:
                words.append("--resume")
            t0 = time.time()
            subprocess.run(words, check=True)
            print(f"# step {step} {'AB'[i]} ({dirs[i]}): {time.time() - t0:.1f} s wall, "
                  f"{time.strftime('%H:%M:%S', time.gmtime())} UTC", flush=True)
    times = pd.DataFrame({"A": step_times(dirs[0]), "B": step_times(dirs[1])})
    times["A/B"] = times["A"] / times["B"]
    print(times.round(3).to_string())
    print(f"total: A {times['A'].sum():.1f} s, B {times['B'].sum():.1f} s, A/B {times['A'].sum() / times['B'].sum():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
