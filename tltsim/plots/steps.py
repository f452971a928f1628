"""Per-step figures: where a step's time goes, speedups, idle GPU-seconds, the drafter and the strategy tuner."""
from __future__ import annotations

import matplotlib as mpl
import numpy as np
import pandas as pd

from tltsim.plots.style import (PHASES, gpus_per_worker, labelled, legend_right, new_figure, note, run_color,
                                 step_axis, styled)


@styled
def step_breakdown(results):
    """Mean time per step of each run as stacked bars: rollout, reward, train, weight sync."""
    runs = labelled(results)
    fig, ax = new_figure(max(4.5, 1.2 * len(runs) + 2.5), 4.2)
    x = np.arange(len(runs))
    bottom = np.zeros(len(runs))
    for label, col, color in PHASES:
        h = np.array([r.steps[col].mean() for _, r in runs])
        ax.bar(x, h, 0.6, bottom=bottom, color=color, label=label)
        bottom += h
    for xi, total in zip(x, bottom):
        ax.annotate(f"{total:.1f} s", (xi, total), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom")
    ax.set_xticks(x, [label for label, _ in runs])
    ax.set_ylim(0, bottom.max() * 1.12)
    ax.grid(axis="x", visible=False)
    ax.set_title("Where a step's time goes", loc="left")
    ax.set_ylabel("mean time per step (s)")
    legend_right(fig, ax, reverse=True)
    return fig


@styled
def speedup(results):
    """Speedup of each run over the first (the baseline): end-to-end (makespan) and rollout alone."""
    runs = labelled(results)
    base_label, base = runs[0]
    fig, ax = new_figure(max(4.5, 1.2 * len(runs) + 2.5), 4.2)
    x = np.arange(len(runs))
    w = 0.38
    for k, (what, key, color) in enumerate([("end to end", "makespan_s", "#404040"), ("rollout", "rollout_s", "#2c7bb6")]):
        s = np.array([base.summary[key] / r.summary[key] if r.summary[key] else np.nan for _, r in runs])
        bars = ax.bar(x + (k - 0.5) * w, s, w, color=color, label=what)
        ax.bar_label(bars, labels=[f"{v:.2f}×" for v in s], padding=2, fontsize=8)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [label for label, _ in runs])
    ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
    ax.grid(axis="x", visible=False)
    ax.set_title(f"Speedup over {base_label}", loc="left")
    ax.set_ylabel(f"speedup vs {base_label} (×)")
    legend_right(fig, ax)
    return fig


def idle_by_step(result) -> pd.Series:
    """Idle GPU-seconds of each step (indexed by step; 0 where no worker idled)."""
    tl = result.timeline
    idle = tl[tl["state"] == "idle"]
    secs = (idle["t_end"] - idle["t_start"]).groupby(idle["step"]).sum() * gpus_per_worker(result)
    return secs.reindex(result.steps["step"], fill_value=0.0)


@styled
def idle_per_step(results):
    """Idle GPU-seconds in each step, one line per run."""
    runs = labelled(results)
    fig, ax = new_figure(10, 3.8)
    for i, (label, r) in enumerate(runs):
        idle = idle_by_step(r)
        ax.plot(idle.index, idle.to_numpy(), "o-", ms=3.5, lw=1.4, color=run_color(i),
                label=f"{label} ({idle.sum():,.0f} GPU-s in all)")
    ax.set_ylim(bottom=0)
    ax.set_title("Idle GPU time per step", loc="left")
    step_axis(ax)
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
    for ax, (col, ylabel, title) in zip(axes[0], panels):
        for i, (label, r) in enumerate(runs):
            if has_data(r, col):
                ax.plot(r.steps["step"], r.steps[col], "o-", ms=3, lw=1.3, color=run_color(i), label=label)
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
