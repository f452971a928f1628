"""The prepared GPU check runs end to end here at a tiny size on the CPU, so its first GPU run does not fail early."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def test_gpu_check_runs_every_step_at_a_tiny_size(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rc = module.main(["--device", "cpu", "--tiny", "-o", str(tmp_path)])
    results = json.loads((tmp_path / "results.json").read_text())
    assert rc == 0, {k: v for k, v in results["steps"].items() if v["status"] != "ok"}
    assert list(results["steps"]) == ["target", "drafter", "profile", "speed", "pair", "validate", "policies"]
    rows = json.loads((tmp_path / "speed.json").read_text())
    assert {(r["batch"], r["mode"]) for r in rows} == {(1, "decode"), (1, "spec_decode"), (2, "decode"), (2, "spec_decode")}
    assert all(r["identical"] for r in rows) and results["steps"]["drafter"]["tokens_per_call_4_1_4"] >= 1
    validation = json.loads((tmp_path / "validate.json").read_text())
    assert validation  # the simulator's prediction next to the pair
    policies = results["steps"]["policies"]  # each policy of the real backend beyond the pair ran on the device
    assert all(policies[f"{p}_makespan_s"] > 0 for p in module.POLICIES)
    # what comes back from the GPU machine: files at most two folders down, at most 8 of them
    back = [p for p in tmp_path.rglob("*") if p.is_file() and "work" not in p.relative_to(tmp_path).parts]
    assert len(back) <= 8 and {p.name for p in back} >= {"results.json", "profile.csv", "speed.json", "log.txt"}
