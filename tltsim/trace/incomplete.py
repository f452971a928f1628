"""A log cut mid-step, as real logs are: the groups with fewer samples than the run's group size left out.

A run stopped mid-step (or a log that lost its last lines) leaves groups with fewer than `group` samples. GRPO
never trained on them, and a step replayed with them would be a smaller step than the run made, so the readers of
such logs (PolyTrace's multi-turn log, verl's rollout dump) leave them out:

    df, left_out = whole_groups(df, group, path)

warns once per step that had any (`tltsim: warning: ...`, naming the step and how many groups), leaves out a step
that is left with no complete group, and says what it left out in one sentence for the trace's metadata
(`TraceMeta.left_out`, which `tltsim trace stats` prints). A log of nothing but incomplete groups is refused.
"""
from __future__ import annotations

import warnings

import pandas as pd

from tltsim.core.errors import TltsimError, TltsimWarning


def whole_groups(df: pd.DataFrame, group: int, path) -> tuple[pd.DataFrame, str]:
    """The rows of `df` (step, prompt_id, sample) whose group has `group` samples, and what was left out ("" for
    nothing)."""
    sizes = df.groupby(["step", "prompt_id"])["sample"].transform("size").to_numpy()
    short = sizes < group
    if not short.any():
        return df, ""
    if short.all():
        raise TltsimError(f"{path}: every group has fewer than {group} samples (the group size), so GRPO trained on "
                          f"none of them; give a log with at least one whole step")
    cut = df[short]
    kept_steps = set(df.loc[~short, "step"].tolist())
    parts = []
    for step, rows in cut.groupby("step"):
        groups = rows["prompt_id"].nunique()
        whole = step not in kept_steps
        said = (f"step {step}: {groups} group{'s' if groups > 1 else ''} with fewer than {group} samples "
                f"({len(rows)} response{'s' if len(rows) > 1 else ''})")
        warnings.warn(f"{path}: {said} left out{', and so the step, which had no whole group' if whole else ''} "
                      f"(a run stopped mid-step, or lines lost or added)", TltsimWarning)
        parts.append(said + (" (the whole step)" if whole else ""))
    return df[~short].reset_index(drop=True), "incomplete groups: " + "; ".join(parts)
