"""Length statistics of a trace, per step and overall, including the tail share.

Quantile rules (both stated because they differ on purpose):

- `median`, `p90`, `p99` are numpy's default (linear interpolation between order
  statistics, `np.percentile(..., method="linear")`), the convention of the public
  logs these traces are matched to.
- The tail share uses an order statistic, no interpolation. Model one decode slot per
  response, all starting together, one token per unit of time: response i finishes at
  time L_i and the step's makespan is max L. With the lengths of a step sorted,
  L_(1) <= ... <= L_(n), 90% of responses have finished at t90 = L_(k), k = ceil(0.9 n)
  (the earliest time by which at least 90% are done), and

      tail_share = (L_(n) - t90) / L_(n)

  the fraction of the step's makespan spent waiting for the last 10%.
  Example: lengths 1..10 give k = 9, t90 = 9, tail share (10 - 9) / 10 = 0.1.

Overall figures pool all responses, except `tail_share`, which is the share of the total
synchronous rollout time (the sum of step makespans) spent after each step's 90% mark:
sum(max_s - t90_s) / sum(max_s).

`truncated_fraction` counts `finished == False` when the trace has that column, else
responses at `meta.max_response_len`; it is None when neither is known.

`aborted_fraction` is the share of rows marked `aborted` (0 without the column). Aborted requests
produced nothing, so the length figures (mean to tail_share, truncated_fraction) are those of the
other rows; `responses` counts every row.

A multi-turn trace (`Trace.agentic`) adds AGENTIC_FIGURES to every step's entry and the overall object:
`trajectories` (its rows), `turns`, `tool_calls` (turns followed by a tool call; a turn's several calls, where a
log records them, count once), `completion_tokens` (the tokens the model generated, all turns),
`tool_latency_s` (the tool calls' seconds, summed) and `tool_wait_share` = tool_latency_s / (tool_latency_s +
the turns' generation seconds), the share of a trajectory's own time spent waiting for tools; None where the trace
does not record the turns' generation seconds (`turn_gen_s`), or both sums are 0.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tltsim.trace.schema import Trace

# The figures of every step's entry in `per_step` and of the overall object (which adds `steps`).
FIGURES = ["responses", "mean", "median", "p90", "p99", "max", "max_over_median", "tail_share", "truncated_fraction",
           "aborted_fraction"]
# What a multi-turn trace adds to both.
AGENTIC_FIGURES = ["trajectories", "turns", "tool_calls", "completion_tokens", "tool_latency_s", "tool_wait_share"]


def t90(lengths) -> int:
    """The time by which ceil(0.9 n) of n responses have finished (see the module docstring)."""
    x = np.sort(np.asarray(lengths))
    k = (9 * len(x) + 9) // 10  # ceil(0.9 n) in integers: 0.9 * 70 is 63.00000000000001 in floats
    return int(x[k - 1])


def tail_share(lengths) -> float:
    """(max - t90) / max for one step's response lengths."""
    top = int(np.max(lengths))
    return (top - t90(lengths)) / top


def stats(trace: Trace) -> dict:
    """Per-step and overall statistics of `trace` as a JSON-ready dict (keys in FIGURES, plus
    `steps` = number of steps and `per_step` = one dict per step with `step` and FIGURES, and `left_out` = what the
    source held that the trace leaves out, where anything was)."""
    lengths = trace.df["response_len"].to_numpy()
    truncated = _truncated(trace)
    aborted = trace.df["aborted"].to_numpy(dtype=bool) if "aborted" in trace.df else np.zeros(len(lengths), bool)
    per_step, tail_time, makespan = [], 0, 0
    for s, idx in trace.df.groupby("step", sort=True).indices.items():
        entry = {"step": int(s)}
        entry.update(_figures(lengths[idx], None if truncated is None else truncated[idx], aborted[idx]))
        per_step.append(entry)
        kept = lengths[idx][~aborted[idx]]
        if len(kept):
            tail_time += entry["max"] - t90(kept)
            makespan += entry["max"]
    overall = {"steps": len(per_step)}
    overall.update(_figures(lengths, truncated, aborted))
    overall["tail_share"] = tail_time / makespan if makespan else float("nan")
    if trace.agentic:
        turns = trace.turns
        overall.update(_agentic(turns))
        for entry, (_, part) in zip(per_step, turns.groupby("step", sort=True)):
            entry.update(_agentic(part))
    overall["per_step"] = per_step
    if trace.meta.left_out:
        overall["left_out"] = trace.meta.left_out
    return overall


def _agentic(turns: pd.DataFrame) -> dict:
    """AGENTIC_FIGURES of some trajectories' turns (Trace.turns rows)."""
    called = turns["tool_latency_s"].notna()
    tool_s = float(turns["tool_latency_s"].sum())  # NaN (no call) counts 0
    share = None
    if "gen_s" in turns.columns:
        total = tool_s + float(turns["gen_s"].sum())
        share = tool_s / total if total > 0 else None
    return {"trajectories": int(len(turns[["step", "prompt_id", "sample"]].drop_duplicates())), "turns": int(len(turns)),
            "tool_calls": int(called.sum()), "completion_tokens": int(turns["response_len"].sum()),
            "tool_latency_s": tool_s, "tool_wait_share": share}


def _figures(lengths: np.ndarray, truncated: np.ndarray | None, aborted: np.ndarray) -> dict:
    kept = lengths[~aborted]
    out = {"responses": int(len(lengths))}
    if len(kept):
        median, p90, p99 = (float(v) for v in np.percentile(kept, [50, 90, 99]))
        top = int(kept.max())
        out.update(mean=float(kept.mean()), median=median, p90=p90, p99=p99, max=top, max_over_median=top / median,
                   tail_share=tail_share(kept))
    else:  # every request of the step was aborted: no lengths
        out.update(dict.fromkeys(["mean", "median", "p90", "p99", "max_over_median", "tail_share"], float("nan")), max=0)
    out["truncated_fraction"] = None if truncated is None or not len(kept) else float(truncated[~aborted].mean())
    out["aborted_fraction"] = float(aborted.mean())
    return out


def _truncated(trace: Trace) -> np.ndarray | None:
    """Which responses the cap cut: the trace's `finished` where it has one; else, single-turn, those at the cap
    (a multi-turn trace's cap bounds what is kept, not response_len); None where neither tells."""
    if "finished" in trace.df.columns:
        return ~trace.df["finished"].to_numpy(dtype=bool)
    if trace.meta.max_response_len is not None and not trace.agentic:
        return trace.df["response_len"].to_numpy() >= trace.meta.max_response_len
    return None
