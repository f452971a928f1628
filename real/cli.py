"""The `tltsim real ...` command group.

tltsim/cli/real_cmd.py hands the arguments after `real` to `main`. A subcommand
is one function `add_<name>(sub)` that adds its parser with `func=` set to its
handler; list it in SUBCOMMANDS. Handlers raise TltsimError for bad input.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import fields

import numpy as np
import torch

from real.evaluate import evaluate
from real.models import PRESETS, load_target
from real.pretrain import PretrainConfig, pretrain
from real.task import GcdTask
from tltsim.errors import TltsimError


def add_pretrain(sub) -> None:
    defaults = {f.name: f.default for f in fields(PretrainConfig)}
    p = sub.add_parser("pretrain", help="train a target from scratch on the gcd task (default: about 3 min, 2 CPU cores)",
                       description="Supervised training on reference solutions; writes a save_pretrained directory "
                                   "with the task file beside it. Deterministic by --seed unless --seconds cuts it short.")
    p.add_argument("-o", "--out", required=True, help="checkpoint directory to write (replaced atomically)")
    p.add_argument("--preset", default=defaults["preset"], choices=sorted(PRESETS), help="model architecture and size")
    p.add_argument("--steps", type=int, default=defaults["steps"], help="optimizer steps (default %(default)s)")
    p.add_argument("--seconds", type=float, default=None, help="also stop after this many seconds of training")
    p.add_argument("--batch-tokens", type=int, default=defaults["batch_tokens"], help="padded tokens per batch")
    p.add_argument("--lr", type=float, default=defaults["lr"], help="peak learning rate")
    p.add_argument("--seed", type=int, default=defaults["seed"], help="model init and problem draws")
    p.add_argument("--eval", type=int, default=0, metavar="N",
                   help="then evaluate on N held-out problems, greedy and in sampled groups of 8")
    p.set_defaults(func=_pretrain)


def add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="accuracy and response lengths of a target on held-out problems")
    p.add_argument("target", help="a checkpoint directory written by `tltsim real pretrain`")
    p.add_argument("--problems", type=int, default=200, help="held-out problems (default %(default)s)")
    p.add_argument("--samples", type=int, default=8, help="sampled responses per problem at --temperature")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--seed", type=int, default=0, help="problem draws and sampling")
    p.add_argument("--device", default="cpu", help="torch device")
    p.set_defaults(func=_evaluate)


def add_profile(sub) -> None:
    p = sub.add_parser("profile", help="time the engine's decode / prefill / speculative / training steps over a grid",
                       description="Writes a CSV that the simulator's `profiled` cost model is fitted from "
                                   "(tltsim validate --profile). Run it on a quiet machine.")
    p.add_argument("-o", "--out", required=True, help="profile CSV to write")
    p.add_argument("--model", default="tiny-llama", help="a save_pretrained directory or a preset (default %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--batches", default="1,2,4,8,16", help="comma-separated batch sizes")
    p.add_argument("--contexts", default="32,128,256", help="comma-separated prompt lengths (tokens per request)")
    p.add_argument("--strategies", default=None, help="comma-separated depth_topk_verify (default: TLT's arms and 4_1_4)")
    p.add_argument("--repeats", type=int, default=3, help="timed iterations per cell")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_profile)


def _profile(args) -> int:
    from real.profile import profile
    from tltsim.io import atomic_path

    def ints(text, flag):
        try:
            out = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            out = []
        if not out or min(out) < 1:
            raise TltsimError(f"{flag} {text!r}: expected comma-separated positive integers, e.g. 1,4,16")
        return out

    kw = {} if args.strategies is None else {"strategies": [s.strip() for s in args.strategies.split(",") if s.strip()]}
    model = load_target(args.model, args.device)
    df = profile(model, batches=ints(args.batches, "--batches"), contexts=ints(args.contexts, "--contexts"),
                 repeats=args.repeats, seed=args.seed,
                 progress=lambda i, n: print(f"profiled {i}/{n} (batch, context) cells", flush=True), **kw)
    with atomic_path(args.out) as tmp:
        df.to_csv(tmp, index=False)
    print(f"wrote {args.out}: {len(df)} timings")
    return 0


SUBCOMMANDS = [add_pretrain, add_evaluate, add_profile]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tltsim real", description="Run models on real devices (torch + transformers).")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1),
                        help="torch CPU threads (default %(default)s)")
    sub = parser.add_subparsers(dest="real_command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    return args.func(args) or 0


def _pretrain(args) -> int:
    config = PretrainConfig(preset=args.preset, steps=args.steps, seconds=args.seconds,
                            batch_tokens=args.batch_tokens, lr=args.lr, seed=args.seed)
    t0 = time.perf_counter()
    result = pretrain(config, args.out, log=lambda step, loss: print(
        f"step {step}/{config.steps}  loss {loss:.4f}  {time.perf_counter() - t0:.0f} s", flush=True)
        if step % 50 == 0 or step == config.steps else None)
    print(f"wrote {args.out}: {result.steps} steps in {result.seconds:.0f} s, "
          f"final loss {np.mean(result.losses[-10:]):.4f} (mean of the last 10 steps)")
    if args.eval:
        _report(args.out, args.eval, samples=8, temperature=1.0, seed=args.seed, device="cpu")
    return 0


def _evaluate(args) -> int:
    _report(args.target, args.problems, args.samples, args.temperature, args.seed, args.device)
    return 0


def _report(target, problems: int, samples: int, temperature: float, seed: int, device: str) -> None:
    model, task = load_target(target, device), GcdTask.load(target)
    held_out = task.sample(np.random.default_rng(seed), problems, split="test")
    greedy = evaluate(model, task, held_out, greedy=True)
    print("greedy ", json.dumps(greedy.summary()))
    sampled = evaluate(model, task, held_out, greedy=False, temperature=temperature, samples=samples, seed=seed)
    print("sampled", json.dumps(sampled.summary()))
