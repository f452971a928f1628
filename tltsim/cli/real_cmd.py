"""`tltsim real ...`: commands that run models on real devices (torch + transformers).

The group's own parser and subcommands live in real/cli.py. This module only
passes the arguments on, importing `real.cli` when `tltsim real` is asked for; real.cli loads torch only
once a command runs, so no `--help` and no simulator command loads torch.
"""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("real", add_help=False,
                              help="run on real devices (torch): `tltsim real --help` lists the commands")
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=_run)


def _run(args) -> int:
    from real.cli import main  # torch-free until a command runs: real.cli imports torch after parsing

    return main((["--help"] if args.help else []) + args.argv)
