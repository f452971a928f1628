"""One self-contained HTML page about one or several runs: tables, figures (embedded PNGs), configs.

    write_report([Result, ...], "report.html")                  # figures_dir="figs" also saves each PNG

The page needs nothing but itself (no scripts, no links): images are base64 data URIs, configs sit
in collapsible blocks. With several results the first is the baseline: a comparison section
gives every run's speedup over it. Figures that need data a run lacks (speculation, per-iteration
records) are left out for that run.
"""
from __future__ import annotations

import base64
import html
import json
import re
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

import pandas as pd

from tltsim import plots
from tltsim.io import atomic_path, write_text
from tltsim.plots.style import labelled
from tltsim.records import Result

# Summary metrics of the comparison table, in this order, when some run has them.
COMPARISON_METRICS = [
    "makespan_s", "mean_step_s", "rollout_s", "rollout_share", "idle_fraction", "idle_gpu_seconds",
    "tail_share", "tokens_per_s", "sd_share", "mean_accepted", "drafter_train_gpu_seconds",
    "staleness_mean", "staleness_max", "resumed_fraction", "dropped_fraction",
]

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1180px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
.meta { color: #666; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.7em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
details { margin: 0.8em 0; } summary { cursor: pointer; color: #2c5d8a; }
.scroll { overflow-x: auto; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
"""


def load_results(dirs) -> list[Result]:
    """Results from result directories (each written by simulate / compare / real run)."""
    return [Result.load(d) for d in dirs]


def write_report(results, path: str | Path, title: str | None = None, figures_dir: str | Path | None = None) -> Path:
    """Render the report of `results` (the first is the baseline) and write it to `path` atomically.

    With `figures_dir`, every figure of the page is also written there as a PNG (atomically each).
    """
    path = Path(path)
    pngs: dict[str, bytes] = {}
    write_text(path, build_report(results, title, pngs))
    if figures_dir is not None:
        for name, data in pngs.items():
            with atomic_path(Path(figures_dir) / name) as tmp:
                tmp.write_bytes(data)
    return path


def build_report(results, title: str | None = None, pngs: dict | None = None) -> str:
    """The report as one HTML string; `pngs`, when given, receives each figure as file name -> PNG bytes."""
    runs = labelled(results)
    pngs = {} if pngs is None else pngs
    title = title or ("Comparison: " + ", ".join(label for label, _ in runs) if len(runs) > 1 else runs[0][0])
    parts = [f"<h1>{_e(title)}</h1>", f'<p class="meta">{_e(_setup(runs))}</p>']
    if len(runs) > 1:
        parts += _comparison(runs, pngs)
    parts += _lengths(runs, pngs)
    for label, r in runs:
        parts += _run_section(label, r, len(runs) == 1, pngs)
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


def _setup(runs) -> str:
    """One line: trace, cluster, model, when and by what the page was made."""
    c = runs[0][1].config
    cl = c.get("cluster", {})
    bits = [f"trace {c['trace']}" if c.get("trace") else "",
            f"{cl['gpus']} × {cl.get('gpu', 'GPU')}, TP {cl.get('tp')}" if "gpus" in cl else "",
            f"model {cl['model']}" if "model" in cl else "",
            f"{runs[0][1].summary.get('steps', len(runs[0][1].steps))} steps",
            f"made {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by tltsim {version('tltsim')}"]
    return " · ".join(b for b in bits if b)


def comparison_table(results) -> pd.DataFrame:
    """One row per run: the comparison metrics some run has, and the speedup (makespan) over the first."""
    runs = labelled(results)
    cols = [m for m in COMPARISON_METRICS if any(m in r.summary for _, r in runs)]
    table = pd.DataFrame([{"run": label, **{m: r.summary.get(m) for m in cols}} for label, r in runs])
    base = runs[0][1].summary["makespan_s"]
    table["speedup"] = [base / r.summary["makespan_s"] if r.summary["makespan_s"] else float("nan") for _, r in runs]
    return table


def _comparison(runs, pngs: dict) -> list[str]:
    results = [r for _, r in runs]
    out = ["<h2>Comparison</h2>",
           f"<p>Baseline: <b>{_e(runs[0][0])}</b>. Speedup = baseline makespan / run makespan.</p>",
           _table(comparison_table(results)),
           _figure(plots.speedup(results), "Speedup over the baseline: end to end and rollout alone.",
                   "speedup", pngs),
           _figure(plots.step_breakdown(results), "Mean time per step, by phase.", "step_breakdown", pngs),
           _figure(plots.gantt(results), "Each engine's states during the baseline's slowest rollout step, per run.",
                   "gantt", pngs),
           _figure(plots.idle_per_step(results), "GPU-seconds spent idle in each step.", "idle_per_step", pngs)]
    if any(_speculates(r) for r in results):
        out.append(_figure(plots.drafter(results), "Speculative decoding over steps (runs that speculate).",
                           "drafter", pngs))
    return out


def _lengths(runs, pngs: dict) -> list[str]:
    out = []
    traces = list(dict.fromkeys(r.config.get("trace", label) for label, r in runs))
    for i, trace in enumerate(traces):
        r = next(r for label, r in runs if r.config.get("trace", label) == trace)
        out += [f"<h2>Response lengths: {_e(trace)}</h2>",
                _figure(plots.length_distribution(r, title="Response lengths"),
                        "Generated tokens per response: histogram over all steps, CDF of each step.",
                        "lengths" if len(traces) == 1 else f"lengths_{i}", pngs)]
    return out


def _run_section(label: str, r: Result, single: bool, pngs: dict) -> list[str]:
    out = [f"<h2>Run: {_e(label)}</h2>", _table(_summary_frame(r))]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    figures = []  # (figure function, caption, file name suffix)
    if single:
        figures += [(plots.gantt, "Each engine's states during the slowest rollout step.", "gantt"),
                    (plots.step_breakdown, "Mean time per step, by phase.", "step_breakdown"),
                    (plots.idle_per_step, "GPU-seconds spent idle in each step.", "idle_per_step")]
    figures += [(plots.batch_size, "Running requests per engine in the slowest rollout step.", "batch_size"),
                (plots.utilisation, "GPUs in each state over time (the first 10 steps of a longer run).",
                 "utilisation")]
    if _speculates(r):
        if single:
            figures.append((plots.drafter, "Speculative decoding over steps.", "drafter"))
        figures.append((plots.tuner_choices, "Strategies the tuner ran.", "tuner"))
    out += [_figure(draw(r), caption, f"{slug}_{suffix}", pngs) for draw, caption, suffix in figures]
    cfg = json.dumps(r.config, indent=2, sort_keys=True, default=str)
    out.append(f"<details><summary>config of {_e(label)}</summary><pre>{_e(cfg)}</pre></details>")
    return out


def _speculates(r: Result) -> bool:
    return bool((r.timeline["state"] == "spec_decode").any())


def _summary_frame(r: Result) -> pd.DataFrame:
    return pd.DataFrame({"metric": list(r.summary), "value": [_fmt(v) for v in r.summary.values()]})


def _fmt(v) -> str:
    if isinstance(v, float):
        return "-" if v != v else (f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}")
    return str(v)


def _table(df: pd.DataFrame) -> str:
    formatters = {c: _fmt for c in df.columns if pd.api.types.is_float_dtype(df[c])}
    if "speedup" in df.columns:
        formatters["speedup"] = lambda v: f"{v:.2f}×"
    return '<div class="scroll">' + df.to_html(index=False, border=0, na_rep="-", formatters=formatters) + "</div>"


def _figure(fig, caption: str, name: str, pngs: dict) -> str:
    """The figure as an embedded image with its caption; its PNG also goes to pngs[name + ".png"]."""
    png = pngs[f"{name}.png"] = plots.png_bytes(fig)
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{_e(caption)}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _e(text) -> str:
    return html.escape(str(text))
