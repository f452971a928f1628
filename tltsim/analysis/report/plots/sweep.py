"""Sweep figures from a sweep's results table: a metric against one swept key (lines) or two (heat map)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tltsim.core.errors import TltsimError
from tltsim.analysis.report.plots.style import legend_right, new_figure, run_color, styled

# Axis labels (with units) of the summary metrics people sweep for; others show their column name.
METRIC_LABELS = {
    "makespan_s": "makespan (s)",
    "mean_step_s": "mean step time (s)",
    "rollout_s": "total rollout time (s)",
    "idle_fraction": "idle fraction of GPU time",
    "idle_gpu_seconds": "idle GPU-seconds",
    "tail_share": "tail share of rollout time",
    "tokens_per_s": "generated tokens / s",
    "sd_share": "share of rollout time in SD",
    "mean_accepted": "accepted tokens / verify",
}


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


def _check(table: pd.DataFrame, columns) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise TltsimError(f"sweep table has no column(s) {', '.join(missing)}; it has {', '.join(table.columns)}")


@styled
def sweep_lines(table: pd.DataFrame, x: str, metric: str, by: list[str] | tuple = ()):
    """`metric` against swept key `x`, one line per combination of the keys in `by`."""
    by = list(by)
    _check(table, [x, metric, *by])
    fig, ax = new_figure(7.5, 4.2)
    numeric = pd.api.types.is_numeric_dtype(table[x])
    cats = [] if numeric else list(dict.fromkeys(table[x].astype(str)))  # categories in sweep order
    groups = table.groupby(by, sort=False, dropna=False) if by else [((), table)]
    for i, (key, g) in enumerate(groups):
        pos = g[x].to_numpy(float) if numeric else np.array([cats.index(v) for v in g[x].astype(str)], float)
        order = np.argsort(pos, kind="stable")
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"{k}={v}" for k, v in zip(by, key) if not pd.isna(v)) or None
        ax.plot(pos[order], g[metric].to_numpy(float)[order], "o-", ms=5, lw=1.6, color=run_color(i), label=label)
    if cats:
        ax.set_xticks(range(len(cats)), cats)
    elif table[x].nunique() <= 12:
        ax.set_xticks(sorted(table[x].dropna().unique()))
    ax.set_title(f"{metric_label(metric)} vs {x}", loc="left")
    ax.set_xlabel(x)
    ax.set_ylabel(metric_label(metric))
    if by:
        legend_right(fig, ax)
    return fig


@styled
def sweep_heatmap(table: pd.DataFrame, x: str, y: str, metric: str):
    """`metric` over the grid of swept keys `x` (columns) and `y` (rows), each cell annotated.

    Raises TltsimError when a cell holds more than one run (another key varies too: select first).
    """
    _check(table, [x, y, metric])
    if table.duplicated([x, y]).any():
        raise TltsimError(f"sweep_heatmap: several runs share a ({x}, {y}) cell; other keys vary too — "
                          f"select rows with one value of each other key first")
    grid = table.pivot(index=y, columns=x, values=metric).sort_index().sort_index(axis=1)
    fig, ax = new_figure(max(5.0, 0.9 * grid.shape[1] + 3), max(3.5, 0.5 * grid.shape[0] + 2))
    im = ax.imshow(grid.to_numpy(float), cmap="viridis", aspect="auto", origin="lower")
    vals = grid.to_numpy(float)
    mid = np.nanmin(vals) + (np.nanmax(vals) - np.nanmin(vals)) / 2
    for (r, c), v in np.ndenumerate(vals):
        ax.text(c, r, f"{v:.3g}", ha="center", va="center", fontsize=8, color="k" if v > mid else "w")
    ax.set_xticks(range(grid.shape[1]), [str(v) for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [str(v) for v in grid.index])
    ax.grid(False)
    ax.set_title(metric_label(metric), loc="left")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    fig.colorbar(im, ax=ax, label=metric_label(metric))
    return fig


@styled
def sweep_bars(table: pd.DataFrame, keys: list[str], metric: str):
    """`metric` of each run as a horizontal bar, labelled with its values of the swept `keys`."""
    _check(table, [*keys, metric])
    labels = [", ".join(f"{k.rsplit('.', 1)[-1]}={str(row[k]).replace(chr(34), '')}" for k in keys
                        if not pd.isna(row[k])) for _, row in table.iterrows()]
    fig, ax = new_figure(8.5, 0.45 * len(table) + 1.4)
    y = np.arange(len(table))
    values = table[metric].to_numpy(float)
    bars = ax.barh(y, values, 0.7, color=[run_color(i) for i in range(len(table))])
    ax.bar_label(bars, labels=[f"{v:.3g}" for v in values], padding=3, fontsize=8)
    ax.set_yticks(y, labels)
    ax.set_ylim(len(table) - 0.5, -0.5)
    ax.set_xlim(0, np.nanmax(values) * 1.12)
    ax.grid(axis="y", visible=False)
    ax.set_title(f"{metric_label(metric)} per run", loc="left")
    ax.set_xlabel(metric_label(metric))
    return fig


def sweep_figure(table: pd.DataFrame, keys: list[str], metric: str):
    """The default figure of a sweep over `keys`: a heat map over two numeric keys, lines against the
    first numeric key (one line per combination of the others), bars per run when no key is numeric;
    None when nothing was swept."""
    if not keys:
        return None
    numeric = [k for k in keys if pd.api.types.is_numeric_dtype(table[k])]
    if len(keys) == 2 and len(numeric) == 2 and not table.duplicated(keys).any():
        return sweep_heatmap(table, keys[0], keys[1], metric)
    if not numeric and len(keys) > 1:
        return sweep_bars(table, keys, metric)
    x = numeric[0] if numeric else keys[0]
    return sweep_lines(table, x, metric, by=[k for k in keys if k != x])
