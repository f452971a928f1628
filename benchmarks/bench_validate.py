"""Sim vs real: real CPU runs of verl and tlt, then the simulator's prediction of both, in one run.

    python benchmarks/bench_validate.py | tee benchmarks/results/bench_validate.txt

Steps (each a `tltsim` command a user would type; run on a quiet machine, the timings are the data):
1. the default target: the shipped pretrained one (real/assets/gcd-tiny-llama), or --pretrain to make it anew;
2. `tltsim real profile --processes WORKERS` of the engine on this machine;
3. `tltsim real run` of verl, tlt, tlt, verl (A-B-B-A; 2 workers, --steps each, same seed);
4. `tltsim validate verl_run tlt_run --profile profile.csv` for each pair: per-step and overall errors, the
   speedup; again with `--speed` (the profile scaled step by step by the runs' speed probes: how fast this
   shared machine ran at each step); then a summary line per pair and way.
Targets: median |error| of per-step rollout time < 10%; predicted tlt/verl speedup within 15%.

On a pretrained chat model, one verl-then-tlt pair of short runs, with the settings a 135M-parameter
target needs on 2 CPU cores (word problems through its chat template, the shipped drafter):

    python benchmarks/bench_validate.py --model smollm2-135m --order verl-a,tlt-a --steps 3 --prompts 2 \
        --group 4 --run-args "--lr 1e-6 --max-new-tokens 128 --probe 4 --temperature 0.6" \
        --tlt-args "--knob threshold=4 --knob patience=2 --knob arms=4_1_4,3_1_3" \
        --profile-args "--batches 1,2,4 --contexts 64,192 --strategies 4_1_4,3_1_3 --train-rows 2,4 --repeats 2 \
        --max-new-tokens 128" --out out/bench_validate_smollm2

(the pair it made is shipped as traces/runs/real_{verl,tlt}_smollm2; docs/investigations/cpu_pairs.md reads it).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

TLTSIM = [sys.executable, "-m", "tltsim"]


def sh(args: list[str]) -> None:
    print(f"$ tltsim {' '.join(shlex.quote(a) for a in args)}", flush=True)
    t = time.perf_counter()
    subprocess.run(TLTSIM + args, check=True)
    print(f"  ({time.perf_counter() - t:.0f} s)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/bench_validate")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--device", default="cpu")
    p.add_argument("--pretrain", action="store_true", help="pretrain the target (3 min) instead of the shipped one")
    p.add_argument("--model", default=None, help="target of every command (default: the shipped gcd target)")
    p.add_argument("--order", default="verl-a,tlt-a,tlt-b,verl-b",
                   help="runs in the order they are made: POLICY-PAIR, each pair a verl run and one of another "
                        "speculative policy (tlt, tlt-auto, das ...)")
    p.add_argument("--run-args", default="", help="more `tltsim real run` arguments (one shell-quoted string)")
    p.add_argument("--tlt-args", default="", help="more arguments of the non-verl runs only (e.g. --knob threshold=4)")
    p.add_argument("--profile-args", default="", help="more `tltsim real profile` arguments")
    p.add_argument("--profile", default=None, help="an existing profile CSV of this machine to use instead of "
                   "measuring one (e.g. the one an earlier, interrupted call wrote)")
    p.add_argument("--skip-runs", action="store_true", help="validate the runs of --order already in --out (as an "
                   "earlier call, or a copy, left them) instead of making them anew")
    args = p.parse_args()
    out = Path(args.out)
    shipped = Path(os.path.relpath(Path(__file__).resolve().parents[1] / "real" / "assets" / "gcd-tiny-llama"))
    target = out / "target" if args.pretrain else args.model or shipped
    if args.pretrain:
        sh(["real", "pretrain", "-o", str(target)])
    order = [name.strip() for name in args.order.split(",") if name.strip()]
    policy = {name: name.rsplit("-", 1)[0] for name in order}  # tlt-auto-a: policy tlt-auto, pair a
    pairs = sorted({name.rsplit("-", 1)[1] for name in order if policy[name] != "verl"})  # verl alone: nothing to pair
    other = {name.rsplit("-", 1)[1]: name for name in order if policy[name] != "verl"}  # pair -> its non-verl run
    missing = [name for name in order if args.skip_runs and not (out / name / "summary.json").is_file()]
    if missing:
        p.error(f"--skip-runs: no finished run {', '.join(str(out / n) for n in missing)}; make it first (drop --skip-runs)")
    # as many processes as the runs have workers: on a CPU they share the cores and the memory bandwidth
    if args.profile:
        out.mkdir(parents=True, exist_ok=True)
        if Path(args.profile).resolve() != (out / "profile.csv").resolve():
            shutil.copyfile(args.profile, out / "profile.csv")
    else:
        sh(["real", "profile", "--model", str(target), "--device", args.device, "--processes", str(args.workers),
            *shlex.split(args.profile_args), "-o", str(out / "profile.csv")])
    # A-B-B-A: this machine's speed drifts by several percent from minute to minute, so each policy runs
    # once before and once after the other's pair; each (verl, tlt) pair is validated on its own
    for name in [] if args.skip_runs else order:
        run = out / name
        shutil.rmtree(run, ignore_errors=True)  # a fresh run each time
        sh(["real", "run", "--policy", policy[name], "--workers", str(args.workers), "--steps", str(args.steps),
            "--model", str(target), "--device", args.device, "--prompts", str(args.prompts), "--group", str(args.group),
            "--seed", "0", *shlex.split(args.run_args),
            *(shlex.split(args.tlt_args) if policy[name] != "verl" else []), "-o", str(run)])
    # each pair twice: the profile as measured, and scaled step by step by the runs' speed probes (--speed)
    for pair in pairs:
        for speed in ("", "-speed"):
            sh(["validate", str(out / f"verl-{pair}"), str(out / other[pair]), "--profile", str(out / "profile.csv"),
                "-o", str(out / f"validation-{pair}{speed}")] + (["--speed"] if speed else []))
    print("\nA-B-B-A summary (pair a: verl then tlt; pair b: tlt then verl; profile: as measured, or x speed probe)")
    print("pair  profile  verl per-step |err|  other per-step |err|  speedup measured  predicted  error")
    for pair in pairs:  # what each validate command wrote
        for speed in ("", "-speed"):
            v = json.loads((out / f"validation-{pair}{speed}" / "validation.json").read_text())
            per = {(r["run"], r["metric"]): r["error"] for r in v["overall"]}
            s = v["speedup"]
            errs = [per[(r, "median |error| of per-step rollout")] for r in (s["baseline"], s["run"])]
            print(f"{pair:>4}  {'x speed' if speed else 'as is':>7}  {errs[0]:19.3f}  {errs[1]:20.3f}  "
                  f"{s['measured']:16.3f}  {s['predicted']:9.3f}  {s['error']:+.3f}")
    print("\nwork domain, whole runs (counted, not timed: the same with and without --speed)")
    print("pair  run                       metric                  measured  predicted   error")
    for pair in pairs:
        v = json.loads((out / f"validation-{pair}" / "validation.json").read_text())
        for r in v["work"]:
            if r["step"] is None:
                cells = [f"{r[k]:.2f}" if r[k] is not None else "-" for k in ("measured", "predicted")]
                err = f"{r['error']:+.3f}" if r["error"] is not None else "-"
                print(f"{pair:>4}  {r['run']:<24}  {r['metric']:<22}  {cells[0]:>8}  {cells[1]:>9}  {err:>6}")


if __name__ == "__main__":
    main()
