"""`tltsim` command line: one module per command group, each with `register(subparsers)`."""
from __future__ import annotations

import argparse
import importlib
import sys

from tltsim.errors import TltsimError

# Command modules, in the order `tltsim --help` lists them. Each defines
# register(subparsers) and sets `func=` on its parsers.
COMMANDS = ["tltsim.cli.trace_cmd", "tltsim.cli.sim_cmd", "tltsim.cli.analysis_cmd", "tltsim.cli.validate_cmd", "tltsim.cli.real_cmd"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tltsim",
        description="Simulate reasoning-RL rollout long tails and the policies that tame them.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except TltsimError as e:
        print(f"tltsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tltsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
