"""Response-length distribution: histogram over all steps and a CDF per step, both on a log length axis."""
from __future__ import annotations

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from tltsim.core.errors import TltsimError
from tltsim.analysis.report.plots.style import new_figure, styled


def _lengths(source) -> pd.DataFrame:
    """step and response_len columns of a Result (its requests), a Trace (its rows) or such a DataFrame."""
    df = getattr(source, "requests", None)
    if df is None:
        df = getattr(source, "df", source)
    if not isinstance(df, pd.DataFrame) or not {"step", "response_len"} <= set(df.columns):
        raise TltsimError("length_distribution needs a Result, a Trace or a DataFrame with step and response_len columns")
    return df[["step", "response_len"]]


@styled
def length_distribution(source, steps=None, title: str = "Response lengths", max_cdfs: int = 40):
    """Histogram of all response lengths (median, p90, p99 marked) and the CDF of each step and of all.

    `source`: Result, Trace or DataFrame; `steps`: the steps to include (default all); with more
    steps than `max_cdfs`, the CDFs of `max_cdfs` evenly spaced steps are drawn.
    """
    df = _lengths(source)
    if steps is not None:
        df = df[df["step"].isin(list(steps))]
    if df.empty:
        raise TltsimError("length_distribution: no responses in the selected steps")
    lengths = df["response_len"].to_numpy(float)
    lo, hi = max(lengths.min(), 1.0), lengths.max()
    fig, (ax_h, ax_c) = new_figure(11, 4.0, ncols=2)

    bins = np.geomspace(lo, hi * 1.001, int(np.clip(2 * np.sqrt(len(lengths)), 10, 60)))
    ax_h.hist(lengths, bins=bins, color="#2c7bb6", alpha=0.85)
    _log_length_axis(ax_h)
    for q, ls in [(0.5, "-"), (0.9, "--"), (0.99, ":")]:
        v = float(np.quantile(lengths, q))
        ax_h.axvline(v, color="k", ls=ls, lw=1, label=f"p{round(q * 100)} = {v:,.0f}")
    ax_h.axvline(hi, color="#b2182b", lw=1, label=f"max = {hi:,.0f}")
    ax_h.set_title(f"{title}: {len(lengths):,} responses", loc="left")
    ax_h.set_xlabel("response length (tokens, log scale)")
    ax_h.set_ylabel("responses")
    ax_h.legend(loc="upper right")

    step_ids = sorted(df["step"].unique())
    drawn = step_ids
    if len(step_ids) > max_cdfs:
        drawn = [step_ids[i] for i in np.linspace(0, len(step_ids) - 1, max_cdfs).astype(int)]
    norm = mpl.colors.Normalize(min(step_ids), max(step_ids) if len(step_ids) > 1 else min(step_ids) + 1)
    cmap = mpl.colormaps["viridis"]
    groups = dict(tuple(df[df["step"].isin(drawn)].groupby("step", sort=True)))
    for s in drawn:
        x = np.sort(groups[s]["response_len"].to_numpy(float))
        ax_c.step(x, np.arange(1, len(x) + 1) / len(x), where="post", lw=0.8, alpha=0.6, color=cmap(norm(s)))
    x = np.sort(lengths)
    ax_c.step(x, np.arange(1, len(x) + 1) / len(x), where="post", lw=2.2, color="k")
    _log_length_axis(ax_c)
    ax_c.set_ylim(0, 1.01)
    some = "" if len(drawn) == len(step_ids) else f"{len(drawn)} of "
    ax_c.set_title(f"CDF per step ({some}{len(step_ids)} steps) and overall", loc="left")
    ax_c.set_xlabel("response length (tokens, log scale)")
    ax_c.set_ylabel("fraction of responses ≤ length")
    ax_c.legend(handles=[Line2D([], [], color="k", lw=2.2, label="all steps"),
                         Line2D([], [], color=cmap(0.5), lw=0.8, label="one step")], loc="lower right")
    if len(step_ids) > 1:
        cb = fig.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax_c, label="RL step", pad=0.01)
        cb.locator = MaxNLocator(integer=True)
        cb.update_ticks()
    return fig


def _log_length_axis(ax) -> None:
    """Log x axis with plain token counts at 1-2-5 steps (100, 200, 500, 1,000, ...)."""
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
