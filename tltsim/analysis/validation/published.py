"""Which setups published GPU figures have checked the simulator on: the report's line for a setup outside them.

`python benchmarks/bench_fidelity.py` sets the simulator up for published figures of this field (docs/fidelity.md)
and records, for each row that ran a comparison, its model, GPU, policy, group (fitted: the figure set a
parameter; held out: it set none) and error in data/published.csv. A comparison is inside what was checked for a
policy where a held-out row ran that policy on a model of the same size class on the same GPU.

    published()                               -> data/published.csv's rows
    size_class(model)                         -> "under 10B", "of 10B to 40B" or "over 40B" (its parameters)
    unchecked(policies, model, gpu, rows)     -> the policies no held-out row checked on that setup
    outside(policies, model, gpu, rows)       -> the report's line ("" where every policy was checked)
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from tltsim.core.glossary import BOUNDS

RECORD = Path(__file__).parent / "data" / "published.csv"
CLASSES = ((10e9, "under 10B"), (40e9, "of 10B to 40B"), (float("inf"), "over 40B"))  # parameters below -> class


def published() -> pd.DataFrame:
    """The published figures' rows, as benchmarks/bench_fidelity.py recorded them."""
    return pd.read_csv(RECORD)


def size_class(model: str) -> str | None:
    """The size class of model preset (or fetched model directory) `model` by its parameters; None where
    tltsim.hardware does not know it."""
    from tltsim.core.errors import TltsimError
    from tltsim.hardware import load_model

    try:
        params = load_model(model).params
    except TltsimError:
        return None
    return next(name for bound, name in CLASSES if params < bound)


def held_out(model: str, gpu: str, rows: pd.DataFrame) -> pd.DataFrame:
    """The held-out rows of `rows` that ran on a model of `model`'s size class on `gpu`."""
    cls = size_class(model)
    held = rows[(rows["group"] == "held out") & (rows["gpu"] == gpu)]
    return held[held["model"].map(size_class) == cls] if cls else held.iloc[:0]


def unchecked(policies: list[str], model: str, gpu: str, rows: pd.DataFrame) -> list[str]:
    """The policies (verl and the bounds aside) that no held-out row of `rows` ran on a model of `model`'s size
    class on `gpu`."""
    return _missing(_compared(policies), held_out(model, gpu, rows))


def outside(policies: list[str], model: str, gpu: str, rows: pd.DataFrame | None = None) -> str:
    """The report's one line: which of `policies` no published figure held out from fitting checked on a model of
    this size class on this GPU, and how far off the simulator came on those it did; "" where every policy was
    checked."""
    rows = published() if rows is None else rows
    held, considered = held_out(model, gpu, rows), _compared(policies)
    missing = _missing(considered, held)
    if not missing:
        return ""
    errors = [f"{p} {e.min():+.0%}" + (f" to {e.max():+.0%}" if len(e) > 1 else "")
              for p in considered if len(e := held.loc[held["policy"] == p, "error"])]
    setup = f"a model {size_class(model) or 'of unknown size'} on {gpu}"
    these = "this policy" if len(considered) == 1 else f"these {len(considered)} policies"
    return (f"Published GPU figures held out from fitting check {len(errors)} of {these} on {setup} (docs/fidelity.md)"
            + (f"; the simulator's error there: {', '.join(errors)}" if errors else "")
            + f"; none checks {', '.join(missing)}.")


def _compared(policies: list[str]) -> list[str]:
    """The policies a comparison compares with verl: each once, verl and the bounds aside."""
    return [p for p in dict.fromkeys(policies) if p != "verl" and p not in BOUNDS]


def _missing(policies: list[str], held: pd.DataFrame) -> list[str]:
    """The `policies` no row of `held` ran."""
    checked = set(held["policy"])
    return [p for p in policies if p not in checked]
