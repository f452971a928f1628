"""The drafter's drift at two target learning rates, measured for real, and the simulator's staleness model fitted at
one predicting the other's spot-vs-static gap.

    python benchmarks/bench_drift.py | tee benchmarks/results/bench_drift.txt    # ~40 minutes on 2 CPU cores

Steps (each a `tltsim` command a user would type):
1. for each target learning rate of --lrs (default 1e-5, where the target barely moves, and 5e-4, where it moves
   visibly) and each seed of --seeds: `tltsim real run --policy tlt --probe-static` for --steps steps. Before every
   step the run probes its spot-trained drafter and the drafter it started from, never trained, with the current
   target on the same held-out prompts (greedy, a chain of 4: steps columns drafter_accepted and
   static_drafter_accepted);
2. how far each run's final target moved from where it started: the mean per-token KL(start || final) over the
   start's greedy answers to --kl-prompts held-out prompts (real.tasks.evaluate.token_kl);
3. `tltsim fit-drafter --spot RUNS_AT_A --predict RUNS_AT_B`, and the other way: the staleness model
   (tltsim.analysis.drafter.fit) fitted on one learning rate's seeds, played on the other's with the drift
   scaled by the ratio of the learning rates, beside the spot-vs-static gap those runs measured.
Target: the mean gap over the seeds predicted within 15%, both ways.

The default is the shipped small target on its long-tailed gcd task (responses 5-517 tokens; Gauss-Kuzmin), in the
setting where one worker idles half of each rollout and spot-trains (3 groups of 8, at most 2 rows running a worker),
from the run's own short warm-up of the drafter. The long-tail workload on SmolLM2-135M-Instruct (about 4 minutes a
step on 2 CPU cores; the runs' commands are printed):

    python benchmarks/bench_drift.py --out out/bench_drift_longtail --model smollm2-135m --lrs 1e-5,1e-3 --seeds 0 \
        --steps 8 --run-args "--task longtail --dtype bfloat16 --prompts 4 --group 4 --probe 4 \
        --drafter-checkpoint real/assets/smollm2-135m-longtail-sampled-drafter.pt --knob arms=4_1_4,3_1_3,2_1_2"

`--skip-runs` reads runs already in --out (named s{SEED}-lr{LR}) instead of making them.
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TLTSIM = [sys.executable, "-m", "tltsim"]
SMALL = ("--probe 16 --prompts 3 --group 8 --max-running 2 --max-new-tokens 96 --warmup-steps 10 --warmup-prompts 16 "
         "--drafter-batch 4 --speed-probe 0 --knob threshold=4 --knob patience=2 --knob arms=4_2_8,4_1_4 "
         "--knob buffer_steps=2")


def sh(args: list[str], capture: bool = False) -> str:
    print(f"$ tltsim {' '.join(shlex.quote(str(a)) for a in args)}", flush=True)
    t = time.perf_counter()
    done = subprocess.run(TLTSIM + [str(a) for a in args], check=True, capture_output=capture, text=True)
    print(f"  ({time.perf_counter() - t:.0f} s)", flush=True)
    return done.stdout if capture else ""


def moved(run: Path, prompts: int) -> float:
    """KL(start || final) a token over the start's greedy answers to held-out prompts of the run's task."""
    import numpy as np
    import torch
    import transformers

    from real.engine.generate import generate
    from real.models.targets import load_target
    from real.run.config import RunConfig
    from real.settings import GenerateSettings
    from real.tasks.evaluate import token_kl

    transformers.utils.logging.disable_progress_bar()
    config = json.loads((run / "config.json").read_text())
    cfg = RunConfig(**{k: v for k, v in config.items() if k in RunConfig.__dataclass_fields__ and k != "grpo"})
    task = cfg.make_task()
    start, final = load_target(cfg.model, dtype=cfg.dtype), load_target(run / "checkpoint" / "target", dtype=cfg.dtype)
    problems = task.sample(np.random.default_rng(996), prompts, split="test")
    with torch.no_grad():
        gen = generate(start, [task.prompt_ids(p) for p in problems],
                       settings=GenerateSettings(max_new_tokens=cfg.max_new_tokens))
    return token_kl(start, final, [(f.prompt, f.tokens) for f in gen.finished])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/bench_drift")
    p.add_argument("--model", default=None, help="the target (default: the shipped gcd target)")
    p.add_argument("--lrs", default="1e-5,5e-4", help="the two target learning rates")
    p.add_argument("--seeds", default="1,2,3,4,5,6,7,8,9,10,11,12")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--run-args", default=None, help="`tltsim real run` arguments besides policy, probes, seed, "
                   "steps and lr (default: the small target's spot-training setting)")
    p.add_argument("--kl-prompts", type=int, default=8)
    p.add_argument("--skip-runs", action="store_true", help="read the runs already in --out")
    args = p.parse_args()
    out = Path(args.out)
    lrs = [s.strip() for s in args.lrs.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    if len(lrs) != 2:
        p.error(f"--lrs {args.lrs}: give two learning rates")
    run_args = shlex.split(SMALL if args.run_args is None else args.run_args)
    runs = {lr: [out / f"s{seed}-lr{lr}" for seed in seeds] for lr in lrs}
    for lr in [] if args.skip_runs else lrs:
        for seed, run in zip(seeds, runs[lr]):
            shutil.rmtree(run, ignore_errors=True)
            sh(["real", "run", "--policy", "tlt", "--probe-static", "--workers", "2", "--steps", args.steps,
                "--seed", seed, "--lr", lr, *(["--model", args.model] if args.model else []), *run_args,
                "--no-progress", "-o", run])
    root = f"{Path(__file__).resolve().parents[1]}/"  # a run made before commands named the shipped target as typed
    for run in [r for lr in lrs for r in runs[lr]] if args.skip_runs else []:  # what made the runs read
        print(f"# {run.name}: {json.loads((run / 'config.json').read_text())['command'].replace(root, '')}", flush=True)
    import pandas as pd

    print("\nper run: the probes (tokens a target call, greedy 4_1_4) at the first and last step, the steps with a GRPO "
          "gradient (a group with mixed rewards; AdamW's momentum carries each one's move a few steps on), and how "
          "far the target moved")
    print("run           static first -> last  spot first -> last  mean gap  gradient  KL(start||final)/token")
    for lr in lrs:
        for run in runs[lr]:
            st = pd.read_parquet(run / "steps.parquet")
            gap = float((st.drafter_accepted - st.static_drafter_accepted).iloc[1:].mean())
            print(f"{run.name:<12}  {st.static_drafter_accepted.iloc[0]:5.3f} -> {st.static_drafter_accepted.iloc[-1]:5.3f}"
                  f"        {st.drafter_accepted.iloc[0]:5.3f} -> {st.drafter_accepted.iloc[-1]:5.3f}      {gap:+.3f}"
                  f"  {int(st.grpo_loss.ne(0).sum()):>5}/{len(st)}  {moved(run, args.kl_prompts):.5f}", flush=True)
    results = {}
    for fitted, predicted in (lrs, lrs[::-1]):
        text = sh(["fit-drafter", "--spot", *runs[fitted], "--predict", *runs[predicted]], capture=True)
        print(text, flush=True)
        results[(fitted, predicted)] = json.loads(sh(["fit-drafter", "--spot", *runs[fitted], "--predict",
                                                      *runs[predicted], "--json"], capture=True))
    print("\nsummary: the model fitted at one learning rate, the mean spot-vs-static gap over the other's seeds "
          "(tokens a target call; se: the standard error of the measured mean over the seeds)")
    print("fitted at  drift (q a step)  tau_samples  predicted at  measured gap (se)  predicted gap   error  target 15%")
    for (fitted, predicted), r in results.items():
        (m,) = r["mean_predictions"]
        gaps = [x["measured_gap"] for x in r["predictions"]]
        se = statistics.stdev(gaps) / len(gaps) ** 0.5 if len(gaps) > 1 else float("nan")
        ok = m["error"] is not None and abs(m["error"]) <= 0.15
        err = f"{m['error']:+6.1%}" if m["error"] is not None else "  none"
        print(f"{fitted:>9}  {r['drift']:16.5f}  {r['tau_samples']:11.1f}  {predicted:>12}  {m['measured_gap']:+12.4f}"
              f" ({se:.3f})  {m['predicted_gap']:+13.4f}  {err}  {'PASS' if ok else 'FAIL'}")
        singles = [x["error"] for x in r["predictions"] if x["error"] is not None]
        if len(singles) > 1:
            print(f"{'':>9}  single seeds' errors: {min(singles):+.1%} to {max(singles):+.1%}")
    drifts = {fitted: r["drift"] for (fitted, _), r in results.items()}
    low, high = sorted(lrs, key=float)
    ratio = drifts[high] / drifts[low] if drifts[low] > 0 else float("inf")
    print(f"fitted drift at {high} over that at {low}: {ratio:.1f}, against a learning-rate ratio of "
          f"{float(high) / float(low):.0f} (the model scales the drift by the latter)")


if __name__ == "__main__":
    main()
