"""The notebooks run as shipped and are what notebooks/build.py writes.

Each committed notebook is executed top to bottom in a fresh kernel (nbclient), on a temporary
copy, with notebooks/ as the working directory, as a user opening it would; any cell error fails.
Every notebook's tables must come out as committed: their written conclusions quote them.
"""
import importlib.util
import shutil
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


def _build():
    spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOKS / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _build()
NAMES = list(build.NOTEBOOKS)


def test_every_notebook_is_built_and_committed():
    assert NAMES == ["01_traces", "02_compare_policies", "03_tune_tlt", "04_validate"]
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_committed_cells_are_what_build_writes_with_outputs(name):
    committed = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    built = build.notebook(name)
    assert [(c.id, c.cell_type, c.source) for c in committed.cells] == [(c.id, c.cell_type, c.source) for c in built.cells]
    code = [c for c in committed.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "commit the notebook executed (build.py --execute)"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), "figures are inline"
    assert (NOTEBOOKS / f"{name}.ipynb").stat().st_size < 1_500_000


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name, tmp_path):
    copy = tmp_path / f"{name}.ipynb"
    shutil.copy(NOTEBOOKS / f"{name}.ipynb", copy)
    nb = nbformat.read(copy, as_version=4)
    build.execute(nb)  # cwd notebooks/; raises CellExecutionError on the first failing cell
    nbformat.write(nb, copy)
    assert all(c.execution_count is not None for c in nb.cells if c.cell_type == "code")
    # deterministic: seeded simulations, and 04's replay of the recorded runs (traces/real_*) with their profile
    committed = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    assert _tables(nb) == _tables(committed), (
        f"{name}: the tables differ from the committed notebook's; rerun `python notebooks/build.py --execute "
        f"{name}` and check the notebook's written text against the new numbers")


def _tables(nb) -> list[str]:
    """The text of every cell's result value (tables, series); prints, which carry timings, are left out."""
    return [o["data"]["text/plain"] for c in nb.cells if c.cell_type == "code"
            for o in c.outputs if o.output_type == "execute_result" and "image/png" not in o["data"]]
