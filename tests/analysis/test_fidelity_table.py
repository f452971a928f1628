"""The fidelity table's arithmetic (benchmarks/bench_fidelity.py): signed errors and each group's median and worst."""
import importlib.util
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "bench_fidelity", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_fidelity.py")
bench = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
spec.loader.exec_module(bench)


def test_errors_are_signed_and_each_group_gets_its_median_and_worst_absolute_error():
    over = bench.error(1.2, 1.0)   # predicted 20% over the published figure
    under = bench.error(1.5, 2.0)  # 25% under
    assert over == pytest.approx(0.2) and under == pytest.approx(-0.25)
    got = bench.summary([("held out", over), ("held out", under), ("fitted", -0.05)])
    assert got["held out"] == (2, pytest.approx(0.225), pytest.approx(0.25))
    assert got["fitted"] == (1, pytest.approx(0.05), pytest.approx(0.05))
