"""The report as a person sees it, laid out by headless Chromium at 1,400 px: each finding and each ranking reason
at most two lines (the rest folded), no section that has nothing to say, and a first screen that is the answer."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tltsim.analysis.report.page import build_report

from tests.analysis.conftest import run

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here (apt-get install chromium)")

# Appended to a copy of the page (the report itself holds no script): the layout, written into the page, which
# --dump-dom prints. Lines are the height of what a box holds over its line height: the fold's summary when folded.
MEASURE = """<script>
const lines = box => {  // the height of what it shows (not of its row; a fold's summary), in its lines
  const el = box.querySelector("summary") || box, r = document.createRange(); r.selectNodeContents(el);
  return Math.round(r.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight)); };
const out = {height: document.documentElement.scrollHeight,
  findings: [...document.querySelectorAll("ul.findings > li")].map(lines),
  reasons: [...document.querySelectorAll("table.ranking tr > td:last-child")].map(lines),
  ranges: [...document.querySelectorAll("div.checked-range > div")].map(lines),
  headings: [...document.querySelectorAll("h2, h3")].map(h => h.textContent),
  summary_top: document.getElementById("summary").getBoundingClientRect().top};
document.body.insertAdjacentHTML("beforeend", `<pre id="measure">${JSON.stringify(out)}</pre>`);
</script>"""


@pytest.fixture(scope="module")
def laid_out(base, tlt, tmp_path_factory):
    """A four-run comparison's page, its layout measured and its first screen captured."""
    results = [base, tlt, run("partial"), run("tail-batching")]
    page = build_report(results, tunings=[None] * len(results))
    d = tmp_path_factory.mktemp("screen")
    (d / "report.html").write_text(page, encoding="utf-8")
    (d / "measured.html").write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    flags = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--window-size=1400,1000"]
    dom = subprocess.run(flags + ["--dump-dom", (d / "measured.html").as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    subprocess.run(flags + [f"--screenshot={d / 'first.png'}", (d / "report.html").as_uri()], capture_output=True,
                   timeout=120, check=True)
    written = re.findall(r'<pre id="measure">(.*?)</pre>', dom, re.S)[-1]  # the last: the first is the script's
    measured = json.loads(written.replace("&quot;", '"').replace("&amp;", "&"))
    return measured, d / "first.png"


def test_each_finding_and_reason_is_at_most_two_lines(laid_out):
    measured, _ = laid_out
    assert measured["findings"] and measured["reasons"] and measured["ranges"]  # the ranking's checked-range line
    assert max(measured["findings"] + measured["reasons"] + measured["ranges"]) <= 2


def test_a_single_turn_comparison_has_no_multi_turn_section_and_opens_on_its_answer(laid_out):
    from PIL import Image

    measured, first = laid_out
    assert "Multi-turn trajectories" not in measured["headings"]
    assert "Speed and GPU time" in measured["headings"]
    assert measured["summary_top"] < 300  # the ranking starts on the first screen, under the title and contents
    with Image.open(first) as im:
        assert im.size == (1400, 1000) and len(im.convert("L").getcolors(1 << 16)) > 16  # drawn, not blank
