"""Every command that README.md and docs/cli.md give runs as written.

The commands are read from the pages' ```bash blocks, in order, as a reader would copy them. Each runs in a
scratch directory holding the repository's inputs (traces/, examples/) as links, so what it writes under
out/ stays there and a later command reads what an earlier one wrote. Commands that run a model for
minutes (`tltsim real run | pretrain | profile | drafter | speed`) and `make` are checked without being run:
their own argument parser must accept them, every input they name must exist (in the repository or written
by a command above them), and a make target must be one the Makefile has.

Smaller inputs, same command lines: in the scratch directory the shipped synthetic traces the pages simulate
(`SMALL`) hold the first few prompt groups of each of their steps, every step kept (so a `--steps` range on a
page selects what it would on the full trace); every other input is the repository's own file. A command runs
its whole path (trace, simulation of every policy, tuning, report, results) on them, as written, in a fraction
of the time the full traces take. A command that both pages give, with the same inputs (written by the same
commands where they are outputs of earlier ones), runs once: the second page's check reads the first one's run.
"""
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tltsim.cli import build_parser
from tltsim.trace import load as load_trace, save as save_trace

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/cli.md"]
PARSED_ONLY = [("real", "run"), ("real", "pretrain"), ("real", "profile"), ("real", "drafter"), ("real", "speed")]
OUTPUT_FLAGS = ("-o", "--out", "--save-calibration")
# the shipped traces the pages simulate, and the prompt groups of each step the scratch directory's copy keeps
SMALL = {"traces/synthetic/dapo_like.parquet": 16, "traces/synthetic/agentic.parquet": 8}


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


def linked(src: Path, dst: Path, small: dict[Path, int]) -> None:
    """dst mirrors src: a link to src where nothing under it is in `small`, else a directory of links in which
    each trace of `small` is a copy that keeps the first `small[trace]` prompt groups of each step."""
    if not any(path == src or src in path.parents for path in small):
        dst.symlink_to(src)
    elif src in small:
        trace = load_trace(src)
        df = trace.df
        firsts = df.groupby("step")["prompt_id"].transform(lambda ids: ids.isin(ids.unique()[:small[src]]))
        save_trace(type(trace).from_frame(df[firsts].reset_index(drop=True), trace.meta), dst)
    else:
        dst.mkdir()
        for child in src.iterdir():
            linked(child, dst / child.name, small)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A directory to run the pages' commands in: traces/ and examples/ linked from the repository, with the
    smaller copies of the traces in SMALL."""
    d = tmp_path_factory.mktemp("docs")
    small = {ROOT / path: groups for path, groups in SMALL.items()}
    for name in ("traces", "examples"):
        linked(ROOT / name, d / name, small)
    return d


@pytest.fixture(scope="module")
def runs():
    """The commands run in the scratch directory: (command, what made its inputs) -> its finished process; and
    path -> the key of the command that last wrote it."""
    return {}, {}


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_command_on_the_page_runs_as_written(page, scratch, runs):
    done, made_by = runs
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
            key = (tuple(argv), tuple((path, made_by.get(path)) for path in inputs(argv)))
            if key not in done or any(made_by.get(path) != key for path in outputs(argv)):  # else: ran as is
                done[key] = subprocess.run([sys.executable, "-m", "tltsim", *argv], cwd=scratch,
                                           capture_output=True, text=True)
                made_by.update(dict.fromkeys(outputs(argv), key))
            assert done[key].returncode == 0, f"{page}: `{line}` failed:\n{done[key].stderr[-2000:]}"
        written.update(outputs(argv))


def test_the_pages_hold_commands():
    """The check above reads what it should: the tour's and the reference's commands, the heavy ones too."""
    readme, cli = commands("README.md"), commands("docs/cli.md")
    assert "make test" in readme and any(c.startswith("tltsim real run") for c in readme)
    assert any(c.startswith("tltsim calibrate") for c in cli) and any(c.startswith("tltsim validate") for c in cli)
    assert not [c for c in readme + cli if "..." in c], "a command with a literal '...' cannot run as written"
    assert all(any(path in c for c in readme + cli) for path in SMALL), "SMALL names a trace no page simulates"
    astray = [(c, o) for c in readme + cli if c.startswith("tltsim ") for o in outputs(shlex.split(c)[1:])
              if not o.startswith("out/")]
    assert not astray, f"a command that writes outside out/ (which .gitignore keeps out of the repository): {astray}"
    assert "out/" in (ROOT / ".gitignore").read_text().split()
