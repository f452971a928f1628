"""A single-file output (a trace, a report, a calibration, a figure, a timeline) replaces a file tltsim wrote
without a word, and any other file only under --force; the mark each format carries is what tells them apart."""
from __future__ import annotations

import json
import shutil

import pytest

from tltsim.analysis.calibration import FORMAT
from tltsim.analysis.report.export import write_chrome_trace
from tltsim.cli import main
from tltsim.core.marks import written_by_tltsim
from tltsim.core.records import Result
from tltsim.trace import load

SYNTH = ["trace", "synth", "dapo", "--steps", "1", "--prompts", "2", "--group", "2", "--max-len", "64", "--seed"]


@pytest.mark.parametrize("name", ["t.parquet", "t.csv", "t.jsonl"])
def test_a_trace_tltsim_wrote_is_replaced_without_force(tmp_path, name):
    out = tmp_path / name
    assert main([*SYNTH, "0", "-o", str(out)]) == 0
    first = out.read_bytes()
    assert main([*SYNTH, "1", "-o", str(out)]) == 0
    assert out.read_bytes() != first and "--seed 1 " in load(out).meta.provenance
    assert main(["trace", "convert", str(out), str(out.with_name("c" + name))]) == 0
    assert main(["trace", "convert", str(out), str(out.with_name("c" + name))]) == 0


def test_force_replaces_a_users_file_and_without_it_nothing_changes(tmp_path, capsys):
    out = tmp_path / "t.parquet"
    out.write_text("a user's notes\n")
    assert main([*SYNTH, "0", "-o", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err and out.read_text() == "a user's notes\n"
    assert main([*SYNTH, "0", "-o", str(out), "--force"]) == 0
    assert len(load(out).df) == 4 and written_by_tltsim(out)


def test_a_report_and_its_figures_are_replaced_without_force(result_dir, tmp_path):
    page, figs = tmp_path / "r.html", tmp_path / "figs"
    for _ in range(2):
        assert main(["report", str(result_dir), "-o", str(page), "--figures", str(figs)]) == 0
    pngs = sorted(figs.iterdir())
    assert written_by_tltsim(page) and pngs and all(written_by_tltsim(p) for p in pngs)


def test_each_format_carries_its_mark(result_dir, tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"format": FORMAT, "phases": {}}))
    timeline = write_chrome_trace(Result.load(result_dir), tmp_path / "timeline.json")
    shutil.copy(result_dir / "manifest.json", tmp_path / "manifest.json")
    assert all(written_by_tltsim(p) for p in (cal, timeline, tmp_path / "manifest.json"))
    user = {"u.json": '{"format": "mine"}', "u.html": "<!DOCTYPE html><html><head><meta charset=\"utf-8\">",
            "u.parquet": "PAR1 not really", "u.png": "\x89PNG\r\n\x1a\n", "u.csv": "a,b\n1,2\n", "u.pt": "PK\x03\x04"}
    for name, text in user.items():
        (tmp_path / name).write_text(text)
        assert not written_by_tltsim(tmp_path / name), name
    assert not written_by_tltsim(tmp_path / "missing.json") and not written_by_tltsim(tmp_path)
