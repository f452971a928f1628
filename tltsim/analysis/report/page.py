"""One self-contained HTML page about one or several runs: the answer first, then tables, figures, configs.

    write_report([Result, ...], "report.html")                  # figures_dir="figs" also saves each PNG

The page needs nothing but itself (no scripts, no links outside it): images are base64 data URIs
(palette PNGs, shown at the size they were drawn), each run's section and config sit in collapsible
blocks, and a table of contents links the sections. Runs simulated on a calibrated cluster (`--calibration`)
are named as such under the title, with the calibration's factors, fixed costs, files and error. With
several results the first is the baseline and the page opens with the summary (tltsim.analysis.report.findings:
the ranking by speedup, or on a calibrated cluster by saved_per_step_s, each policy's
off-policy cost and reason, the bounds, results that look wrong explained), then the comparison
tables with a glossary of their columns (tltsim.core.glossary), the comparison charts, and the runs.
Figures that need data a run lacks (speculation, per-iteration records) are left out for that run.
"""
from __future__ import annotations

import base64
import html
import json
import re
import struct
from importlib.metadata import version
from pathlib import Path

import pandas as pd

from tltsim.analysis.report import findings, plots
from tltsim.analysis.report.tuning import tune
from tltsim.core.glossary import BOUNDS, COLUMNS, DEFINITIONS, RANKING
from tltsim.core.io import atomic_path, check_file, write_text
from tltsim.analysis.report.plots.style import labelled, run_colors
from tltsim.cost import PhaseCalibration
from tltsim.core.records import Result
from tltsim.core.summary import OVERLAPS, rollout_overlap

# The comparison tables: (title, summary metrics in order); a metric is shown when some run has it.
# Two tables side by side would not fit the page's 1,200 px; each of these does.
COMPARISON_GROUPS = [
    ("Speed and GPU time", ["makespan_s", "mean_step_s", "mean_rollout_s", "rollout_share", "tail_share", "tokens_per_s",
                            "idle_fraction", "idle_gpu_seconds"]),
    ("Speculation and off-policy cost", ["sd_share", "mean_accepted", "drafter_train_gpu_seconds", "staleness_mean",
                                         "staleness_max", "resumed_fraction", "dropped_fraction", "trained_len_ratio"]),
    ("Multi-turn trajectories", ["turns_per_trajectory", "tool_wait_share"]),
]
COMPARISON_METRICS = [m for _, group in COMPARISON_GROUPS for m in group]
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
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.8em; }
h3 { margin: 1.2em 0 0.3em; }
.meta { color: #666; }
nav { background: #f6f8fa; border: 1px solid #e1e4e8; padding: 0.5em 1em; font-size: 0.92em; }
nav a { margin-right: 0.9em; white-space: nowrap; }
.headline { font-size: 1.08em; background: #eef5ec; border-left: 4px solid #2ca02c; padding: 0.6em 0.9em; }
.calibration { background: #eef2f8; border-left: 4px solid #1f77b4; padding: 0.5em 0.9em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; vertical-align: top; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
th[title] { cursor: help; text-decoration: underline dotted #999; } th.text, td.text { text-align: left; }
table.ranking td:nth-child(2), table.ranking th:nth-child(2) { text-align: left; white-space: nowrap; }
table.ranking td:nth-last-child(-n+2), table.ranking th:nth-last-child(-n+2) { text-align: left; }
table.ranking tr.bound td { background: #f4f1fa; font-style: italic; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.35em; border-radius: 2px; }
dl.glossary { display: grid; grid-template-columns: max-content auto; gap: 0.25em 1em; font-size: 0.92em; }
dl.glossary dt { font-family: monospace; font-weight: bold; } dl.glossary dd { margin: 0; }
ul.findings li { margin-bottom: 0.45em; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.9em; }
details { margin: 0.6em 0; } summary { cursor: pointer; color: #2c5d8a; }
details.run { border: 1px solid #e1e4e8; padding: 0.3em 0.8em; } details.run > summary { font-weight: bold; }
.scroll { overflow-x: auto; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
"""


def load_results(dirs) -> list[Result]:
    """Results from result directories (each written by simulate / compare / real run)."""
    return [Result.load(d) for d in dirs]


def write_report(results, path: str | Path, title: str | None = None, figures_dir: str | Path | None = None,
                 tunings: list | None = None, force: bool = False, drift: list | None = None) -> Path:
    """Render the report of `results` (the first is the baseline) and write it to `path` atomically.

    With `figures_dir`, every figure of the page is also written there as a PNG (atomically each). `tunings`:
    each result's tltsim.analysis.report.tuning.tune answer where the caller has it (else the report runs the search).
    A file in the way (the page or a figure) that tltsim did not write is refused, before anything is written,
    unless `force` (tltsim.core.io.check_file). `drift`: tltsim.analysis.drift_sensitivity's rows, for the section
    on whether co-training the drafter is worth it.
    """
    path = Path(path)
    pngs: dict[str, bytes] = {}
    page = build_report(results, title, pngs, tunings, drift)
    for p in [path, *(Path(figures_dir) / name for name in pngs if figures_dir is not None)]:
        check_file(p, force)
    write_text(path, page)
    if figures_dir is not None:
        for name, data in pngs.items():
            with atomic_path(Path(figures_dir) / name) as tmp:
                tmp.write_bytes(data)
    return path


def build_report(results, title: str | None = None, pngs: dict | None = None, tunings: list | None = None,
                 drift: list | None = None) -> str:
    """The report as one HTML string; `pngs`, when given, receives each figure as file name -> PNG bytes;
    `tunings` and `drift` as write_report's."""
    runs = labelled(results)
    if tunings is None:
        tunings = [tune(r, label=label) for label, r in runs]
    tuned = [t for t in tunings if t is not None]
    pngs = {} if pngs is None else pngs
    single = len(runs) == 1
    if title is None:
        names = [label for label, _ in runs]
        policies = [label for label, r in runs if findings.bound(r) is None]  # a bound is not a policy
        title = names[0] if single else ("Comparison: " + ", ".join(names) if len(names) <= 4
                                         else f"Comparison of {len(policies)} policies against {names[0]}")
    sections = []  # (anchor, heading, html parts)
    if not single:
        sections += [("summary", "Summary: which policy, at what cost", _summary(runs)),
                     ("explained", "Results that look wrong, explained", _explained(runs)),
                     ("table", "Comparison tables", _comparison_tables(runs)),
                     ("glossary", "Glossary", _glossary(runs)),
                     ("charts", "Comparison charts", _comparison_charts(runs, pngs))]
    if tuned:
        sections.append(("tuning", "Tuning the switch: which threshold to pass", _tuning(tuned)))
    if drift:
        sections.append(("cotraining", "Is co-training worth it for this run?", _cotraining(drift, pngs)))
    sections += _lengths(runs, pngs)
    sections.append(("runs", "Runs" if not single else f"Run: {runs[0][0]}", _runs(runs, single, pngs)))
    toc = " ".join(f'<a href="#{a}">{_e(h)}</a>' for a, h, _ in sections)
    parts = [f"<h1>{_e(title)}</h1>", f'<p class="meta">{_e(_setup(runs))}</p>']
    calibrated = calibration(runs[0][1])
    if calibrated:
        parts.append(f'<p class="calibration">Calibrated with {_e(calibrated)}</p>')
    parts.append(f"<nav>Contents: {toc}</nav>")
    for anchor, heading, body in sections:
        parts += [f'<h2 id="{anchor}">{_e(heading)}</h2>', *body]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="generator" content="tltsim"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


def _setup(runs) -> str:
    """One line: trace, cluster, model, and which tltsim made the page (no clock time: the same runs give the
    same bytes)."""
    c = runs[0][1].config
    cl = c.get("cluster", {})
    bits = [f"trace {c['trace']}" if c.get("trace") else "",
            f"{cl['gpus']} × {cl.get('gpu', 'GPU')}{' (assumed: no GPU type was given)' if cl.get('gpu_assumed') else ''}, "
            f"TP {cl.get('tp')}" if "gpus" in cl else "",
            f"model {cl['model']}" if "model" in cl else "",
            f"{runs[0][1].summary.get('steps', len(runs[0][1].steps))} steps",
            f"made by tltsim {version('tltsim')}"]
    return " · ".join(b for b in bits if b)


def calibration(r: Result) -> str:
    """The words of the calibration the run was simulated with (tltsim.cost.calibrated), "" when none."""
    c = r.config.get("calibration")
    if not c:
        return ""
    return c.get("source") or ("factors and fixed costs of its config" if PhaseCalibration(**c).applied else "")


def comparison_table(results) -> pd.DataFrame:
    """One row per run: the comparison metrics some run has, and the speedup (makespan) over the first."""
    runs = labelled(results)
    cols = [m for m in COMPARISON_METRICS if any(m in r.summary for _, r in runs)]
    table = pd.DataFrame([{"run": label, **{m: r.summary.get(m) for m in cols}} for label, r in runs])
    base = runs[0][1].summary["makespan_s"]
    table["speedup"] = [base / r.summary["makespan_s"] if r.summary["makespan_s"] else float("nan") for _, r in runs]
    return table


def _summary(runs) -> list[str]:
    """The headline and the ranking: policies by speedup (calibrated: by the seconds they save a step), then the
    bounds, each with its cost and reason."""
    calibrated = bool(calibration(runs[0][1]))
    ranked = findings.rank([r for _, r in runs], by="saved_per_step_s" if calibrated else "speedup")
    colour = run_colors(runs)
    rows = []
    place = 0
    for f in ranked:
        if f.bound is None:
            place += 1
        roll = f"{f.rollout_speedup:.2f}×" if f.rollout_speedup == f.rollout_speedup else "not comparable"
        why = f.why if f.bound is None else f"A bound, not a policy (see below). {f.why}"
        saved = f"<td>{f.saved_per_step_s:.2f} s</td>" if calibrated else ""
        rows.append(f'<tr{" class=bound" if f.bound else ""}><td>{place if f.bound is None else "bound"}</td>'
                    f'<td><span class="swatch" style="background:{colour[f.label]}"></span>{_e(f.label)}</td>'
                    f"{saved}<td>{f.speedup:.2f}×</td><td>{roll}</td><td>{_e(f.cost)}</td><td>{_e(why)}</td></tr>")
    names = ["#", "run", *(["saved per step"] if calibrated else []), "speedup", "rollout speedup",
             "off-policy cost", "why, from the results"]
    head = "".join(f"<th{_title(DEFINITIONS.get('saved_per_step_s' if h == 'saved per step' else h))}>{_e(h)}</th>"
                   for h in names)
    return [f'<p class="headline">{_e(findings.headline(ranked, runs[0][0]))}</p>',
            f'<div class="scroll"><table class="ranking"><tr>{head}</tr>{"".join(rows)}</table></div>']


def _explained(runs) -> list[str]:
    items = findings.explanations([r for _, r in runs])
    if not items:
        return ["<p>Nothing here calls for a word: no bound, no idle time turned into drafter training, "
                "no rollout that overlaps training.</p>"]
    return ['<ul class="findings">' + "".join(f"<li>{_e(t)}</li>" for t in items) + "</ul>"]


def _comparison_tables(runs) -> list[str]:
    table = comparison_table([r for _, r in runs])
    out = [f"<p>Baseline: <b>{_e(runs[0][0])}</b>. Hover over a column name for its meaning, or see the "
           f'<a href="#glossary">glossary</a>.</p>']
    for i, (heading, metrics) in enumerate(COMPARISON_GROUPS):
        cols = ["run", *(["speedup"] if i == 0 else []), *[m for m in metrics if m in table.columns]]
        out += [f"<h3>{_e(heading)}</h3>", _table(table[cols])]
    return out


def _glossary(runs) -> list[str]:
    shown = ["run", "speedup", *[m for m in COMPARISON_METRICS if any(m in r.summary for _, r in runs)]]
    items = [f"<dt>{_e(k)}</dt><dd>{_e(COLUMNS[k])}</dd>" for k in shown]
    items += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in RANKING.items()]
    items += [f"<dt>{_e(k)}</dt><dd>a bound, not a policy: {_e(v)}</dd>" for k, v in BOUNDS.items()
              if any(r.summary.get("policy") == k for _, r in runs)]
    return ['<dl class="glossary">' + "".join(items) + "</dl>"]


def _comparison_charts(runs, pngs: dict) -> list[str]:
    results = [r for _, r in runs]
    waits = [label for label, r in runs if rollout_overlap(r.timeline) > OVERLAPS]
    wait_note = (f" For {', '.join(waits)}, rollout is only the time training waited for responses (its rollout "
                 "runs beside training)." if waits else "")
    out = [_figure(plots.speedup(results), "Speedup over the baseline, fastest on top: end to end, and rollout "
                   "alone." + wait_note, "speedup", pngs),
           _figure(plots.step_breakdown(results), "Mean time per step, by phase, fastest on top (as the speedups)."
                   + wait_note, "step_breakdown", pngs),
           _collapsed(_figure(plots.gantt(results), "Each engine's states during the baseline's slowest rollout "
                              "step, per run." + (f" {', '.join(waits)}: what lies left of 0 is the step's rollout, "
                                                  "begun beside the previous step's training." if waits else ""),
                              "gantt", pngs),
                      f"Timelines: each engine's states in one step, per run ({len(runs)} panels)", len(runs) <= 4),
           _figure(plots.idle_per_step(results), "GPU-seconds spent idle in each step, for the runs that idle (those "
                   "that never do are named under the axis).", "idle_per_step", pngs)]
    if any(_speculates(r) for r in results):
        out.append(_figure(plots.drafter(results), "Speculative decoding over steps (runs that speculate).",
                           "drafter", pngs))
    return out


def _tuning(tunings) -> list[str]:
    """Per tlt / tlt-auto run: its threshold (tlt-auto's learned buckets), the search around it, what to pass."""
    out = []
    for t in tunings:
        what = (f"learned a switch threshold of {t.threshold} (it speculates at batches "
                f"{', '.join(t.buckets) or 'none'})" if t.buckets is not None else
                f"switches speculation on at a fixed threshold of {t.threshold} running requests")
        rows = "".join(f"<tr><td class=text>{_e(s)}{' (the run’s own)' if s == t.own else ''}</td>"
                       f"<td>{m:,.1f}</td><td>{m / t.search[0][2]:.3f}</td></tr>" for s, _, m in t.search)
        out += [f"<h3>{_e(t.label)}</h3>",
                f"<p>{_e(t.label)} {_e(what)}. A threshold search around it ({_e(t.cost)}: the run's first steps, "
                f"its cluster and knobs, the switch fixed at each threshold, and once learned), fastest first:</p>",
                f'<div class="scroll"><table><tr><th class=text>setting (--knob)</th><th>makespan_s</th>'
                f"<th>× the fastest</th></tr>{rows}</table></div>",
                f"<p><b>Pass:</b> <code>{_e(t.recommended)}</code>.</p>"]
    return out


def _cotraining(rows, pngs: dict) -> list[str]:
    """The ways to get a drafter side by side at each drift (tltsim.analysis.drift_sensitivity): what the rows say,
    their table and their plot."""
    from tltsim.analysis.drift_sensitivity import STEPS, answer

    head = "".join(f"<th>{h}</th>" for h in ("way", "policy", "drift", "drift_per_step", "saved_per_step_s"))
    body = "".join(f"<tr{' class=bound' if r['fitted'] else ''}><td>{_e(r['way'])}</td><td>{_e(r['policy'])}</td>"
                   f"<td class=text>{_e(r['drift'])}</td><td>{r['drift_per_step']:.4f}</td>"
                   f"<td>{r['saved_per_step_s']:.2f}</td></tr>" for r in rows)
    return [f"<p>Each way to get a drafter on this run's cluster and its first {STEPS} steps, as a drafter that is "
            "not retrained loses accepted length faster (drift_per_step: tokens per verify lost per RL step); "
            "saved_per_step_s is over verl on the same steps.</p>",
            '<ul class="findings">' + "".join(f"<li>{_e(t)}</li>" for t in answer(rows)) + "</ul>",
            f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>',
            _figure(plots.drift_sensitivity(rows), "Seconds saved a step over verl against the drift, per way; "
                    "the dashed line is the drift fitted to the run, where a calibration gives one.", "drift", pngs)]


def _collapsed(inner: str, summary: str, open_: bool) -> str:
    return f"<details{' open' if open_ else ''}><summary>{_e(summary)}</summary>{inner}</details>"


def _lengths(runs, pngs: dict) -> list[tuple]:
    """One section per trace the runs used: its response-length distribution."""
    out = []
    traces = list(dict.fromkeys(r.config.get("trace", label) for label, r in runs))
    for i, trace in enumerate(traces):
        r = next(r for label, r in runs if r.config.get("trace", label) == trace)
        out.append((f"lengths-{i}", f"Response lengths: {trace}",
                    [_figure(plots.length_distribution(r, title="Response lengths"),
                             "Generated tokens per response: histogram over all steps, CDF of each step.",
                             "lengths" if len(traces) == 1 else f"lengths_{i}", pngs)]))
    return out


def _runs(runs, single: bool, pngs: dict) -> list[str]:
    """Every run's section, collapsed in a comparison (its summary line says what it holds)."""
    if single:
        return _run_section(*runs[0], True, pngs)
    base = runs[0][1].summary["makespan_s"]
    out = [f'<p>{len(runs)} runs; open one for its summary table, figures and config.</p>']
    for label, r in runs:
        speed = base / r.summary["makespan_s"] if r.summary["makespan_s"] else float("nan")
        line = f"{label}: {speed:.2f}× over {runs[0][0]}, makespan {r.summary['makespan_s']:,.1f} s"
        out.append(f'<details class="run" id="run-{_slug(label)}"><summary>{_e(line)}</summary>'
                   + "\n".join(_run_section(label, r, False, pngs)) + "</details>")
    return out


def _run_section(label: str, r: Result, single: bool, pngs: dict) -> list[str]:
    out = [_table(_summary_frame(r))]
    slug = _slug(label)
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


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


def _speculates(r: Result) -> bool:
    return bool((r.timeline["state"] == "spec_decode").any())


def _summary_frame(r: Result) -> pd.DataFrame:
    """metric, value (written as the comparison tables write it), meaning (the glossary's)."""
    return pd.DataFrame({"metric": list(r.summary), "value": [_cell(k, v) for k, v in r.summary.items()],
                         "meaning": [DEFINITIONS.get(k, "") for k in r.summary]})


def _cell(col: str, v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if col in FORMATS and isinstance(v, (int, float)) and not isinstance(v, bool):
        return FORMATS[col].format(v)
    return _fmt(v)


def _fmt(v) -> str:
    if isinstance(v, float):
        return "-" if v != v else (f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}")
    return str(v)


def _table(df: pd.DataFrame) -> str:
    """An HTML table of `df`; each column name that the glossary defines carries its definition as a tooltip,
    and may wrap after an underscore (so a wide table fits the page). A "meaning" column is left-aligned prose."""
    head = "".join(f"<th{_title(DEFINITIONS.get(c))}{' class=text' if c == 'meaning' else ''}>"
                   f"{_e(c).replace('_', '_<wbr>')}</th>" for c in df.columns)
    rows = ["<tr>" + "".join(f"<td{' class=text' if c == 'meaning' else ''}>{_e(_cell(c, v))}</td>"
                             for c, v in zip(df.columns, row)) + "</tr>" for row in df.itertuples(index=False)]
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(rows)}</table></div>'


def _title(text: str | None) -> str:
    return f' title="{_e(text)}"' if text else ""


def _figure(fig, caption: str, name: str, pngs: dict) -> str:
    """The figure as an embedded image shown at the size it was drawn, with its caption; its PNG also goes to
    pngs[name + ".png"]."""
    png = pngs[f"{name}.png"] = plots.png_bytes(fig)
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk: the PNG's size in pixels
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" width="{width}" height="{height}" alt="{_e(caption)}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _e(text) -> str:
    return html.escape(str(text))
