"""Plain vs speculative decoding on the default target: tokens/s at batch 1, 4 and 16, side by side.

    python benchmarks/bench_spec.py [--target DIR] [--device cpu|cuda] [--batches 1,4,16] [--repeats 2]
    # record: ... | tee benchmarks/results/bench_spec.txt

The target is a checkpoint written by `tltsim real pretrain` (--target); without one, the default
preset is pretrained first into out/bench_spec/ (about 3 minutes on 2 CPU cores) and reused on the
next run. The drafter is trained here on the target's own greedy responses to training problems
(features from the forwards that generated them; kept in out/bench_spec/ for the next run with the
same target and settings), then every setting decodes the same held-out prompts greedily, in chunks
of the batch size; a batch size's settings take turns, `--repeats` times, and each counts its
fastest run, so that a change of machine load hits plain and speculative decoding alike.
Speculative outputs are checked token-identical to plain ones. "tok/call" is tokens emitted per row
per target forward (1 for plain; the mean accepted length, bonus token included, for speculation).
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import torch

from real.drafters.eagle import Drafter
from real.engine.generate import Engine, generate
from real.models.targets import load_target
from real.models.pretrain import pretrain
from real.settings import GenerateSettings, PretrainConfig
from real.tasks.gcd import GcdTask


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def get_target(args):
    path = Path(args.target) if args.target else Path("out/bench_spec") / args.preset
    if not (path / "config.json").is_file():
        if args.target:
            raise SystemExit(f"{path}: no checkpoint there; run `tltsim real pretrain` or omit --target")
        t = time.perf_counter()
        pretrain(PretrainConfig(preset=args.preset), path)
        print(f"pretrained {args.preset} into {path} in {time.perf_counter() - t:.0f} s")
    return load_target(path, args.device), GcdTask.load(path), path


def get_drafter(target, task, args, target_path):
    """The drafter trained on the target's responses, kept in out/bench_spec/ for later runs with the same settings."""
    name = str(target_path.resolve()).strip("/").replace("/", "_")
    path = Path("out/bench_spec") / f"drafter-{name}-{args.train_problems}-{args.drafter_steps}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file():
        print(f"drafter: {path} (trained by an earlier run with the same settings)")
        return Drafter.load(path, target)
    with torch.enable_grad():
        drafter = train_drafter(target, task, args)
    drafter.save(path)
    return drafter


def train_drafter(target, task, args):
    rng = np.random.default_rng(1)
    prompts = [task.prompt_ids(p) for p in task.sample(rng, args.train_problems, "train")]
    t = time.perf_counter()
    run = generate(target, prompts, settings=GenerateSettings(max_new_tokens=task.max_response_tokens, eos_token_id=task.tokenizer.eos_id, collect_features=True))
    gen_s = time.perf_counter() - t
    pairs = [(f.prompt + f.tokens, f.features) for f in run.finished]
    drafter = Drafter.for_target(target, seed=0)
    t = time.perf_counter()
    losses = drafter.fit(pairs, steps=args.drafter_steps, batch_size=16, lr=3e-3, seed=0)
    print(f"drafter: {len(pairs)} responses ({sum(len(t) for t, _ in pairs)} tokens, generated in {gen_s:.0f} s), "
          f"{args.drafter_steps} steps in {time.perf_counter() - t:.0f} s, loss {np.mean(losses[:10]):.3f} -> "
          f"{np.mean(losses[-10:]):.3f}")
    return drafter


def decode(target, drafter, prompts, batch, mode, strategy, eos, max_new):
    """Decode `prompts` in chunks of `batch`; returns (tokens per prompt, seconds, row-iterations)."""
    out, seconds, row_calls = [], 0.0, 0
    for start in range(0, len(prompts), batch):
        engine = Engine(target, drafter, max_new_tokens=max_new, eos_token_id=eos)
        ids = engine.add(prompts[start : start + batch])
        t = time.perf_counter()
        while engine.running:
            row_calls += engine.step(mode, strategy).batch_size
        seconds += time.perf_counter() - t
        out += [engine.finished[i].tokens for i in ids]
    return out, seconds, row_calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="checkpoint directory (default: pretrain the preset into out/bench_spec/)")
    parser.add_argument("--preset", default="tiny-llama", help="preset to pretrain when --target is not given")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--train-problems", type=int, default=256, help="problems whose responses train the drafter")
    parser.add_argument("--drafter-steps", type=int, default=600)
    parser.add_argument("--prompts", type=int, default=16, help="held-out prompts decoded in every setting")
    parser.add_argument("--batches", type=_ints, default=[1, 4, 16], help="comma-separated batch sizes")
    parser.add_argument("--strategies", type=lambda text: text.split(","), default=["4_1_4", "6_1_6", "6_2_8"],
                        help="comma-separated depth_topk_verify strategies")
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting (the fastest counts)")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    print(f"python {platform.python_version()}, torch {torch.__version__}, {args.device}, "
          f"{torch.get_num_threads()} threads")
    target, task, path = get_target(args)
    print(f"target: {path} ({sum(p.numel() for p in target.parameters()) / 1e6:.2f} M parameters)")
    drafter = get_drafter(target, task, args, path)
    eos = task.tokenizer.eos_id
    prompts = [task.prompt_ids(p) for p in task.sample(np.random.default_rng(2), args.prompts, "test")]
    max_new = task.max_response_tokens
    print(f"{len(prompts)} held-out prompts, greedy; times exclude prefill; best of {args.repeats} runs per setting, "
          f"the settings of a batch size interleaved run by run")
    print(f"{'batch':>5} {'mode':>11} {'strategy':>8} {'tokens':>7} {'tok/s':>8} {'tok/call':>8} {'speedup':>7} "
          f"{'identical':>9}")
    for batch in args.batches:
        settings = [("decode", None)] + [("spec_decode", s) for s in args.strategies]
        best = {}  # setting -> (tokens per prompt, least seconds, row-iterations)
        for _ in range(args.repeats):
            for mode, strategy in settings:
                out, secs, calls = decode(target, drafter if mode == "spec_decode" else None, prompts, batch, mode,
                                          strategy, eos, max_new)
                if (mode, strategy) not in best or secs < best[mode, strategy][1]:
                    best[mode, strategy] = (out, secs, calls)
        ref, secs, _ = best["decode", None]
        base = sum(map(len, ref)) / secs
        for mode, strategy in settings:
            out, secs, calls = best[mode, strategy]
            tokens = sum(map(len, out))
            same = "-" if mode == "decode" else str(out == ref)
            print(f"{batch:>5} {mode:>11} {strategy or '-':>8} {tokens:>7} {tokens / secs:>8.0f} {tokens / calls:>8.2f} "
                  f"{tokens / secs / base:>7.2f} {same:>9}")


if __name__ == "__main__":
    main()
