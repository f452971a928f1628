"""Whether, and how closely, real runs have checked the simulator on each policy (tltsim/analysis/validation/
checked.py): the shipped pairs' record, the report's column citing it, and a user's own pair given with --validated."""
from __future__ import annotations

import re
import shutil
from dataclasses import replace
from html import unescape
from pathlib import Path

import pandas as pd
import pytest

from tltsim.analysis.report.page import build_report
from tltsim.analysis.validation.checked import CHECK_COLUMNS, shipped, validated_pairs, verdict
from tltsim.core.errors import TltsimError

ROOT = Path(__file__).resolve().parents[2]


def _cell(page: str, run: str) -> str:
    """The ranking's 'checked against a run' cell of `run`."""
    ranking = page[page.index('<table class="ranking">'):]
    head = [unescape(h) for h in re.findall(r"<th[^>]*>([^<]*)</th>", ranking[:ranking.index("</tr>")])]
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", ranking)[1:]:
        cells = [unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td>(.*?)</td>", row)]
        if cells[1] == run:
            return cells[head.index("checked against a run")]
    raise AssertionError(f"no row for {run}")


def test_the_verdict_gives_the_error_over_the_pairs_that_checked_a_policy():
    checks = pd.DataFrame([["tlt", "a", "v", "", 3, 1.2, 1.1, -0.05, 0], ["tlt", "b", "v", "", 3, 1.0, 1.08, 0.08, 0],
                           ["das", "c", "v", "", 3, 1.0, 1.02, 0.02, 0]], columns=CHECK_COLUMNS)
    assert verdict(checks, "tlt") == "-5.0% to +8.0% (2 pairs)"
    assert verdict(checks, "das") == "+2.0% (1 pair)"
    assert verdict(checks, "partial") == "not yet"


def test_the_shipped_record_checks_every_shipped_pair():
    runs = {p.name for p in (ROOT / "traces" / "runs").glob("real_*") if p.is_dir()}
    checks = shipped()
    assert list(checks.columns) == CHECK_COLUMNS
    assert set(checks["run"]) | set(checks["baseline"]) == runs  # every shipped run, in a pair
    assert checks["error"].to_numpy() == pytest.approx(
        (checks["predicted_speedup"] / checks["measured_speedup"] - 1).to_numpy(), abs=1e-4)


def test_the_ranking_cites_the_checks_of_each_policy(base, tlt):
    unpaired = replace(tlt, summary={**tlt.summary, "policy": "tlt-base"})  # no shipped pair of it
    page = build_report([base, tlt, unpaired])
    assert _cell(page, "tlt") == verdict(shipped(), "tlt") and "pairs)" in _cell(page, "tlt")
    assert _cell(page, "tlt-base") == "not yet"


def test_a_users_own_pair_is_checked_beside_the_shipped_ones(base, tlt, tmp_path):
    from tltsim.analysis.validation.checked import check_pairs

    for run in ("real_verl_cpu", "real_tlt_cpu"):
        shutil.copytree(ROOT / "traces" / "runs" / run, tmp_path / run)
        shutil.copy(ROOT / "traces" / "profiles" / "real_cpu_profile.csv", tmp_path / run / "profile.csv")
    pairs = validated_pairs([tmp_path / "real_verl_cpu", tmp_path / "real_tlt_cpu"])
    mine = check_pairs(pairs)
    # the same pair, replayed with the same profile (there each run's own copy of it), as the shipped record has it
    same = [c for c in CHECK_COLUMNS[:-1] if c != "profile"]
    assert mine["profile"].tolist() == [""]
    assert mine[same].round(6).equals(shipped().query("run == 'real_tlt_cpu'")[same].reset_index(drop=True).round(6))
    page = build_report([base, tlt], checks=pd.concat([shipped(), mine], ignore_index=True))
    n = int(re.search(r"\((\d+) pairs\)", verdict(shipped(), "tlt")).group(1))
    assert f"({n + 1} pairs)" in _cell(page, "tlt")


def test_validated_runs_are_refused_what_a_check_cannot_use(tmp_path):
    with pytest.raises(TltsimError, match="a verl run and at least one"):
        validated_pairs([tmp_path])
    with pytest.raises(TltsimError, match="not a run directory"):
        validated_pairs([tmp_path, tmp_path])
    for run in ("real_verl_cpu", "real_tlt_cpu"):
        shutil.copytree(ROOT / "traces" / "runs" / run, tmp_path / run)
    with pytest.raises(TltsimError, match="no profile.csv in it; measure one with `tltsim real profile"):
        validated_pairs([tmp_path / "real_verl_cpu", tmp_path / "real_tlt_cpu"])
    for run in ("real_verl_cpu", "real_tlt_cpu"):
        shutil.copy(ROOT / "traces" / "profiles" / "real_cpu_profile.csv", tmp_path / run / "profile.csv")
    with pytest.raises(TltsimError, match="the first run is the baseline, a verl run"):
        validated_pairs([tmp_path / "real_tlt_cpu", tmp_path / "real_verl_cpu"])
