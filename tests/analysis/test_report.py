"""The HTML report: each run's summary table and config, embedded images, a comparison with speedups."""
import base64
import json
import re
import struct
from dataclasses import replace
from datetime import datetime, timezone
from html import unescape

import pytest

from tltsim.cli import main
from tltsim.core.glossary import COLUMNS
from tltsim.analysis.report.plots.style import DPI, PAGE_WIDTH_IN, labelled
from tltsim.analysis.report.page import COMPARISON_METRICS, build_report, comparison_table, default_title, write_report

IMG = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def images(page):
    found = IMG.findall(page)
    for data in found:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    return found


@pytest.fixture(scope="module")
def page(base, tlt) -> str:
    """The report of verl and TLT, built once for the tests that read it."""
    return build_report([base, tlt])


def test_comparison_report_has_every_run_table_config_and_images(base, tlt, page):
    for anchor in ("summary", "explained", "table", "glossary", "charts", "lengths-0", "runs"):
        assert f'<h2 id="{anchor}">' in page and f'<a href="#{anchor}">' in page  # each section in the contents
    assert '<details class="run" id="run-verl">' in page and '<details class="run" id="run-tlt">' in page
    for r in (base, tlt):  # each run's summary table: every metric, its value
        for metric, value in r.summary.items():
            assert f"<td>{metric}</td>" in page
        assert f"<td>{r.summary['makespan_s']:,.1f}</td>" in page
        assert f"<td>{r.summary['idle_fraction']:.3f}</td>" in page
        config = json.dumps(r.config, indent=2, sort_keys=True, default=str)
        assert config in unescape(page)
    assert page.count("<details><summary>config of") == 2
    # comparison: speedup, breakdown, gantt, idle, drafter; lengths; per run: batch, utilisation (+ tuner for tlt)
    assert len(images(page)) == 5 + 1 + 2 + 3
    assert "http" not in page.replace("http-equiv", "")  # nothing to fetch: readable offline
    assert "<script" not in page


def ranking_rows(page):
    """(place, policy, speedup) of each row of the summary's ranking table."""
    table = page[page.index('<table class="ranking">'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r'<tr(?: class=bound)?><td>([^<]*)</td><td><span class="swatch"[^>]*></span>([^<]*)</td>'
                      r"<td>([0-9.]+)×</td>", table)
    return [(place, unescape(name), float(speed)) for place, name, speed in rows]


def test_summary_ranks_by_speedup_with_the_bounds_apart(base, tlt):
    ideal = replace(base, summary={**base.summary, "policy": "ideal", "makespan_s": base.summary["makespan_s"] / 10})
    slow = replace(tlt, summary={**tlt.summary, "policy": "slow", "makespan_s": base.summary["makespan_s"] * 2})
    page = build_report([base, tlt, slow, ideal])
    rows = ranking_rows(page)
    assert [name for _, name, _ in rows] == ["tlt", "verl", "slow", "ideal"]
    assert [place for place, _, _ in rows] == ["1", "2", "3", "bound"]
    speeds = [s for _, _, s in rows[:-1]]
    assert speeds == sorted(speeds, reverse=True)
    assert speeds[0] == pytest.approx(round(base.summary["makespan_s"] / tlt.summary["makespan_s"], 2))
    headline = unescape(re.search(r'<p class="headline">(.*?)</p>', page).group(1))
    assert headline.startswith("Fastest here: tlt,") and "ideal (10.00×) is a bound, not a policy." in headline
    assert "ideal is a bound, not a policy: " in unescape(page)  # explained, with what it bounds


def test_the_title_counts_policies_not_bounds(base, tlt, page):
    named = [replace(tlt, summary={**tlt.summary, "policy": p}) for p in ("static-sd", "partial", "migrate")]
    ideal = replace(base, summary={**base.summary, "policy": "ideal"})
    assert default_title(labelled([base, tlt, *named, ideal])) == "Comparison of 5 policies against verl"  # 6 runs
    assert default_title(labelled([base, tlt, ideal])) == "Comparison: verl, tlt, ideal"
    assert unescape(re.search(r"<h1>(.*?)</h1>", page).group(1)) == default_title(labelled([base, tlt]))  # the page's


def test_every_table_column_has_a_glossary_entry(page):
    glossary = page[page.index('<dl class="glossary">'):page.index("</dl>")]
    defined = {unescape(t) for t in re.findall(r"<dt>([^<]*)</dt>", glossary)}
    tables = page[page.index('<h2 id="summary">'):page.index('<h2 id="glossary">')]
    headers = re.findall(r"<th( title=\"[^\"]*\")?>([^<]*(?:<wbr>[^<]*)*)</th>", tables)
    names = {unescape(name.replace("<wbr>", "")) for _, name in headers} - {"#", "why, from the results"}
    assert {"run", "speedup", "makespan_s", "sd_share", "trained_len_ratio", "rollout speedup",
            "off-policy cost"} <= names
    assert names <= defined
    for title, name in headers:
        if unescape(name.replace("<wbr>", "")) in names:
            assert title, f"column {name} has no tooltip"
    assert set(COMPARISON_METRICS) <= set(COLUMNS)


def test_figures_are_shown_at_the_size_they_were_drawn_and_fit_the_page(page):
    figures = re.findall(r'src="data:image/png;base64,([^"]+)" width="(\d+)" height="(\d+)"', page)
    assert len(figures) >= 4  # the report's charts are there to be checked (none would pass the loop below)
    for data, width, height in figures:
        png = base64.b64decode(data)
        assert struct.unpack(">II", png[16:24]) == (int(width), int(height))
        assert int(width) <= PAGE_WIDTH_IN * DPI + 1


def test_comparison_table_speedup_is_against_the_first(base, tlt):
    table = comparison_table([base, tlt])
    assert table["run"].tolist() == ["verl", "tlt"]
    assert table["speedup"].tolist() == pytest.approx([1.0, base.summary["makespan_s"] / tlt.summary["makespan_s"]])
    assert "sd_share" in table.columns


def test_single_run_report_has_no_comparison(base, tmp_path):
    path = write_report([base], tmp_path / "r.html")
    page = path.read_text()
    assert "Comparison" not in page and '<h2 id="runs">Run: verl</h2>' in page and "<details class" not in page
    # gantt, breakdown, idle, batch, utilisation, lengths; no speculation figures
    assert len(images(page)) == 6
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_report_cli_from_result_dirs(base, tlt, tmp_path, capsys):
    base.save(tmp_path / "a")
    tlt.save(tmp_path / "b")
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "out.html"),
                 "--title", "A <b> test", "--figures", str(tmp_path / "figs")]) == 0
    page = (tmp_path / "out.html").read_text()
    assert "<h1>A &lt;b&gt; test</h1>" in page
    assert 'id="run-verl"' in page and 'id="run-tlt"' in page
    assert f"wrote {tmp_path / 'out.html'}" in capsys.readouterr().out
    figs = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert figs == sorted(["speedup.png", "step_breakdown.png", "gantt.png", "idle_per_step.png", "drafter.png",
                           "lengths.png", "verl_batch_size.png", "verl_utilisation.png", "tlt_batch_size.png",
                           "tlt_utilisation.png", "tlt_tuner.png"])
    embedded = set(images(page))  # the files are the page's images
    assert {base64.b64encode((tmp_path / "figs" / f).read_bytes()).decode() for f in figs} == embedded


def test_report_cli_on_a_missing_result_is_one_line_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope"), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "nope: does not exist; give a result directory" in err and err.count("\n") == 1
    assert not (tmp_path / "x.html").exists()


def test_duplicate_run_names_are_told_apart(base, tlt):
    assert [label for label, _ in labelled([base, tlt, base, base])] == ["verl", "tlt", "verl #2", "verl #3"]


def test_compare_writes_the_report_by_default(trace_file, tmp_path):
    out = tmp_path / "cmp"
    args = ["compare", "--trace", str(trace_file), "--gpus", "8", "--tp", "2", "--policies", "verl,tlt",
            "--no-progress", "-o"]
    assert main([*args, str(out)]) == 0
    page = (out / "report.html").read_text()
    assert 'id="run-verl"' in page and 'id="run-tlt"' in page and images(page)
    assert main([*args, str(tmp_path / "plain"), "--no-report"]) == 0
    assert not (tmp_path / "plain" / "report.html").exists() and (tmp_path / "plain" / "tlt" / "summary.json").exists()


def test_the_same_runs_give_the_same_report_bytes(base, tlt, tmp_path):
    """The page once carried the minute it was made, so two reports of the same runs differed."""
    one = write_report([base, tlt], tmp_path / "a.html").read_bytes()
    two = write_report([base, tlt], tmp_path / "b.html").read_bytes()
    assert one == two and datetime.now(timezone.utc).strftime("%Y-%m-%d").encode() not in one


def test_a_long_reason_shows_its_first_clause_and_folds_the_rest():
    from tltsim.analysis.report.html import folded

    assert folded("short & plain", 20) == "short &amp; plain"
    f = folded("1.50× faster: rollout takes 12 s against 22 s; it ends a step before all finish", 60)
    assert f == ('<details class="fold"><summary>1.50× faster: rollout takes 12 s against 22 s</summary>'
                 "it ends a step before all finish</details>")
    f = folded("The baseline: rollout is 74% of its time, 42% of rollout is the long tail.", 30)
    assert "<summary>The baseline: rollout is 74% …</summary>… of its time, 42%" in f
    f = folded("x" * 50, 20)  # no space to cut at: cut inside the word, nothing lost
    assert f == f'<details class="fold"><summary>{"x" * 20} …</summary>… {"x" * 30}</details>'
