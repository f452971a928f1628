"""The GPU check: profile, `real speed`, a short verl/tlt pair and validate, in one call.

    python scripts/gpu_check.py --device cuda -o OUT            # on a GPU machine: under 8 minutes on one H100 (~)
    python scripts/gpu_check.py --device cpu --tiny -o out/gpu  # anywhere: the same steps at a tiny size, on a CPU

What a GPU machine needs:

- files: this repository's tltsim/ and real/ packages and this script (nothing from real/assets/ and no
  downloaded weights: the target is built here from a preset). Run it from the repository root.
- wheels: Python >= 3.11 with a CUDA build of torch (2.4 to 2.13), transformers 5.x and peft (the `real` extra of
  pyproject.toml), and tltsim's own dependencies (simpy, numpy, pandas, pyarrow, scipy, matplotlib, pillow, tqdm,
  pyyaml, omegaconf). With the repository installed (`pip install -e '.[real]'`) nothing else is needed; on a
  machine that cannot reach a package index, carry the missing wheels with the repository and install them
  (`pip install --no-index --find-links DIR ...`), or put pure-Python ones on PYTHONPATH, and run with
  PYTHONPATH=. so that tltsim and real import from the repository. simpy is the one most often missing
  (`tltsim validate` simulates); the script says so in one line before it starts.
- time: the six steps below are sized to finish in under 8 minutes on one H100 (an estimate, not a recording:
  results.json records each step's seconds). The tiny size runs the same steps on 2 CPU cores in about half a
  minute (tests/real/test_gpu_check.py runs it).

The target is the `qwen2.5-0.5b-shape` preset (Qwen2.5-0.5B's shape, random weights, seeded, its real vocabulary
of 151936 tokens) in bf16: big enough that a GPU forward is no longer bound by launch overhead at small batches,
and nothing to download. The drafter is trained briefly on that target's own greedy outputs (random prompts,
features from the forwards that made them), which is what acceptance needs; the word-problem task and the chat
template need a tokenizer, which random weights do not have, so `speed` decodes random prompts the drafter did not
see. Steps, each timed; a failed one is recorded and the rest run:

    target    build, save_pretrained (with the default gcd task file, so `real run` and `real profile` take it)
    drafter   greedy outputs of the target, Drafter.fit, saved; tokens per target call on unseen prompts
    profile   `tltsim real profile --model DIR --device D`                        -> profile.csv
    speed     real.tools.speed.measure, plain vs speculative per batch size            -> speed.json
    pair      `tltsim real run --policy verl|tlt` (1 worker, same seed)         -> verl.json, tlt.json
    policies  `tltsim real run` of tlt-base, longest-first, longest-first+tlt, and on 2 workers sharing the device
              partial+tlt, tail-batching+tlt, migrate+tlt, async and async+tlt (one worker rolls out, one trains),
              the same shape, prompts repeated each step (each policy's makespan and speculative share in
              results.json)
    validate  `tltsim validate verl tlt --profile profile.csv --json`            -> validate.json
              and results.json: every step's seconds, status and headline figures; log.txt: all output.

Everything to read lies at most two folders under OUT (8 files at most); the models and runs go in a `work`
folder inside OUT.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
import traceback
from pathlib import Path

import torch

from real.tools import speed
from real.drafters.eagle import Drafter
from real.engine.generate import generate
from real.settings import GenerateSettings, SpeedSettings
from real.models.targets import build_target
from real.tasks.gcd import GcdTask

# the real backend's policies beyond the pair, with the knobs that make each act at the check's shape
POLICIES = {"tlt-base": [], "longest-first": [], "longest-first+tlt": [], "partial+tlt": ["ratio=2"],
            "tail-batching+tlt": ["eta=2", "long_every=1"], "migrate+tlt": ["remaining=0.5", "to_engines=1"],
            "async": ["max_staleness=1"], "async+tlt": ["max_staleness=1"]}
SIZES = {  # preset, vocab, dtype, drafter (prompts, new tokens, steps), speed batches, profile grid, run shape
    "gpu": dict(preset="qwen2.5-0.5b-shape", vocab=151936, dtype="bfloat16", prompts=64, new=128, steps=300,
                batches="1,4,16,64", contexts="128,512", speed_new=128, run=["--prompts", "16", "--group", "4",
                                                                                "--steps", "2", "--max-new-tokens", "256"]),
    "tiny": dict(preset="test-qwen2", vocab=512, dtype="float32", prompts=8, new=12, steps=10,
                 batches="1,2", contexts="8,16", speed_new=8, run=["--prompts", "2", "--group", "2", "--steps", "1",
                                                               "--max-new-tokens", "8", "--probe", "1",
                                                               "--speed-probe", "1", "--warmup-steps", "2"]),
}


def _prompts(n: int, vocab: int, length: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n, length), generator=gen).tolist()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", required=True, help="folder for the figures (results.json, ...)")
    ap.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--tiny", action="store_true", help="a tiny model and grid (to check the script on a CPU)")
    args = ap.parse_args(argv)
    size = SIZES["tiny" if args.tiny else "gpu"]
    out = Path(args.out)
    work = out / "work"  # models and runs, kept apart from the figures (their files lie 3 folders down)
    work.mkdir(parents=True, exist_ok=True)
    results = {"device": args.device, "size": "tiny" if args.tiny else "gpu", "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "", "steps": {}}
    log = open(out / "log.txt", "w")
    target_dir, drafter_path = work / "target", work / "drafter.pt"
    dtype = getattr(torch, size["dtype"])
    state = {}

    def step(name, fn):
        t0 = time.perf_counter()
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                figures = fn() or {}
            status = "ok"
        except Exception:  # a failed step is recorded; the later ones that do not need it still run
            figures, status = {"error": traceback.format_exc(limit=3).strip().splitlines()[-1]}, "failed"
            buf.write(traceback.format_exc())
        log.write(f"== {name}\n{buf.getvalue()}\n")
        log.flush()
        results["steps"][name] = {"status": status, "seconds": round(time.perf_counter() - t0, 2), **figures}
        print(f"{name}: {status} in {results['steps'][name]['seconds']} s {figures}", flush=True)

    def cli(words):
        from tltsim.cli import main as tltsim_main

        rc = tltsim_main(words)
        if rc:
            raise RuntimeError(f"tltsim {' '.join(words[:2])} exited {rc}")

    def make_target():
        model = build_target(size["preset"], seed=0, vocab_size=size["vocab"]).to(args.device, dtype)
        model.save_pretrained(target_dir)
        GcdTask().save(target_dir)
        state["target"] = model
        return {"parameters": sum(p.numel() for p in model.parameters())}

    def make_drafter():
        model = state["target"]
        gen = generate(model, _prompts(size["prompts"], size["vocab"], 32, seed=1), settings=GenerateSettings(max_new_tokens=size["new"], eos_token_id=(), collect_features=True))
        pairs = [(f.prompt + f.tokens, f.features) for f in gen.finished]
        drafter = Drafter.for_target(model, seed=0)
        losses = drafter.fit(pairs, steps=size["steps"], batch_size=8, lr=3e-3, seed=0)
        drafter.save(drafter_path)
        state["drafter"] = drafter
        test = generate(model, _prompts(8, size["vocab"], 32, seed=2), drafter, GenerateSettings(strategy="4_1_4", max_new_tokens=size["new"], eos_token_id=()))
        accepted = [a for it in test.iterations if it.mode == "spec_decode" for a in it.accepted]
        return {"final_loss": round(sum(losses[-10:]) / len(losses[-10:]), 4),
                "tokens_per_call_4_1_4": round(1 + sum(accepted) / len(accepted), 3)}

    def run_speed():
        batches = [int(b) for b in size["batches"].split(",")]
        rows = speed.measure(state["target"], {"trained": lambda: state["drafter"]},
                             _prompts(max(batches), size["vocab"], 64, seed=3),
                             SpeedSettings(batches=tuple(batches), max_new_tokens=size["speed_new"], rounds=2,
                                           eos_token_id=()))
        (out / "speed.json").write_text(json.dumps(rows, indent=1))
        return {"speedup": {r["batch"]: r["speedup"] for r in rows if r["mode"] == "spec_decode"},
                "identical": all(r["identical"] for r in rows)}

    def run_profile():
        cli(["real", "profile", "--model", str(target_dir), "--device", args.device, "--batches", size["batches"],
             "--contexts", size["contexts"], "--repeats", "2", "-o", str(out / "profile.csv")])

    def run_pair():
        figures = {}
        for policy in ("verl", "tlt"):
            run_dir = work / policy
            cli(["real", "run", "--policy", policy, "--workers", "1", "--model", str(target_dir),
                 "--drafter-checkpoint", str(drafter_path), "--device", args.device, "--dtype", size["dtype"], "--seed", "0",
                 *size["run"], "-o", str(run_dir)])
            summary = json.loads((run_dir / "summary.json").read_text())
            (out / f"{policy}.json").write_text(json.dumps(summary, indent=1))
            figures[f"{policy}_makespan_s"] = summary.get("makespan_s")
        return figures

    def run_policies():
        figures = {}
        for policy, knobs in POLICIES.items():
            run_dir = work / policy.replace("+", "_")
            # the others load none
            drafter = ["--drafter-checkpoint", str(drafter_path)] if policy.endswith("+tlt") else []
            workers = "2" if knobs else "1"  # two workers sharing the device: a step stopped, parked or moved across them
            cli(["real", "run", "--policy", policy, "--workers", workers, "--model", str(target_dir), *drafter,
                 *[w for k in knobs for w in ("--knob", k)], "--device", args.device, "--dtype", size["dtype"],
                 "--seed", "0", "--repeat-prompts", *size["run"], "-o", str(run_dir)])
            summary = json.loads((run_dir / "summary.json").read_text())
            figures[f"{policy}_makespan_s"], figures[f"{policy}_sd_share"] = summary.get("makespan_s"), \
                summary.get("sd_share")
        return figures

    def run_validate():
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            cli(["validate", str(work / "verl"), str(work / "tlt"), "--profile", str(out / "profile.csv"), "--json"])
        (out / "validate.json").write_text(buf.getvalue())
        print(buf.getvalue())

    try:
        import simpy  # noqa: F401  (tltsim validate simulates)
    except ImportError:
        print("simpy is not installed: install or carry its wheel (see the docstring); validate will fail", flush=True)
    step("target", make_target)
    step("drafter", make_drafter)
    step("profile", run_profile)
    step("speed", run_speed)
    step("pair", run_pair)
    step("validate", run_validate)
    step("policies", run_policies)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    log.close()
    return 0 if all(s["status"] == "ok" for s in results["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
