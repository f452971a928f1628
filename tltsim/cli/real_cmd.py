"""`tltsim real ...`: commands that run models on real devices (torch + transformers).

The group's own parser and subcommands live in real/cli.py. This module only
passes the arguments on, importing `real` when a real command runs, so
`tltsim --help` and the simulator never load torch.
"""
from __future__ import annotations

import argparse

from tltsim.errors import TltsimError


def register(subparsers) -> None:
    p = subparsers.add_parser("real", add_help=False,
                              help="run on real devices (torch): `tltsim real --help` lists the commands")
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=_run)


def _run(args) -> int:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise TltsimError("`tltsim real` needs torch and transformers: pip install tltsim[real]") from None
    from real.cli import main

    return main((["--help"] if args.help else []) + args.argv)
