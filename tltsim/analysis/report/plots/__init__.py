"""Figures of results, traces and sweeps: one function per figure, each returns a matplotlib Figure.

They read only the record schema (tltsim.core.records), so they draw simulated and real runs alike;
columns that only some policies write (spec_decode states, drafter and tuner columns) are drawn
when present. Save with `save_png(fig, path)` (atomic) or embed with `png_bytes(fig)`.

    gantt(results, step)            per-engine states of one step, one panel per run
    batch_size(result, step)        running batch per engine, SD threshold and switches
    utilisation(result, steps)      GPUs by state over time (the first 10 steps of a long run)
    length_distribution(source)     response-length histogram and per-step CDFs
    step_breakdown(results)         rollout / reward / train / sync per step, stacked
    speedup(results)                speedup over the first run
    idle_per_step(results)          idle GPU-seconds per step
    drafter(results)                accepted length, drafter quality, drafter training per step
    tuner_choices(result)           strategy shares per batch size (or per step)
    drift_sensitivity(rows)         seconds saved a step per way to get a drafter, against the drift
    sweep_lines / sweep_heatmap     a metric against one or two swept keys
    sweep_bars                      a metric per run (swept keys not numeric); sweep_figure picks
"""
from tltsim.analysis.report.plots.drift import drift_sensitivity
from tltsim.analysis.report.plots.lengths import length_distribution
from tltsim.analysis.report.plots.steps import drafter, idle_per_step, speedup, step_breakdown, tuner_choices
from tltsim.analysis.report.plots.style import STATE_COLORS, png_bytes, save_png
from tltsim.analysis.report.plots.sweep import metric_label, sweep_bars, sweep_figure, sweep_heatmap, sweep_lines
from tltsim.analysis.report.plots.timeline import batch_size, gantt, slowest_step, utilisation

__all__ = [
    "gantt", "batch_size", "utilisation", "length_distribution", "step_breakdown", "speedup",
    "idle_per_step", "drafter", "tuner_choices", "drift_sensitivity", "sweep_lines", "sweep_heatmap", "sweep_bars", "sweep_figure", "metric_label",
    "slowest_step", "STATE_COLORS", "png_bytes", "save_png",
]
