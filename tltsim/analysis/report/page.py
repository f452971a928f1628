"""One self-contained HTML page about one or several runs: the answer first, then tables, figures, configs.

    write_report([Result, ...], "report.html")                  # figures_dir="figs" also saves each PNG

The page needs nothing but itself (no scripts, no links outside it): images are base64 data URIs
(palette PNGs, shown at the size they were drawn), and a table of contents links the sections. It reads in a
minute: a ranking reason or a finding longer than two lines shows its first clause with the rest folded beneath
it; the glossary, the comparison tables after the first, the tuning searches and the runs (each with its section
and config) are folded; a comparison table no run has a column of is left out. Runs simulated on a calibrated cluster (`--calibration`)
are named as such under the title, with the calibration's factors, fixed costs, files and error. With
several results the first is the baseline and the page opens with the summary (tltsim.analysis.report.findings:
the ranking by speedup, or on a calibrated cluster by saved_per_step_s, each policy's
off-policy cost and reason, the bounds, results that look wrong explained), then the comparison
tables with a glossary of their columns (tltsim.core.glossary), the comparison charts, and the runs.
Figures that need data a run lacks (speculation, per-iteration records) are left out for that run.
"""
from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import pandas as pd

from tltsim.analysis.report import findings, html, plots
from tltsim.analysis.report.tuning import tune
from tltsim.core.glossary import BOUNDS, COLUMNS, DEFINITIONS, RANKING
from tltsim.core.io import atomic_path, check_file, write_text
from tltsim.analysis.report.plots.style import labelled, run_colors
from tltsim.cost import PhaseCalibration
from tltsim.core.records import Result
from tltsim.analysis.drafter.ranking_sensitivity import reordered
from tltsim.analysis.validation.checked import shipped, verdict
from tltsim.analysis.validation.published import outside
from tltsim.core.summary import OVERLAPS, rollout_overlap

# A ranking row's reason and a finding, shown whole up to this many characters (two lines of their column at 1,400
# px), else their first clause with the rest folded beneath it
WHY_CHARS, FINDING_CHARS = 80, 250
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


def load_results(dirs) -> list[Result]:
    """Results from result directories (each written by simulate / compare / real run)."""
    return [Result.load(d) for d in dirs]


def write_report(results, path: str | Path, title: str | None = None, figures_dir: str | Path | None = None,
                 tunings: list | None = None, force: bool = False, drift: list | None = None,
                 checks: pd.DataFrame | None = None, sensitivity: list | None = None) -> Path:
    """Render the report of `results` (the first is the baseline) and write it to `path` atomically.

    With `figures_dir`, every figure of the page is also written there as a PNG (atomically each). `tunings`:
    each result's tltsim.analysis.report.tuning.tune answer where the caller has it (else the report runs the search).
    A file in the way (the page or a figure) that tltsim did not write is refused, before anything is written,
    unless `force` (tltsim.core.io.check_file). `drift`: tltsim.analysis.drafter.drift_sensitivity's rows, for the section
    on whether co-training the drafter is worth it. `checks`: the real runs the simulator was checked against
    (tltsim.analysis.validation.checked; default: the shipped pairs'), which the ranking cites per policy.
    `sensitivity`: tltsim.analysis.drafter.ranking_sensitivity's rows, for the ranking's line on whether its order rests
    on the trained drafter's figures.
    """
    path = Path(path)
    pngs: dict[str, bytes] = {}
    page = build_report(results, title, pngs, tunings, drift, checks, sensitivity)
    for p in [path, *(Path(figures_dir) / name for name in pngs if figures_dir is not None)]:
        check_file(p, force)
    write_text(path, page)
    if figures_dir is not None:
        for name, data in pngs.items():
            with atomic_path(Path(figures_dir) / name) as tmp:
                tmp.write_bytes(data)
    return path


def default_title(runs: list) -> str:
    """The page's title for `runs` (tltsim.analysis.report.plots.style.labelled's (label, result) pairs): the run's
    label alone, the labels of up to four, else how many policies are compared against the first (a bound, such
    as ideal, is not a policy)."""
    names = [label for label, _ in runs]
    if len(names) == 1:
        return names[0]
    policies = [label for label, r in runs if findings.bound(r) is None]
    return "Comparison: " + ", ".join(names) if len(names) <= 4 else \
        f"Comparison of {len(policies)} policies against {names[0]}"


def build_report(results, title: str | None = None, pngs: dict | None = None, tunings: list | None = None,
                 drift: list | None = None, checks: pd.DataFrame | None = None,
                 sensitivity: list | None = None) -> str:
    """The report as one HTML string; `pngs`, when given, receives each figure as file name -> PNG bytes;
    `tunings`, `drift`, `checks` and `sensitivity` as write_report's."""
    runs = labelled(results)
    checks = shipped() if checks is None else checks
    if tunings is None:
        tunings = [tune(r, label=label) for label, r in runs]
    tuned = [t for t in tunings if t is not None]
    pngs = {} if pngs is None else pngs
    single = len(runs) == 1
    title = default_title(runs) if title is None else title
    sections = []  # (anchor, heading, html parts)
    if not single:
        sections += [("summary", "Summary: which policy, at what cost", _summary(runs, checks, sensitivity)),
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
    toc = " ".join(f'<a href="#{a}">{html.e(h)}</a>' for a, h, _ in sections)
    parts = [f"<h1>{html.e(title)}</h1>", f'<p class="meta">{html.e(_setup(runs))}</p>']
    calibrated = calibration(runs[0][1])
    if calibrated:
        parts.append(f'<p class="calibration">Calibrated with {html.e(calibrated)}</p>')
    parts.append(f"<nav>Contents: {toc}</nav>")
    for anchor, heading, body in sections:
        parts += [f'<h2 id="{anchor}">{html.e(heading)}</h2>', *body]
    body = html.draw_figures("\n".join(parts), pngs)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="generator" content="tltsim"><title>{html.e(title)}</title>'
            f"<style>{html.CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


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


def _summary(runs, checks: pd.DataFrame, sensitivity: list | None = None) -> list[str]:
    """The headline and the ranking: policies by speedup (calibrated: by the seconds they save a step), then the
    bounds, each with its cost, whether real runs have checked the simulator on it (`checks`:
    tltsim.analysis.validation.checked) and its reason; beneath it, where they have something to say, whether
    published GPU figures checked this setup (tltsim.analysis.validation.published) and whether the order rests on
    the trained drafter's figures (`sensitivity`: tltsim.analysis.drafter.ranking_sensitivity's rows)."""
    calibrated = bool(calibration(runs[0][1]))
    policy = {label: r.summary.get("policy", label) for label, r in runs}
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
                    f'<td><span class="swatch" style="background:{colour[f.label]}"></span>{html.e(f.label)}</td>'
                    f"{saved}<td>{f.speedup:.2f}×</td><td>{roll}</td><td>{html.e(f.cost)}</td>"
                    f"<td>{html.e(_checked(checks, policy[f.label], f, runs[0][0]))}</td>"
                    f"<td>{html.folded(why, WHY_CHARS)}</td></tr>")
    names = ["#", "run", *(["saved per step"] if calibrated else []), "speedup", "rollout speedup",
             "off-policy cost", "checked against a run", "why, from the results"]
    head = "".join(f"<th{html.title(DEFINITIONS.get('saved_per_step_s' if h == 'saved per step' else h))}>{html.e(h)}</th>"
                   for h in names)
    lines = [line for line in (_outside(runs), reordered(sensitivity or [])) if line]
    return [f'<p class="headline">{html.e(findings.headline(ranked, runs[0][0]))}</p>',
            f'<div class="scroll"><table class="ranking"><tr>{head}</tr>{"".join(rows)}</table></div>',
            *([f'<div class="checked-range">{"".join(f"<div>{html.folded(x, FINDING_CHARS)}</div>" for x in lines)}'
               '</div>'] if lines else [])]


def _outside(runs) -> str:
    """The line on a setup outside what published GPU figures checked (tltsim.analysis.validation.published);
    "" where every policy was checked or the runs name no model and GPU (a profiled cost model)."""
    cluster = runs[0][1].config.get("cluster", {})
    if not cluster.get("model") or not cluster.get("gpu"):
        return ""
    return outside([r.summary.get("policy", label) for label, r in runs], cluster["model"], cluster["gpu"])


def _checked(checks: pd.DataFrame, policy: str, f, baseline: str) -> str:
    """A ranking row's 'checked against a run': nothing for a bound, the baseline says so, a policy its verdict."""
    if f.bound is not None:
        return ""
    return "the baseline" if f.label == baseline else verdict(checks, policy)


def _explained(runs) -> list[str]:
    items = findings.explanations([r for _, r in runs])
    if not items:
        return ["<p>Nothing here calls for a word: no bound, no idle time turned into drafter training, "
                "no rollout that overlaps training.</p>"]
    return ['<ul class="findings">' + "".join(f"<li>{html.folded(t, FINDING_CHARS)}</li>" for t in items) + "</ul>"]


def _comparison_tables(runs) -> list[str]:
    table = comparison_table([r for _, r in runs])
    out = [f"<p>Baseline: <b>{html.e(runs[0][0])}</b>. Hover over a column name for its meaning, or see the "
           f'<a href="#glossary">glossary</a>.</p>']
    for i, (heading, metrics) in enumerate(COMPARISON_GROUPS):
        shown = [m for m in metrics if m in table.columns]
        if not shown:  # a group no run has (multi-turn on a single-turn trace) says nothing
            continue
        part = html.table(table[["run", *(["speedup"] if i == 0 else []), *shown]])
        out += [f"<h3>{html.e(heading)}</h3>", part] if i == 0 else [  # the ranking has said the rest in words
            f"<h3>{html.e(heading)}</h3>", html.collapsed(part, f"{', '.join(shown)}, per run", False)]
    return out


def _glossary(runs) -> list[str]:
    shown = ["run", "speedup", *[m for m in COMPARISON_METRICS if any(m in r.summary for _, r in runs)]]
    items = [f"<dt>{html.e(k)}</dt><dd>{html.e(COLUMNS[k])}</dd>" for k in shown]
    items += [f"<dt>{html.e(k)}</dt><dd>{html.e(v)}</dd>" for k, v in RANKING.items()]
    items += [f"<dt>{html.e(k)}</dt><dd>a bound, not a policy: {html.e(v)}</dd>" for k, v in BOUNDS.items()
              if any(r.summary.get("policy") == k for _, r in runs)]
    return [html.collapsed('<dl class="glossary">' + "".join(items) + "</dl>",
                           f"What each column and word of the page means ({len(items)} entries)", False)]


def _comparison_charts(runs, pngs: dict) -> list[str]:
    results = [r for _, r in runs]
    waits = [label for label, r in runs if rollout_overlap(r.timeline) > OVERLAPS]
    wait_note = (f" For {', '.join(waits)}, rollout is only the time training waited for responses (its rollout "
                 "runs beside training)." if waits else "")
    out = [html.figure(plots.speedup(results), "Speedup over the baseline, fastest on top: end to end, and rollout "
                   "alone." + wait_note, "speedup", pngs),
           html.figure(plots.step_breakdown(results), "Mean time per step, by phase, fastest on top (as the speedups)."
                   + wait_note, "step_breakdown", pngs),
           html.collapsed(html.figure(plots.gantt(results), "Each engine's states during the baseline's slowest rollout "
                              "step, per run." + (f" {', '.join(waits)}: what lies left of 0 is the step's rollout, "
                                                  "begun beside the previous step's training." if waits else ""),
                              "gantt", pngs),
                      f"Timelines: each engine's states in one step, per run ({len(runs)} panels)", len(runs) <= 4),
           html.figure(plots.idle_per_step(results), "GPU-seconds spent idle in each step, for the runs that idle (those "
                   "that never do are named under the axis).", "idle_per_step", pngs)]
    if any(_speculates(r) for r in results):
        out.append(html.figure(plots.drafter(results), "Speculative decoding over steps (runs that speculate).",
                           "drafter", pngs))
    return out


def _tuning(tunings) -> list[str]:
    """Per tlt / tlt-auto run: its threshold (tlt-auto's learned buckets), the search around it, what to pass."""
    out = []
    for t in tunings:
        what = (f"learned a switch threshold of {t.threshold} (it speculates at batches "
                f"{', '.join(t.buckets) or 'none'})" if t.buckets is not None else
                f"switches speculation on at a fixed threshold of {t.threshold} running requests")
        rows = "".join(f"<tr><td class=text>{html.e(s)}{' (the run’s own)' if s == t.own else ''}</td>"
                       f"<td>{m:,.1f}</td><td>{m / t.search[0][2]:.3f}</td></tr>" for s, _, m in t.search)
        out += [f"<h3>{html.e(t.label)}</h3>",
                f"<p>{html.e(t.label)} {html.e(what)}. <b>Pass:</b> <code>{html.e(t.recommended)}</code>.</p>",
                html.collapsed(f"<p>{html.e(t.cost)}: the run's first steps, its cluster and knobs, the switch fixed at "
                               f"each threshold, and once learned; fastest first.</p>"
                               f'<div class="scroll"><table><tr><th class=text>setting (--knob)</th><th>makespan_s</th>'
                               f"<th>× the fastest</th></tr>{rows}</table></div>",
                               f"The threshold search around it ({len(t.search)} settings)", False)]
    return out


def _cotraining(rows, pngs: dict) -> list[str]:
    """The ways to get a drafter side by side at each drift (tltsim.analysis.drafter.drift_sensitivity): what the rows say,
    their table and their plot."""
    from tltsim.analysis.drafter.drift_sensitivity import STEPS, answer

    head = "".join(f"<th>{h}</th>" for h in ("way", "policy", "drift", "drift_per_step", "saved_per_step_s"))
    body = "".join(f"<tr{' class=bound' if r['fitted'] else ''}><td>{html.e(r['way'])}</td><td>{html.e(r['policy'])}</td>"
                   f"<td class=text>{html.e(r['drift'])}</td><td>{r['drift_per_step']:.4f}</td>"
                   f"<td>{r['saved_per_step_s']:.2f}</td></tr>" for r in rows)
    return [f"<p>Each way to get a drafter on this run's cluster and its first {STEPS} steps, as a drafter that is "
            "not retrained loses accepted length faster (drift_per_step: tokens per verify lost per RL step); "
            "saved_per_step_s is over verl on the same steps.</p>",
            '<ul class="findings">' + "".join(f"<li>{html.e(t)}</li>" for t in answer(rows)) + "</ul>",
            f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>',
            html.figure(plots.drift_sensitivity(rows), "Seconds saved a step over verl against the drift, per way; "
                    "the dashed line is the drift fitted to the run, where a calibration gives one.", "drift", pngs)]


def _lengths(runs, pngs: dict) -> list[tuple]:
    """One section per trace the runs used: its response-length distribution."""
    out = []
    traces = list(dict.fromkeys(r.config.get("trace", label) for label, r in runs))
    for i, trace in enumerate(traces):
        r = next(r for label, r in runs if r.config.get("trace", label) == trace)
        out.append((f"lengths-{i}", f"Response lengths: {trace}",
                    [html.figure(plots.length_distribution(r, title="Response lengths"),
                             "Generated tokens per response: histogram over all steps, CDF of each step.",
                             "lengths" if len(traces) == 1 else f"lengths_{i}", pngs)]))
    return out


def _runs(runs, single: bool, pngs: dict) -> list[str]:
    """Every run's section, collapsed in a comparison (its summary line says what it holds)."""
    if single:
        return _run_section(*runs[0], True, pngs)
    base = runs[0][1].summary["makespan_s"]
    out = []
    for label, r in runs:
        speed = base / r.summary["makespan_s"] if r.summary["makespan_s"] else float("nan")
        line = f"{label}: {speed:.2f}× over {runs[0][0]}, makespan {r.summary['makespan_s']:,.1f} s"
        out.append(f'<details class="run" id="run-{html.slug(label)}"><summary>{html.e(line)}</summary>'
                   + "\n".join(_run_section(label, r, False, pngs)) + "</details>")
    return [html.collapsed("".join(out), f"{len(runs)} runs: open one for its summary table, figures and config",
                           False)]


def _run_section(label: str, r: Result, single: bool, pngs: dict) -> list[str]:
    out = [html.table(_summary_frame(r))]
    slug = html.slug(label)
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
    out += [html.figure(draw(r), caption, f"{slug}_{suffix}", pngs) for draw, caption, suffix in figures]
    cfg = json.dumps(r.config, indent=2, sort_keys=True, default=str)
    out.append(f"<details><summary>config of {html.e(label)}</summary><pre>{html.e(cfg)}</pre></details>")
    return out


def _speculates(r: Result) -> bool:
    return bool((r.timeline["state"] == "spec_decode").any())


def _summary_frame(r: Result) -> pd.DataFrame:
    """metric, value (written as the comparison tables write it), meaning (the glossary's)."""
    return pd.DataFrame({"metric": list(r.summary), "value": [html.cell(k, v) for k, v in r.summary.items()],
                         "meaning": [DEFINITIONS.get(k, "") for k in r.summary]})
