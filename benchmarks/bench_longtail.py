"""The long-tail workload on SmolLM2-135M-Instruct: a fresh run's shape, rollout share and workers' memory.

    python benchmarks/bench_longtail.py [--policy verl] [--steps 1] [-o out/bench_longtail] [--run-args "..."]
    # record: ... | tee benchmarks/results/bench_longtail.txt

Runs `tltsim real run --model smollm2-135m --task longtail --policy P --steps N --workers 2 -o DIR` (the
workload's defaults otherwise, or --run-args on top) and polls the resident memory (RSS) of every process
the run starts, every 0.2 s (psutil). Reports per worker its peak resident memory (target: under 4 GB), and
per step the rollout's share of the step (target: >= 70% with the defaults; a one-step check: >=
60%), the longest response over the median one (>= 4; one-step check >= 3) and the longest (>= 512 tokens),
and the run's wall seconds (other work on the cores moves the share). First, from the
task generator and SmolLM2's tokenizer alone (no model): the worked reference answers' lengths over 200
seeded steps of 8 problems x 4 samples, which is the shape the task asks for (the model's own answers are
what the run then measures); `--reference-only` stops there. `--update-only` instead measures one process's
peak RSS (getrusage) over the workload's GRPO update (old log-probs and the LoRA update) of 2 sequences that
fill one micro-batch (micro_batch_tokens padded tokens, 400 of each a prompt) with non-zero advantages: the
largest forward and backward it ever computes (a sequence longer than the budget, at most a prompt and CAP
tokens, is shorter than it). A run whose groups all agree computes no update, so its own peak may not include one.
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

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tltsim.core.records import Result  # noqa: E402


def run(command: list[str]) -> dict[int, int]:
    """Run `command`; the peak RSS in bytes of each process it started (by pid), itself excluded."""
    proc = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    parent, peak = psutil.Process(proc.pid), {}
    while proc.poll() is None:
        try:
            for child in parent.children(recursive=True):
                try:
                    peak[child.pid] = max(peak.get(child.pid, 0), child.memory_info().rss)
                except psutil.NoSuchProcess:
                    pass
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    if proc.returncode:
        raise SystemExit(f"the run failed (exit {proc.returncode}): {shlex.join(command)}")
    return peak


def reference_shape(steps: int = 200, prompts: int = 8, group: int = 4) -> dict:
    """Per-step longest / median and longest of the worked reference answers (tokens, end of turn included)."""
    import numpy as np

    from real.models.targets import load_task

    task = load_task("smollm2-135m", "longtail")
    ratios, longest = [], []
    for step in range(steps):
        lengths = [len(task.solution_ids(p)) for p in task.sample(np.random.default_rng(step), prompts)] * group
        ratios.append(max(lengths) / np.median(lengths))
        longest.append(max(lengths))
    problems = task.sample(np.random.default_rng(0), 1000)
    answers = [len(task.solution_ids(p)) for p in problems]
    prompt = [len(task.prompt_ids(p)) for p in problems]
    pct = lambda x: [round(float(v), 1) for v in np.percentile(x, [50, 90, 99, 100])]  # noqa: E731
    return {"steps": steps, "longest_over_median_p5_p50_p95": [round(float(v), 2) for v in np.percentile(ratios, [5, 50, 95])],
            "steps_with_ratio_ge_4": round(float(np.mean(np.array(ratios) >= 4)), 3),
            "steps_with_longest_ge_512": round(float(np.mean(np.array(longest) >= 512)), 3),
            "answer_tokens_p50_p90_p99_max": pct(answers), "prompt_tokens_p50_p90_p99_max": pct(prompt)}


def update_peak() -> dict:
    """Peak RSS of this process around the workload's update on the largest micro-batches it computes."""
    import resource

    import numpy as np
    import torch

    from real.run.grpo import GRPO
    from real.models.targets import load_target
    from real.settings import task_grpo

    torch.set_num_threads(1)
    target = load_target("smollm2-135m")
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    grpo = GRPO(target, task_grpo("longtail"))
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 40000, size=400).tolist() for _ in range(2)]
    responses = [rng.integers(3, 40000, size=grpo.config.micro_batch_tokens // 2 - 400).tolist() for _ in range(2)]
    t = time.perf_counter()
    old, ref = grpo.old_logprobs(prompts, responses, np.array([1.0, -1.0]))
    grpo.update(prompts, responses, np.array([1.0, -1.0]), old, ref)
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"rows": 2, "tokens_per_row": grpo.config.micro_batch_tokens // 2, "micro_batch_tokens": grpo.config.micro_batch_tokens,
            "peak_rss_gib_after_load": round(loaded / 2**20, 3), "peak_rss_gib": round(kib / 2**20, 3),
            "update_s": round(time.perf_counter() - t, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", default="verl", choices=("verl", "tlt"))
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("-o", "--out", default="out/bench_longtail", help="run directory (replaced)")
    ap.add_argument("--run-args", default="", help="more `tltsim real run` options, e.g. \"--prompts 4\"")
    ap.add_argument("--reference-only", action="store_true", help="the reference answers' shape alone, no run")
    ap.add_argument("--update-only", action="store_true", help="one process's peak RSS over the update alone")
    args = ap.parse_args()
    if args.update_only:
        print(f"update: {json.dumps(update_peak())}")
        return
    print(f"reference answers: {json.dumps(reference_shape())}", flush=True)
    if args.reference_only:
        return
    out = ROOT / args.out
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "tltsim", "real", "run", "--model", "smollm2-135m", "--task", "longtail",
               "--policy", args.policy, "--steps", str(args.steps), "--workers", "2", "--no-progress", "-o", args.out,
               *shlex.split(args.run_args)]
    print(f"# {shlex.join(['tltsim', *command[3:]])}")
    t0 = time.perf_counter()
    peak = run(command)
    wall = time.perf_counter() - t0
    print(f"# wall {wall:.0f} s", flush=True)
    workers = sorted(peak.values(), reverse=True)[:2]  # the two workers (the rest: the forkserver, the resource tracker)
    print(f"peak resident memory per worker: {', '.join(f'{b / 2**30:.2f} GiB' for b in workers)} (target < 4 GB)")
    res = Result.load(out)
    rows = []
    for step, g in res.requests.groupby("step"):
        s = res.steps.set_index("step").loc[step]
        lengths = g["response_len"]
        rows.append({"step": int(step), "rollout_s": round(float(s["rollout_s"]), 1),
                     "step_s": round(float(s["total_s"]), 1),
                     "rollout_share": round(float(s["rollout_s"] / s["total_s"]), 3),
                     "longest": int(lengths.max()), "median": float(lengths.median()),
                     "longest_over_median": round(float(lengths.max() / lengths.median()), 2),
                     "capped": int((~g["finished"]).sum()), "mean_reward": round(float(s["mean_reward"]), 3)})
        print(json.dumps(rows[-1]))
    summary = {"policy": args.policy, "steps": args.steps, "peak_rss_gib": [round(b / 2**30, 3) for b in workers],
               "rollout_share": round(float(res.summary["rollout_share"]), 3), "wall_s": round(wall, 1)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
