"""The ways to get a drafter against the drift of one not retrained (tltsim.analysis.drafter.drift_sensitivity's rows)."""
from __future__ import annotations

from tltsim.analysis.report.plots.style import PAGE_WIDTH_IN, legend_right, new_figure, policy_color, styled


@styled
def drift_sensitivity(rows):
    """Seconds saved a step over verl against the drift per RL step (accepted length per verify), one line per way;
    the drift fitted to the run, where there is one, marked by a dashed line."""
    fig, ax = new_figure(PAGE_WIDTH_IN, 3.2)
    for way in dict.fromkeys(r["way"] for r in rows):
        at = sorted((r for r in rows if r["way"] == way), key=lambda r: r["drift_per_step"])
        ax.plot([r["drift_per_step"] for r in at], [r["saved_per_step_s"] for r in at], marker="o",
                color=policy_color(at[0]["policy"]), label=f"{way} ({at[0]['policy']})")
    fitted = [r["drift_per_step"] for r in rows if r["fitted"]]
    if fitted:
        ax.axvline(fitted[0], color="k", ls="--", lw=0.8, label="fitted to the run")
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_xlabel("drift of a drafter not retrained: accepted length lost per RL step (tokens per verify)")
    ax.set_ylabel("saved per step over verl (s)")
    ax.set_title("Which way to get a drafter, as the drift grows", loc="left")
    legend_right(fig, ax)
    return fig
