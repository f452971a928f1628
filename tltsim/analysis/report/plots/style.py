"""One look for every figure: fixed colours per worker state and per policy, sizes, and atomic PNG output.

A policy has one colour everywhere (the report, its charts, the notebooks): `policy_color(name)`; a
comparison's runs take `run_colors(runs)`, their policies' colours (a second run of one policy the first
palette colour no policy of the comparison has).

Figures are built with `matplotlib.figure.Figure` directly (no pyplot): nothing
global is switched, nothing has to be closed, and rendering uses the Agg
canvas whatever backend a notebook has selected.
"""
from __future__ import annotations

import functools
import io
import zlib
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from tltsim.core.io import atomic_path
from tltsim.policies import policy_names
from tltsim.core.records import STATES

# One colour per worker state, in records.STATES order; the same in every plot.
STATE_COLORS = dict(
    zip(
        STATES,
        [
            "#7b3294",  # prefill: purple
            "#2c7bb6",  # decode: blue
            "#1a9641",  # spec_decode: green
            "#fdae61",  # drafter_train: orange
            "#a6cee3",  # tool_wait: pale blue (idle, waiting on tools)
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
PAGE_WIDTH_IN = 10.6  # the widest figure: the report's column (1,166 px at DPI), where it is shown unscaled

# Policy colours, in the order of tltsim.policies.policy_names() (and series colours of a sweep, in order): the 10 of matplotlib's tab10, then 10 more picked greedily (from the
# Trubetskoy 20, tab20b and Dark2) for the largest smallest CIELAB distance to those before, none
# darker than L* 25 (black lines look alike) nor lighter than L* 80 (to show on white): any two of
# the 20 differ by a CIELAB distance of 27 or more, so a comparison of every shipped policy draws each
# in its own colour.
PALETTE = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#f032e6", "#a6761d", "#637939", "#1b9e77", "#e7969c", "#e7298a", "#911eb4", "#393b79", "#800000", "#e6ab02",
]

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


# Markers of the lines of a comparison, one a policy (in the order of its colour), so that two lines whose colours
# are near (or a print in grey) still tell apart.
MARKERS = ["o", "s", "D", "^", "v", "<", ">", "p", "h", "X", "P", "*", "d", "8", "H", "1", "2", "3", "4", "+"]


def run_color(i: int) -> str:
    """Colour of the i-th series of a figure (a sweep's); distinct for 20, then repeating."""
    return PALETTE[i % len(PALETTE)]


def _policy_index(name: str) -> int:
    """The place of policy `name` among the registered ones; another name (a label of a notebook's) by a stable
    hash of it."""
    names = policy_names()
    return names.index(name) if name in names else len(names) + zlib.crc32(name.encode()) % len(PALETTE)


def policy_color(name: str) -> str:
    """The colour of policy `name` in every figure and table of the report and the notebooks."""
    return PALETTE[_policy_index(name) % len(PALETTE)]


def run_style(runs) -> dict[str, tuple[str, str]]:
    """label -> (colour, marker) for the (label, Result) pairs of a comparison: each run its policy's
    (Result.name's), a second run of one policy the first palette colour (and marker) that no policy of the
    comparison has. A policy that is not registered (a combination such as async+tlt) whose hashed colour another
    policy of the comparison has already takes the first colour none has: a registered policy keeps its own."""
    registered = set(policy_names())
    names = list(dict.fromkeys(r.name for _, r in runs))
    own = {n: _policy_index(n) for n in names if n in registered}
    for n in names:
        if n not in own:
            used = {j % len(PALETTE) for j in own.values()}
            i = _policy_index(n)
            own[n] = i if i % len(PALETTE) not in used else next(
                (k for k in range(i, i + len(PALETTE)) if k % len(PALETTE) not in used), i)
    spare = (i for i in range(10 * len(PALETTE)) if i % len(PALETTE) not in {j % len(PALETTE) for j in own.values()})
    out, seen = {}, set()
    for label, r in runs:
        i = own[r.name] if r.name not in seen else next(spare)
        seen.add(r.name)
        out[label] = (PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)])
    return out


def run_colors(runs) -> dict[str, str]:
    """label -> colour for the (label, Result) pairs of a comparison (run_style's colours)."""
    return {label: colour for label, (colour, _) in run_style(runs).items()}


def styled(fn):
    """Build the figure under STYLE, so rc settings apply to every artist it creates."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with mpl.rc_context(STYLE):
            return fn(*args, **kwargs)

    return wrapper


def new_figure(width: float, height: float, **subplots) -> tuple[Figure, object]:
    """A Figure and its axes (`Figure.subplots` arguments), laid out with constrained layout; no wider than
    PAGE_WIDTH_IN, so a report shows it at the size it was drawn."""
    fig = Figure(figsize=(min(width, PAGE_WIDTH_IN), height), layout="constrained")
    return fig, fig.subplots(**subplots)


def note(ax, text: str) -> None:
    """Write `text` in the middle of an empty axes (a panel with no data)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


EXACT_COLOURS = 128  # a PNG's most frequent colours kept exactly; the other half of its palette is median-cut


def png_bytes(fig: Figure, dpi: int = DPI) -> bytes:
    """The figure as a 256-colour palette PNG, about a third of the bytes of the full-colour one.

    Its EXACT_COLOURS most frequent colours (the fills, lines and text of a plot: every run and state
    colour) are kept exactly; the rest of the palette is a median cut of the other colours (anti-aliased
    edges, colour bars), and every pixel takes its nearest palette colour.
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    image = Image.open(buf).convert("RGB")
    pixels = np.asarray(image).reshape(-1, 3).astype(np.int32)
    codes, index, counts = np.unique(pixels[:, 0] << 16 | pixels[:, 1] << 8 | pixels[:, 2],
                                     return_inverse=True, return_counts=True)
    colours = np.stack([codes >> 16, codes >> 8 & 255, codes & 255], axis=1)
    order = np.argsort(-counts, kind="stable")
    palette = colours[order[:EXACT_COLOURS]]
    if len(colours) > EXACT_COLOURS:
        rest = Image.fromarray(colours[order[EXACT_COLOURS:]].astype(np.uint8)[None])
        cut = rest.quantize(256 - EXACT_COLOURS, method=Image.Quantize.MEDIANCUT).getpalette()
        palette = np.concatenate([palette, np.reshape(cut[: 3 * (256 - EXACT_COLOURS)], (-1, 3))])
    c, p = colours.astype(np.float32), palette.astype(np.float32)
    nearest = ((c * c).sum(1)[:, None] - 2 * c @ p.T + (p * p).sum(1)[None, :]).argmin(1).astype(np.uint8)
    out = Image.frombytes("P", image.size, nearest[index.ravel()].tobytes())
    out.putpalette(palette.astype(np.uint8).ravel().tolist())
    data = io.BytesIO()
    info = PngInfo()
    info.add_text("Software", "tltsim")  # the mark that lets tltsim replace it (tltsim.core.marks.written_by_tltsim)
    out.save(data, format="PNG", optimize=True, pnginfo=info)
    return data.getvalue()


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
