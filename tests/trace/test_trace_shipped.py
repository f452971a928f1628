"""The shipped traces: each is regenerated bit for bit by the command in traces/README.md."""
import re
import shlex
from pathlib import Path

import pytest

from tltsim.cli import main
from tltsim.trace import load

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = re.findall(r"^tltsim trace synth .*$", (ROOT / "traces" / "README.md").read_text(), flags=re.M)


def test_readme_lists_a_command_for_every_shipped_trace():
    targets = sorted(shlex.split(c)[-1] for c in COMMANDS)
    shipped = sorted(f"traces/synthetic/{p.name}" for p in (ROOT / "traces" / "synthetic").glob("*.parquet"))
    assert len(shipped) >= 3 and "traces/synthetic/dapo_like.parquet" in shipped
    assert targets == shipped


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: shlex.split(c)[-1])
def test_command_regenerates_the_file_exactly(tmp_path, command, capsys):
    argv = shlex.split(command)[1:]
    assert argv[-2] == "-o"
    shipped = ROOT / argv[-1]
    argv[-1] = str(tmp_path / shipped.name)
    assert main(argv) == 0
    new, old = load(tmp_path / shipped.name), load(shipped)
    assert new.df.equals(old.df)
    assert new.meta == old.meta
    assert old.meta.provenance.endswith(f"Regenerate: {' '.join(shlex.split(command)[:-2])} -o FILE")


def test_shipped_traces_are_sized_for_real_use():
    for path in (ROOT / "traces" / "synthetic").glob("*.parquet"):
        t = load(path)
        per_step = t.df.groupby("step").size()
        assert per_step.min() >= 500 and len(per_step) >= 20, path.name  # hundreds a step, tens of steps
        assert path.stat().st_size < 1_000_000
