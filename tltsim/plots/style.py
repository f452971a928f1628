"""One look for every figure: fixed colours per worker state and per run, sizes, and atomic PNG output.

Figures are built with `matplotlib.figure.Figure` directly (no pyplot): nothing
global is switched, nothing has to be closed, and rendering uses the Agg
canvas whatever backend a notebook has selected.
"""
from __future__ import annotations

import functools
import io
from pathlib import Path

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from tltsim.io import atomic_path
from tltsim.records import STATES

# One colour per worker state, in records.STATES order; the same in every plot.
STATE_COLORS = dict(
    zip(
        STATES,
        [
            "#7b3294",  # prefill: purple
            "#2c7bb6",  # decode: blue
            "#1a9641",  # spec_decode: green
            "#fdae61",  # drafter_train: orange
            "#d9d9d9",  # idle: light grey
            "#e6c229",  # reward: yellow
            "#b2182b",  # train: red
            "#636363",  # weight_sync: dark grey
        ],
    )
)

# Step phases of the breakdown bars: (label, steps column, colour of the worker state that does it).
PHASES = [
    ("rollout", "rollout_s", STATE_COLORS["decode"]),
    ("reward", "reward_s", STATE_COLORS["reward"]),
    ("train", "train_s", STATE_COLORS["train"]),
    ("weight sync", "sync_s", STATE_COLORS["weight_sync"]),
]

DPI = 110  # PNG resolution: a 10-inch-wide figure is 1100 px, sharp in a browser, small on disk

STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "figure.facecolor": "white",
}


def run_color(i: int) -> str:
    """Colour of the i-th run of a comparison (the baseline is 0)."""
    return mpl.colormaps["tab10"](i % 10)


def styled(fn):
    """Build the figure under STYLE, so rc settings apply to every artist it creates."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with mpl.rc_context(STYLE):
            return fn(*args, **kwargs)

    return wrapper


def new_figure(width: float, height: float, **subplots) -> tuple[Figure, object]:
    """A Figure and its axes (`Figure.subplots` arguments), laid out with constrained layout."""
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(**subplots)


def note(ax, text: str) -> None:
    """Write `text` in the middle of an empty axes (a panel with no data)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


def png_bytes(fig: Figure, dpi: int = DPI) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def save_png(fig: Figure, path: str | Path, dpi: int = DPI) -> Path:
    """Write `fig` as a PNG at `path` atomically (a reader sees the old file or the whole new one)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(png_bytes(fig, dpi))
    return path


def labelled(results) -> list[tuple[str, object]]:
    """(label, Result) pairs for one Result or a sequence of them; repeated names get "#2", "#3"."""
    results = [results] if hasattr(results, "timeline") else list(results)
    seen: dict[str, int] = {}
    out = []
    for r in results:
        seen[r.name] = seen.get(r.name, 0) + 1
        out.append((r.name if seen[r.name] == 1 else f"{r.name} #{seen[r.name]}", r))
    return out


def gpus_per_worker(result) -> int:
    """GPUs behind one timeline worker: the TP size of a rollout engine (1 when the config does not say)."""
    return int(result.config.get("cluster", {}).get("tp", 1))


def legend_right(fig: Figure, *axes, **kwargs) -> None:
    """One legend of the labelled artists of `axes` (each label once), outside them on the right."""
    seen = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    handles, labels = list(seen.values()), list(seen)
    if kwargs.pop("reverse", False):
        handles, labels = handles[::-1], labels[::-1]
    fig.legend(handles, labels, loc="outside right upper", **kwargs)


def step_axis(ax) -> None:
    """x axis of RL steps: whole numbers only."""
    ax.set_xlabel("RL step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
