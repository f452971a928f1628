"""Per-step figures: where a step's time goes, speedups, idle GPU-seconds, the drafter and the strategy tuner."""
from __future__ import annotations

import textwrap

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter

from tltsim.analysis.report.plots.style import (PAGE_WIDTH_IN, PHASES, gpus_per_worker, labelled, legend_right, new_figure, note,
                                         run_colors, run_style, step_axis, styled)
from tltsim.core.summary import OVERLAPS, rollout_overlap
from tltsim.core.records import IDLE_STATES


NO_IDLE = 0.001  # idle_fraction at or below which a run never idled: the idle chart leaves it out (findings' too)


def fastest_first(runs) -> list[tuple]:
    """(label, Result) pairs by end-to-end speed, fastest first (ties in run order): the order of the speedup and
    step-time charts, as the report's ranking puts them."""
    return sorted(runs, key=lambda p: p[1].summary["makespan_s"] if p[1].summary["makespan_s"] else np.inf)


@styled
def step_breakdown(results):
    """Mean time per step of each run as stacked horizontal bars, fastest on top (as the speedup chart): rollout,
    reward, train, weight sync."""
    runs = fastest_first(labelled(results))
    fig, ax = new_figure(PAGE_WIDTH_IN, 0.32 * len(runs) + 1.3)
    y = np.arange(len(runs))
    left = np.zeros(len(runs))
    for label, col, color in PHASES:
        w = np.array([r.steps[col].mean() for _, r in runs])
        ax.barh(y, w, 0.7, left=left, color=color, label=label)
        left += w
    for yi, total in zip(y, left):
        ax.annotate(f"{total:.1f} s", (total, yi), xytext=(3, 0), textcoords="offset points", ha="left", va="center")
    ax.set_yticks(y, [label for label, _ in runs])
    ax.set_ylim(len(runs) - 0.5, -0.5)
    ax.set_xlim(0, left.max() * 1.1)
    ax.grid(axis="y", visible=False)
    ax.set_title("Where a step's time goes", loc="left")
    ax.set_xlabel("mean time per step (s)")
    legend_right(fig, ax)
    return fig


@styled
def speedup(results):
    """Speedup of each run over the first (the baseline), fastest on top: end to end (makespan) in one
    panel, rollout alone in the other.

    A run whose rollout runs beside its training (tltsim.core.summary.rollout_overlap above OVERLAPS) gets no
    rollout bar but a note: its rollout_s is only the time training waited for responses. The rollout
    panel's axis is logarithmic when its bars differ tenfold or more.
    """
    runs = labelled(results)
    base_label, base = runs[0]
    colors = run_colors(runs)
    runs = fastest_first(runs)
    end = np.array([base.summary["makespan_s"] / r.summary["makespan_s"] if r.summary["makespan_s"] else np.nan
                    for _, r in runs])
    comparable = [rollout_overlap(r.timeline) <= OVERLAPS for _, r in runs]
    roll = np.array([base.summary["rollout_s"] / r.summary["rollout_s"] if ok and r.summary["rollout_s"] else np.nan
                     for ok, (_, r) in zip(comparable, runs)])
    fig, axes = new_figure(PAGE_WIDTH_IN, 0.3 * len(runs) + 1.4, ncols=2, sharey=True)
    y = np.arange(len(runs))
    for ax, values, what in [(axes[0], end, "end to end (makespan)"), (axes[1], roll, "rollout alone (rollout_s)")]:
        bars = ax.barh(y, np.nan_to_num(values), 0.7, color=[colors[label] for label, _ in runs])
        ax.bar_label(bars, labels=[f"{v:.2f}×" if v == v else "" for v in values], padding=2, fontsize=8)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_title(f"Speedup over {base_label}: {what}", loc="left")
        ax.grid(axis="y", visible=False)
    shown = roll[np.isfinite(roll) & (roll > 0)]
    lo, hi = (shown.min(), shown.max()) if len(shown) else (1.0, 1.0)
    log = hi >= 10 * lo
    if log:
        axes[1].set_xscale("log")
        axes[1].xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axes[1].set_xlim(lo / 1.5, hi * 1.6)
    else:
        axes[1].set_xlim(0, hi * 1.15)
    axes[1].set_xlabel("speedup (×, log scale)" if log else "speedup (×)")
    axes[0].set_xlabel("speedup (×)")
    axes[0].set_xlim(0, np.nanmax(end) * 1.15)
    for yi, ok in zip(y, comparable):
        if not ok:
            axes[1].annotate("not comparable: rollout overlaps training", (lo / 1.5 if log else 0, yi), xytext=(4, 0),
                             textcoords="offset points", va="center", fontsize=8, color="0.35")
    axes[0].set_yticks(y, [label for label, _ in runs])
    axes[0].set_ylim(len(runs) - 0.5, -0.5)
    return fig


def idle_by_step(result) -> pd.Series:
    """Idle GPU-seconds of each step (indexed by step; 0 where no worker idled)."""
    tl = result.timeline
    idle = tl[tl["state"].isin(IDLE_STATES)]
    secs = (idle["t_end"] - idle["t_start"]).groupby(idle["step"]).sum() * gpus_per_worker(result)
    return secs.reindex(result.steps["step"], fill_value=0.0)


def idles(result) -> bool:
    """Whether the run left GPUs idle for more than NO_IDLE of its GPU time (the idle chart draws it)."""
    return result.summary["idle_fraction"] > NO_IDLE


@styled
def idle_per_step(results):
    """Idle GPU-seconds in each step, one line per run that idles (its policy's colour and marker), the most idle
    first in the legend; the runs that never idled are named under the axis, not drawn."""
    runs = labelled(results)
    style = run_style(runs)
    fig, ax = new_figure(10, 3.8)
    drawn = sorted(((label, r, idle_by_step(r)) for label, r in runs if idles(r)), key=lambda d: -d[2].sum())
    for label, r, idle in drawn:
        colour, marker = style[label]
        ax.plot(idle.index, idle.to_numpy(), marker=marker, ms=5, lw=1.5, color=colour,
                label=f"{label} ({idle.sum():,.0f} GPU-s in all)")
    ax.set_title("Idle GPU time per step", loc="left")
    if not drawn:
        note(ax, "no run left GPUs idle")
        return fig
    ax.set_ylim(bottom=0)
    step_axis(ax)
    never = [label for label, r in runs if not idles(r)]
    if never:
        ax.set_xlabel("RL step\n" + "\n".join(textwrap.wrap(f"never idle (not drawn): {', '.join(never)}", 110)))
    ax.set_ylabel("idle GPU-seconds")
    legend_right(fig, ax)
    return fig


# Drafter panels: (steps column, y label, title), drawn for the columns some run has.
DRAFTER_PANELS = [
    ("mean_accepted", "accepted tokens / verify", "Accepted length"),
    ("drafter_quality", "drafter quality q", "Drafter quality"),
    ("drafter_train_gpu_s", "GPU-seconds", "Drafter training per step"),
]


def has_data(result, column: str) -> bool:
    return column in result.steps.columns and bool(result.steps[column].notna().any())


@styled
def drafter(results):
    """Accepted length, drafter quality and drafter training over steps, for the runs that speculate."""
    runs = labelled(results)
    panels = [p for p in DRAFTER_PANELS if any(has_data(r, p[0]) for _, r in runs)]
    fig, axes = new_figure(4.0 * max(len(panels), 1) + 1.5, 3.6, ncols=max(len(panels), 1), squeeze=False)
    if not panels:
        note(axes[0, 0], "no speculative decoding in these runs")
        return fig
    style = run_style(runs)
    for ax, (col, ylabel, title) in zip(axes[0], panels):
        for label, r in runs:
            if has_data(r, col):
                colour, marker = style[label]
                ax.plot(r.steps["step"], r.steps[col], marker=marker, ms=4, lw=1.3, color=colour, label=label)
        ax.set_title(title, loc="left")
        step_axis(ax)
        ax.set_ylabel(ylabel)
    legend_right(fig, *axes[0])
    return fig


def parse_strategies(text: str) -> dict[str, float]:
    """'8_4_48:120,8_4_16:30' -> {'8_4_48': 120.0, '8_4_16': 30.0} (the steps 'strategies' column)."""
    out = {}
    for part in filter(None, (text or "").split(",")):
        name, _, n = part.rpartition(":")
        out[name] = float(n)
    return out


def _verify_tokens(strategy: str) -> tuple:
    parts = strategy.split("_")
    return tuple(int(p) if p.isdigit() else 0 for p in reversed(parts))


def _batch_bin(b: np.ndarray) -> np.ndarray:
    """Power-of-two bins of batch sizes: 1, 2-3, 4-7, ... (bin k holds 2^k .. 2^(k+1)-1)."""
    return np.floor(np.log2(np.maximum(b, 1))).astype(int)


def tuner_table(result, max_rows: int = 60) -> tuple[pd.DataFrame, str]:
    """Share of speculative iterations per strategy (columns) per batch-size bin or per step (rows).

    Per batch size from the per-iteration records when the run has them, else per step from the
    steps' 'strategies' column (more steps than `max_rows` are pooled into that many ranges "a-b").
    Returns (table, x-axis label); the table is empty when nothing speculated.
    """
    it = result.iterations
    if it is not None and "strategy" in it.columns and (it["strategy"].fillna("") != "").any():
        sd = it[it["strategy"].fillna("") != ""]
        counts = pd.crosstab(_batch_bin(sd["batch_size"].to_numpy()), sd["strategy"])
        counts.index = [f"{2**k}" if k == 0 else f"{2**k}-{2**(k + 1) - 1}" for k in counts.index]
        xlabel = "running batch size"
    elif "strategies" in result.steps.columns:
        rows = {int(s): parse_strategies(t) for s, t in zip(result.steps["step"], result.steps["strategies"])}
        counts = pd.DataFrame.from_dict(rows, orient="index").fillna(0.0)
        counts = counts[counts.sum(axis=1) > 0]
        xlabel = "RL step"
        if len(counts) > max_rows:
            group = np.arange(len(counts)) * max_rows // len(counts)
            names = [f"{g.index[0]}-{g.index[-1]}" if len(g) > 1 else f"{g.index[0]}" for _, g in counts.groupby(group)]
            counts = counts.groupby(group).sum().set_axis(names)
            xlabel = "RL steps"
    else:
        return pd.DataFrame(), ""
    if counts.empty:
        return counts, xlabel
    counts = counts[sorted(counts.columns, key=_verify_tokens, reverse=True)]
    return counts.div(counts.sum(axis=1), axis=0), xlabel


@styled
def tuner_choices(result):
    """Which strategy the tuner ran, as shares of speculative iterations per batch size (or per step)."""
    (label, r), = labelled(result)
    share, xlabel = tuner_table(r)
    fig, ax = new_figure(10, 3.8)
    if share.empty:
        note(ax, f"{label}: no speculative decoding in this run")
        return fig
    x = np.arange(len(share))
    bottom = np.zeros(len(share))
    colors = mpl.colormaps["viridis"](np.linspace(0.1, 0.9, len(share.columns)))
    for color, strategy in zip(colors, share.columns):
        ax.bar(x, share[strategy].to_numpy(), 0.8, bottom=bottom, color=color, label=strategy)
        bottom += share[strategy].to_numpy()
    names = [str(v) for v in share.index]
    step = -(-len(x) // max(1, 90 // (max(map(len, names)) + 2)))  # as many labels as fit side by side
    ax.set_xticks(x[::step], names[::step])
    ax.set_ylim(0, 1)
    ax.grid(axis="x", visible=False)
    ax.set_title(f"{label}: tuner choices (depth_topk_verify)", loc="left")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of SD iterations")
    legend_right(fig, ax, reverse=True, title="strategy")
    return fig
