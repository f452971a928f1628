"""The argument parser of every `tltsim` command: one-line errors, defaults in --help, bare groups show help.

    parser = Parser(prog="tltsim", ...)      # its subparsers are Parsers too
    args = parse(parser, argv)               # a bad argument: one line naming the (sub)command, exit 2
    p.add_argument("--steps", type=whole(1))  # numbers checked where they enter: whole(min), number(min, above, max)
    add_fields(p, RunConfig, {"steps": {"type": whole(1)}})  # a flag per field, its help the field's comment
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import re
import sys
import warnings

from tltsim.core.errors import TltsimNote


class HelpFormatter(argparse.HelpFormatter):
    """Appends `(default: X)` to an option's help where it has a default its help does not already state.

    The one style of a default in every `tltsim` help: `(default: X)` at the end of the option's help. An option
    whose argparse default is None (so that a config file can set it) states what it falls back to in that
    same form, written by hand (tests/cli/test_help_text.py checks both)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("(default: " in text or not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS)
                or isinstance(action, argparse._VersionAction)):
            return text
        return text + " (default: %(default)s)"


class PreformattedHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """HelpFormatter that prints a description and an epilog as written (a glossary laid out by hand)."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (the message and where to read the usage) on stderr, exit 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.commands = None

    def add_subparsers(self, **kwargs):
        """Subcommands; the group named without one prints its help (`tltsim`, `tltsim trace`)."""
        kwargs.setdefault("required", False)
        self.commands = super().add_subparsers(**kwargs)
        self.set_defaults(func=lambda args: self.print_help())
        return self.commands

    def chosen(self, args) -> "Parser":
        """The parser of the deepest (sub)command `args` were parsed for."""
        name = getattr(args, self.commands.dest, None) if self.commands else None
        return self if name is None else self.commands.choices[name].chosen(args)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


def parse(parser: Parser, argv: list[str] | None) -> argparse.Namespace:
    """Parse argv; an unknown argument is reported by the subcommand it was given to, not by the top parser."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.chosen(args).error(f"unrecognized argument(s): {' '.join(extra)}")
    return args


def show_progress(args) -> bool:
    """Progress bars go to a terminal only (a log or a pipe would get every carriage-return update)."""
    return not args.no_progress and sys.stderr.isatty()


def add_renamed(parser: argparse.ArgumentParser, old: str, new: str, **kw) -> None:
    """Flag `old` read as `new` (a flag renamed; `kw`: its nargs, type), hidden from --help, with one note line
    when given."""
    class Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            warnings.warn(TltsimNote(f"{old} reads as {new}, its name now"))
            setattr(namespace, self.dest, values)

    parser.add_argument(old, dest=new.lstrip("-").replace("-", "_"), action=Renamed, help=argparse.SUPPRESS, **kw)


def add_force(parser: argparse.ArgumentParser, what: str) -> None:
    """--force: replace `what` (a file) even where it exists and tltsim did not write it (tltsim.core.io.check_file)."""
    parser.add_argument("--force", action="store_true", help=f"replace {what} even if it exists and is not a file "
                        f"tltsim wrote (without it such a file is left as is and the command stops)")


def whole(minimum: int, maximum: int | None = None):
    """An argparse type: a whole number in [minimum, maximum]; anything else is the flag's one-line error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum or (maximum is not None and value > maximum):
            upto = f" and <= {maximum}" if maximum is not None else ""
            raise argparse.ArgumentTypeError(f"{text} is out of range; give a whole number >= {minimum}{upto}")
        return value
    return parse


def number(minimum: float | None = None, above: float | None = None, maximum: float | None = None):
    """An argparse type: a finite number >= minimum (or > above, and <= maximum where given)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        ok = (math.isfinite(value) and (minimum is None or value >= minimum) and (above is None or value > above)
              and (maximum is None or value <= maximum))
        if not ok:
            bounds = [f">= {minimum}" if minimum is not None else "", f"> {above}" if above is not None else "",
                      f"<= {maximum}" if maximum is not None else ""]
            raise argparse.ArgumentTypeError(f"{text} is out of range; give a finite number "
                                             f"{' and '.join(b for b in bounds if b)}".rstrip())
        return value
    return parse


def field_help(cls) -> dict[str, str]:
    """Each field of dataclass `cls` -> its help: the comment on its declaration line and the comment lines right
    below it, joined, as the class writes them (so a flag made from a field has one declaration, its help in it)."""
    out, name = {}, None
    for line in inspect.getsource(cls).splitlines():
        field = re.match(r"    (\w+): [^#]*?(?:#\s?(.*))?$", line)
        more = re.match(r"\s+#\s?(.*)$", line)
        if field:
            name = field.group(1)
            out[name] = (field.group(2) or "").strip()
        elif more and name is not None:
            out[name] = f"{out[name]} {more.group(1).strip()}".strip()
        else:
            name = None
    return out


def add_fields(parser: argparse.ArgumentParser, cls, flags: dict[str, dict], help: dict | None = None) -> None:
    """A flag `--field-name` for each field of dataclass `cls` that `flags` names, in the class's order: the
    field's default, the argparse keywords `flags` gives it (type, choices, a default of its own), and as help
    its comment in the class (`field_help`) unless `help` gives one. A field whose default is False is a switch."""
    comments = field_help(cls)
    for f in dataclasses.fields(cls):
        if f.name not in flags:
            continue
        kw = {"help": (help or {}).get(f.name, comments.get(f.name, "")), **flags[f.name]}
        if f.default is False:
            kw.setdefault("action", "store_true")
        else:
            kw.setdefault("default", f.default)
        parser.add_argument("--" + f.name.replace("_", "-"), **kw)
