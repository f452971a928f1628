"""What the workers did when: a Gantt chart of one step, the running batch per engine, GPUs by state over time."""
from __future__ import annotations

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from tltsim.core.errors import TltsimError
from tltsim.analysis.report.plots.style import STATE_COLORS, gpus_per_worker, labelled, legend_right, new_figure, styled
from tltsim.core.records import IDLE_STATES, STATES


def slowest_step(result) -> int:
    """The step whose rollout took longest: where the long tail shows."""
    steps = result.steps
    return int(steps.loc[steps["rollout_s"].idxmax(), "step"])


def _step_start(result, step: int) -> float:
    rows = result.steps[result.steps["step"] == step]
    if rows.empty:
        raise TltsimError(f"step {step} is not in the result of {result.name!r}; it has steps "
                          f"{int(result.steps['step'].min())}..{int(result.steps['step'].max())}")
    return float(rows["t_start"].iloc[0])


@styled
def gantt(results, step: int | None = None):
    """Per-engine timeline of one RL step, coloured by state; one panel per result, stacked, same time axis.

    `step` defaults to the first result's slowest rollout step. Times are seconds since the step began; a run
    whose rollout runs beside training (async) generated part of the step's responses before the step began,
    drawn left of 0 and said so above its panel.
    """
    runs = labelled(results)
    step = slowest_step(runs[0][1]) if step is None else step
    engines = max(int(r.timeline["worker"].max()) + 1 for _, r in runs)
    height = min(max(1.4, 0.16 * engines + 0.9), 6.0, max(1.4, 24.0 / len(runs)))  # many runs: flatter panels
    fig, axes = new_figure(10, height * len(runs) + 0.6, nrows=len(runs), sharex=True, squeeze=False)
    present: set[str] = set()
    for ax, (label, r) in zip(axes[:, 0], runs):
        t0 = _step_start(r, step)
        tl = r.timeline[r.timeline["step"] == step]
        for state in STATES:
            rows = tl[tl["state"] == state]
            if rows.empty:
                continue
            present.add(state)
            ax.barh(rows["worker"], rows["t_end"] - rows["t_start"], left=rows["t_start"] - t0, height=0.8,
                    color=STATE_COLORS[state], linewidth=0)
        total = float(r.steps.loc[r.steps["step"] == step, "total_s"].iloc[0])
        early = float(t0 - tl["t_start"].min()) if len(tl) else 0.0
        if early > 0:  # rows of this step that began before it: its rollout ran beside the step before (async)
            ax.axvline(0, color="k", lw=1, ls="--")
            ax.set_title(f"left of the dashed line (the step's start): the step's rollout, begun {early:.1f} s "
                         "earlier beside the previous step's training", loc="right", fontsize=8, fontweight="normal")
        ax.set_title(f"{label}: step {step}, {total:.1f} s", loc="left")
        ax.set_ylabel(f"engine ({gpus_per_worker(r)} GPUs)")
        ax.set_ylim(engines - 0.5, -0.5)
        ax.grid(axis="y", visible=False)
    axes[-1, 0].set_xlabel("time since step start (s)")
    handles = [Patch(color=STATE_COLORS[s], label=s.replace("_", " ")) for s in STATES if s in present]
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles))
    return fig


def running_batch(requests: pd.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """engine -> (times, running requests from each time on), from admitted_at / finished_at.

    Events at one time count together, so a freed slot refilled at once shows no spike.
    """
    out = {}
    for engine, df in requests.groupby("engine", sort=True):
        t = np.concatenate([df["admitted_at"].to_numpy(float), df["finished_at"].to_numpy(float)])
        d = np.concatenate([np.ones(len(df)), -np.ones(len(df))])
        order = np.argsort(t, kind="stable")
        t, n = t[order], np.cumsum(d[order])
        last = np.append(t[1:] != t[:-1], True)  # the count after all events at one time
        out[int(engine)] = (t[last], n[last])
    return out


def switch_points(timeline: pd.DataFrame) -> pd.DataFrame:
    """Rows of `prefill` intervals that sit between `decode` and `spec_decode` on one worker: SD switching on."""
    tl = timeline.sort_values(["step", "worker", "t_start"], kind="stable")
    same = (tl["worker"].shift(1) == tl["worker"]) & (tl["step"].shift(1) == tl["step"])
    nxt_same = (tl["worker"].shift(-1) == tl["worker"]) & (tl["step"].shift(-1) == tl["step"])
    mask = (tl["state"] == "prefill") & same & (tl["state"].shift(1) == "decode") & nxt_same & (
        tl["state"].shift(-1) == "spec_decode")
    return tl[mask]


def sd_threshold(result) -> int | None:
    """The batch size at or below which the policy may speculate (policy knob `threshold`, default 32);
    None when it speculates whatever the batch (knob sd = "always")."""
    knobs = result.config.get("policy_knobs", {})
    return None if knobs.get("sd") == "always" else int(knobs.get("threshold", 32))


@styled
def batch_size(result, step: int | None = None):
    """Running batch over time on every engine during one step's rollout (log scale).

    When the policy speculated in that step, the SD threshold is drawn and each switch is marked
    where its re-prefill starts. `step` defaults to the slowest rollout step.
    """
    (label, r), = labelled(result)
    step = slowest_step(r) if step is None else step
    t0 = _step_start(r, step)
    requests = r.requests[r.requests["step"] == step]
    # a request left unfinished (partial rollout) ran until the rollout stopped
    end = t0 + float(r.steps.loc[r.steps["step"] == step, "rollout_s"].iloc[0])
    curves = running_batch(requests.assign(finished_at=requests["finished_at"].fillna(end)))
    fig, ax = new_figure(10, 4.2)
    cmap = mpl.colormaps["viridis"]
    n = max(len(curves), 1)
    peak = 1.0
    for i, (t, b) in enumerate(curves.values()):
        shown = np.where(b > 0, b, np.nan)  # the log axis has no zero: a finished engine's line ends
        ax.step(t - t0, shown, where="post", color=cmap(i / max(n - 1, 1)), lw=1.1, alpha=0.85)
        peak = max(peak, float(np.nanmax(shown)) if np.isfinite(shown).any() else 1.0)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylim(0.8, peak * 1.3)
    handles = [Line2D([], [], color=cmap(0.5), lw=1.1, label=f"one line per engine ({len(curves)})")]
    tl = r.timeline[r.timeline["step"] == step]
    thr = sd_threshold(r)
    if (tl["state"] == "spec_decode").any() and thr is not None:
        ax.axhline(thr, color="k", ls="--", lw=1)
        handles.append(Line2D([], [], color="k", ls="--", lw=1, label=f"SD threshold ({thr})"))
        sw = switch_points(tl)
        if len(sw):
            ax.plot(sw["t_start"] - t0, sw["batch_size"], "v", color="#d7191c", ms=7, mec="k", mew=0.5, zorder=5)
            handles.append(Line2D([], [], marker="v", ls="", color="#d7191c", mec="k", mew=0.5,
                                  label=f"SD switch ({len(sw)} engines)"))
    fig.legend(handles=handles, loc="outside right upper")
    ax.set_title(f"{label}: running batch per engine, step {step}", loc="left")
    ax.set_xlabel("time since step start (s)")
    ax.set_ylabel("running requests (log scale)")
    return fig


def _occupancy(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean number of intervals [start, end) covering each bin between consecutive `edges` (exact)."""
    s, e = np.sort(starts), np.sort(ends)
    cs, ce = np.concatenate([[0.0], np.cumsum(s)]), np.concatenate([[0.0], np.cumsum(e)])
    ks, ke = np.searchsorted(s, edges), np.searchsorted(e, edges)
    covered = (ks * edges - cs[ks]) - (ke * edges - ce[ke])  # integral of the count from -inf to each edge
    return np.diff(covered) / np.diff(edges)


@styled
def utilisation(result, steps=None, bins: int = 800, max_steps: int = 10):
    """GPUs in each state over time, stacked, idle on top (mean over `bins` time bins, exact per bin).

    `steps`: the steps to show (default all, or the first `max_steps` of a longer run, where a whole
    run's steps would be too thin to read); the title names them.
    """
    (label, r), = labelled(result)
    all_steps = r.steps["step"].tolist()
    shown = all_steps[:max_steps] if steps is None else [s for s in all_steps if s in set(steps)]
    if not shown:
        raise TltsimError(f"utilisation: none of the steps {list(steps)} is in the result of {label!r}")
    tl, per = r.timeline[r.timeline["step"].isin(shown)], gpus_per_worker(r)
    edges = np.linspace(float(tl["t_start"].min()), float(tl["t_end"].max()), bins + 1)
    mid = (edges[:-1] + edges[1:]) / 2
    fig, ax = new_figure(10, 3.8)
    bottom = np.zeros(bins)
    for state in [s for s in STATES if s != "idle"] + ["idle"]:
        rows = tl[tl["state"] == state]
        if rows.empty:
            continue
        gpus = per * _occupancy(rows["t_start"].to_numpy(float), rows["t_end"].to_numpy(float), edges)
        ax.fill_between(mid, bottom, bottom + gpus, color=STATE_COLORS[state], lw=0, label=state.replace("_", " "))
        bottom = bottom + gpus
    total = per * (int(r.timeline["worker"].max()) + 1)
    dur = tl["t_end"] - tl["t_start"]
    idle = float(dur[tl["state"].isin(IDLE_STATES)].sum() / dur.sum())
    which = "" if len(shown) == len(all_steps) else f", steps {shown[0]}-{shown[-1]} of {len(all_steps)}"
    ax.set_xlim(edges[0], edges[-1])
    ax.set_ylim(0, total)
    ax.set_title(f"{label}: GPUs by state over time (idle {idle:.0%} of GPU time{which})", loc="left")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("GPUs")
    legend_right(fig, ax, reverse=True)
    return fig
