"""Every command that README.md and docs/cli.md give runs as written.

The commands are read from the pages' ```bash blocks, in order, as a reader would copy them. Each runs in a
scratch directory holding the repository's inputs (traces/, examples/) as links, so what it writes under
out/ stays there and a later command reads what an earlier one wrote. Commands that run a model for
minutes (`tltsim real run | pretrain | profile | drafter | speed`) and `make` are checked without being run:
their own argument parser must accept them, every input they name must exist (in the repository or written
by a command above them), and a make target must be one the Makefile has.
"""
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tltsim.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/cli.md"]
PARSED_ONLY = [("real", "run"), ("real", "pretrain"), ("real", "profile"), ("real", "drafter"), ("real", "speed")]
OUTPUT_FLAGS = ("-o", "--out", "--save-calibration")


def commands(page: str) -> list[str]:
    """The page's shell commands: each ```bash block's lines, continuations joined, comments dropped."""
    text = (ROOT / page).read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def parses(argv: list[str]) -> None:
    """argv (after `tltsim`) through the command's own parser, without running it."""
    if argv[0] == "real":
        from real.cli import build_parser as real_parser

        parser, argv = real_parser(), argv[1:]
    else:
        parser = build_parser()
    try:
        parser.parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"`tltsim {shlex.join(argv)}` does not parse (exit {e.code})")


def outputs(argv: list[str]) -> list[str]:
    """What argv writes: the values of its output flags, and `trace convert`'s second positional argument."""
    out = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in OUTPUT_FLAGS]
    return out + ([argv[3]] if argv[:2] == ["trace", "convert"] else [])


def inputs(argv: list[str]) -> list[str]:
    """The paths argv names that a command reads: under traces/, examples/ or out/, and not among its outputs."""
    return [a for a in argv if re.match(r"(traces|examples|out)/", a) and a not in outputs(argv)]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A directory to run the pages' commands in: traces/ and examples/ linked from the repository."""
    d = tmp_path_factory.mktemp("docs")
    for name in ("traces", "examples"):
        (d / name).symlink_to(ROOT / name)
    return d


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_command_on_the_page_runs_as_written(page, scratch):
    written = set()
    makefile = (ROOT / "Makefile").read_text()
    for line in commands(page):
        argv = shlex.split(line)
        if argv[0] == "make":
            assert re.search(rf"^{re.escape(argv[1])}:", makefile, re.M), f"{page}: `{line}`: no such make target"
            continue
        assert argv[0] == "tltsim", f"{page}: `{line}` is not a tltsim command"
        argv = argv[1:]
        for path in inputs(argv):
            assert (scratch / path).exists() or path in written, f"{page}: `{line}` reads {path}, which nothing made"
        if tuple(argv[:2]) in PARSED_ONLY:
            parses(argv)
        else:
            done = subprocess.run([sys.executable, "-m", "tltsim", *argv], cwd=scratch, capture_output=True,
                                  text=True)
            assert done.returncode == 0, f"{page}: `{line}` failed:\n{done.stderr[-2000:]}"
        written.update(outputs(argv))


def test_the_pages_hold_commands():
    """The check above reads what it should: the tour's and the reference's commands, the heavy ones too."""
    readme, cli = commands("README.md"), commands("docs/cli.md")
    assert "make test" in readme and any(c.startswith("tltsim real run") for c in readme)
    assert any(c.startswith("tltsim calibrate") for c in cli) and any(c.startswith("tltsim validate") for c in cli)
    assert not [c for c in readme + cli if "..." in c], "a command with a literal '...' cannot run as written"
    astray = [(c, o) for c in readme + cli if c.startswith("tltsim ") for o in outputs(shlex.split(c)[1:])
              if not o.startswith("out/")]
    assert not astray, f"a command that writes outside out/ (which .gitignore keeps out of the repository): {astray}"
    assert "out/" in (ROOT / ".gitignore").read_text().split()
