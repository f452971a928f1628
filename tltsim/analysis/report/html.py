"""The page's HTML pieces: its style sheet, how a value is written in a cell (FORMATS), a table with the glossary's
tooltips, a figure embedded as a PNG at the size it was drawn (every figure of a page drawn together, in parallel:
draw_figures), a collapsed block, escaping."""
from __future__ import annotations

import base64
import html
import multiprocessing
import os
import re
import struct
from concurrent.futures import ProcessPoolExecutor

import pandas as pd

from tltsim.analysis.report import plots
from tltsim.core.glossary import DEFINITIONS

# How the comparison tables write each column (one format a column, so its digits line up).
FORMATS = {
    "speedup": "{:.2f}×", "makespan_s": "{:,.1f}", "mean_step_s": "{:.2f}", "mean_rollout_s": "{:.2f}",
    "rollout_s": "{:,.1f}",
    "tokens_per_s": "{:,.0f}", "idle_gpu_seconds": "{:,.0f}", "drafter_train_gpu_seconds": "{:,.0f}",
    "mean_accepted": "{:.2f}", "staleness_mean": "{:.2f}", "staleness_max": "{:.0f}", "turns_per_trajectory": "{:.2f}",
    **{k: "{:.3f}" for k in ("rollout_share", "tail_share", "idle_fraction", "sd_share", "resumed_fraction",
                             "dropped_fraction", "trained_len_ratio", "tool_wait_share")},
}

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1200px; margin: 1.5em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; font-size: 1.7em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.5em; }
h3 { margin: 1.2em 0 0.3em; }
.meta { color: #666; }
nav { background: #f6f8fa; border: 1px solid #e1e4e8; padding: 0.5em 1em; font-size: 0.92em; }
nav a { margin-right: 0.9em; white-space: nowrap; }
.headline { font-size: 1.08em; background: #eef5ec; border-left: 4px solid #2ca02c; padding: 0.6em 0.9em; }
.calibration { background: #eef2f8; border-left: 4px solid #1f77b4; padding: 0.5em 0.9em; }
.checked-range { background: #fbf6e9; border-left: 4px solid #e0a526; padding: 0.2em 0.9em; margin: 0.15em 0; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; vertical-align: top; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
th[title] { cursor: help; text-decoration: underline dotted #999; } th.text, td.text { text-align: left; }
table.ranking td:nth-child(2), table.ranking th:nth-child(2) { text-align: left; white-space: nowrap; }
table.ranking td:nth-last-child(-n+3), table.ranking th:nth-last-child(-n+3) { text-align: left; }
table.ranking tr.bound td { background: #f4f1fa; font-style: italic; }
table.ranking td:nth-last-child(3) { min-width: 22em; } table.ranking td:last-child { width: 24em; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.35em; border-radius: 2px; }
dl.glossary { display: grid; grid-template-columns: max-content auto; gap: 0.25em 1em; font-size: 0.92em; }
dl.glossary dt { font-family: monospace; font-weight: bold; } dl.glossary dd { margin: 0; }
ul.findings li { margin-bottom: 0.45em; } ul.findings li:has(> details.fold) { list-style: none; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.9em; }
details { margin: 0.6em 0; } summary { cursor: pointer; color: #2c5d8a; }
details.fold { margin: 0; } details.fold > summary { color: inherit; } details.fold[open] > summary { color: #2c5d8a; }
details.run { border: 1px solid #e1e4e8; padding: 0.3em 0.8em; } details.run > summary { font-weight: bold; }
.scroll { overflow-x: auto; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
"""


def collapsed(inner: str, summary: str, open_: bool) -> str:
    return f"<details{' open' if open_ else ''}><summary>{e(summary)}</summary>{inner}</details>"


def folded(text: str, limit: int) -> str:
    """`text` (escaped) whole where it has `limit` characters or fewer; else its first clause or sentence (to the
    first "; " or ". ", cut at a word before `limit` where longer) with the rest folded beneath it."""
    if len(text) <= limit:
        return e(text)
    ends = [i for i in (text.find("; "), text.find(". ")) if i > 0]
    cut = min(ends, default=len(text))
    if cut > limit:
        cut = text.rfind(" ", 0, limit)
        cut = cut if cut > 0 else limit  # no space before the limit: cut inside the word
        head, rest = text[:cut] + " …", "… " + text[cut:].lstrip()
    else:
        head, rest = text[:cut + (text[cut] == ".")], text[cut + 2:]  # a sentence keeps its full stop
    return f'<details class="fold"><summary>{e(head)}</summary>{e(rest)}</details>'


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


def cell(col: str, v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if col in FORMATS and isinstance(v, (int, float)) and not isinstance(v, bool):
        return FORMATS[col].format(v)
    return fmt(v)


def fmt(v) -> str:
    if isinstance(v, float):
        return "-" if v != v else (f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}")
    return str(v)


def table(df: pd.DataFrame) -> str:
    """An HTML table of `df`; each column name that the glossary defines carries its definition as a tooltip,
    and may wrap after an underscore (so a wide table fits the page). A "meaning" column is left-aligned prose."""
    head = "".join(f"<th{title(DEFINITIONS.get(c))}{' class=text' if c == 'meaning' else ''}>"
                   f"{e(c).replace('_', '_<wbr>')}</th>" for c in df.columns)
    rows = ["<tr>" + "".join(f"<td{' class=text' if c == 'meaning' else ''}>{e(cell(c, v))}</td>"
                             for c, v in zip(df.columns, row)) + "</tr>" for row in df.itertuples(index=False)]
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(rows)}</table></div>'


def title(text: str | None) -> str:
    return f' title="{e(text)}"' if text else ""


def figure(fig, caption: str, name: str, pngs: dict) -> str:
    """The figure as an embedded image shown at the size it was drawn, with its caption: a placeholder for its image
    until `draw_figures`, which puts its PNG in pngs[name + ".png"] (here, the figure to draw)."""
    if f"{name}.png" in pngs:
        raise ValueError(f"a second figure named {name!r} on one page")
    pngs[f"{name}.png"] = fig
    return f'<figure><img {_placeholder(name)} alt="{e(caption)}"><figcaption>{e(caption)}</figcaption></figure>'


def draw_figures(page: str, pngs: dict, workers: int | None = None) -> str:
    """`page` with each figure `figure` placed drawn in: every figure of `pngs` drawn to PNG bytes in place, on
    `workers` processes (default: one a core; each forked with the figures, so nothing is pickled but the bytes that
    come back; where processes cannot be forked, here), then its placeholder replaced by the image and its size."""
    names = [n for n, v in pngs.items() if not isinstance(v, bytes)]
    for name, png in zip(names, _pngs([pngs[n] for n in names], workers)):
        pngs[name] = png
        width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk: the PNG's size in pixels
        data = base64.b64encode(png).decode("ascii")
        page = page.replace(_placeholder(name.removesuffix(".png")),
                            f'src="data:image/png;base64,{data}" width="{width}" height="{height}"', 1)
    return page


def _placeholder(name: str) -> str:
    return f"\0figure {name}\0"


_FIGURES: list = []  # the figures a pool's forked workers draw, by index


def _png(i: int) -> bytes:
    return plots.png_bytes(_FIGURES[i])


def _pngs(figures: list, workers: int | None) -> list[bytes]:
    global _FIGURES
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = min(len(figures), workers or cores)
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [plots.png_bytes(f) for f in figures]
    _FIGURES = figures
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_png, range(len(figures))))
    finally:
        _FIGURES = []


def e(text) -> str:
    """`text` escaped for HTML."""
    return html.escape(str(text))
