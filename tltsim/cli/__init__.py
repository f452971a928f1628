"""`tltsim` command line: one module per command group, each with `register(subparsers)`."""
from __future__ import annotations

import importlib
import os
import sys
import warnings
from importlib.metadata import version

from tltsim.core.argparser import Parser, parse
from tltsim.core.errors import TltsimError, TltsimNote, TltsimWarning

# Command modules, in the order `tltsim --help` lists them. Each defines
# register(subparsers) and sets `func=` on its parsers.
COMMANDS = ["tltsim.cli.trace_cmd", "tltsim.cli.sim_cmd", "tltsim.cli.analysis_cmd", "tltsim.cli.validate_cmd", "tltsim.cli.calibrate_cmd",
            "tltsim.cli.real_cmd"]


def build_parser(commands: list[str] = COMMANDS) -> Parser:
    """The `tltsim` parser with the command groups of the modules `commands` (default: all)."""
    parser = Parser(
        prog="tltsim",
        description="Simulate reasoning-RL rollout long tails and the policies that tame them.",
    )
    parser.add_argument("--version", action="version", version=f"tltsim {version('tltsim')}")
    sub = parser.add_subparsers(dest="command")
    for name in commands:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `tltsim real ...` goes to real/cli.py whole: no simulator module is imported for it (pandas, scipy: a second
    # on 2 cores), so its bad input is refused as soon as real/cli.py has checked it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", TltsimWarning)
            warnings.showwarning = _warning_printer()  # before parsing: a renamed flag notes itself there
            args = parse(build_parser(["tltsim.cli.real_cmd"] if argv[:1] == ["real"] else COMMANDS), argv)
            rc = args.func(args) or 0
        sys.stdout.flush()  # here, not at exit: a closed pipe is caught below
        return rc
    except TltsimError as e:
        print(f"tltsim: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head -1`): stop quietly, as a tool killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit has nowhere to fail
        return 128 + 13
    except KeyboardInterrupt:
        print("tltsim: interrupted", file=sys.stderr)
        return 130


def _warning_printer():
    """A warnings.showwarning that prints each TltsimWarning once, as one line on stderr (other warnings as
    Python shows them). Once by its text: a filter's once-registry is cleared whenever a module adds a filter."""
    shown = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if not issubclass(category, TltsimWarning):
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
        elif str(message) not in shown:
            shown.add(str(message))
            kind = "note" if issubclass(category, TltsimNote) else "warning"
            print(f"tltsim: {kind}: {message}", file=sys.stderr)

    return show


if __name__ == "__main__":
    sys.exit(main())
