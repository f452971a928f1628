"""Every option of every `tltsim` (sub)command has help, and every default shows in one style, `(default: X)` at
the end of the option's help (tltsim.core.argparser.HelpFormatter appends it; an option whose argparse default is None
states its fallback by hand, in the same form), `tltsim real`'s commands (real/cli.py) as the rest."""
from __future__ import annotations

import argparse
import re

import pytest

from real.cli import build_parser as real_parser
from tltsim.cli import build_parser

DEFAULT = re.compile(r"\(default: [^\n]+\)$")


def _parsers(parser, path=("tltsim",)):
    """(command path, parser) of `parser` and every subcommand under it; the `real` group is real/cli's parser."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if path == ("tltsim",) and name == "real":
                    yield from _parsers(real_parser(), ("tltsim", "real"))
                    continue
                yield from _parsers(sub, (*path, name))


def _options():
    """(command, option, action, its help as --help prints it) for every option of every walked parser."""
    out = []
    for path, parser in _parsers(build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            text = formatter._expand_help(action) if action.help else ""
            out.append((" ".join(path), "/".join(action.option_strings), action, " ".join(text.split())))
    return out


OPTIONS = _options()


def test_the_walk_reaches_every_command_group():
    commands = {cmd for cmd, *_ in OPTIONS}
    assert {"tltsim simulate", "tltsim compare", "tltsim trace stats", "tltsim trace synth", "tltsim fit-drafter",
            "tltsim validate", "tltsim sweep", "tltsim report"} <= commands
    assert {"tltsim real run", "tltsim real speed", "tltsim real profile", "tltsim real drafter"} <= commands
    assert len(OPTIONS) > 100


@pytest.mark.parametrize("cmd, flag, action, text", OPTIONS, ids=[f"{c} {f}" for c, f, *_ in OPTIONS])
def test_every_option_has_help_and_its_default_in_the_one_style(cmd, flag, action, text):
    assert text, f"{cmd} {flag}: no help text"
    shown = action.default not in (None, False, [], argparse.SUPPRESS)
    if shown:
        assert text.endswith(f"(default: {action.default})"), f"{cmd} {flag}: default {action.default!r} not shown"
    # any other mention of a default is the same form, once, at the end
    assert text.count("(default: ") <= 1, f"{cmd} {flag}: more than one default"
    if "(default: " in text:
        assert DEFAULT.search(text[text.index("(default: "):]), f"{cmd} {flag}: default not at the end: {text}"
    assert not re.search(r"(?<!\()default:|\(default(?!: )", text), f"{cmd} {flag}: a default in another style: {text}"


def test_an_option_without_an_argparse_default_that_names_one_uses_the_same_form():
    """The formatter's check: it appends nothing where the help already ends with `(default: X)`."""
    parser = build_parser()
    help_text = " ".join(parser._subparsers._group_actions[0].choices["simulate"].format_help().split())
    assert "(default: 0)" in help_text  # --seed, from SimConfig
    assert "(default 0)" not in help_text and "default: the config" not in help_text
