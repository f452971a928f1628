"""Export a Result's timeline as a Chrome / Perfetto trace (open in ui.perfetto.dev or chrome://tracing)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tltsim.core.io import write_text
from tltsim.core.records import Result

FORMAT = "tltsim.timeline/1"


def chrome_trace(result: Result) -> dict:
    """One complete ("X") event per timeline interval; one thread per worker, times in microseconds."""
    tl = result.timeline
    events = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": int(w), "args": {"name": f"engine {int(w)}"}}
        for w in sorted(tl["worker"].unique())
    ]
    for row in tl.itertuples(index=False):
        args = {"step": int(row.step)}
        if not np.isnan(row.batch_size):
            args["batch_size"] = float(row.batch_size)
        if row.tokens:
            args["tokens"] = float(row.tokens)
        if not np.isnan(row.accepted):
            args["accepted"] = float(row.accepted)
        if row.strategy:
            args["strategy"] = row.strategy
        events.append(
            {
                "name": row.state,
                "cat": row.state,
                "ph": "X",
                "pid": 0,
                "tid": int(row.worker),
                "ts": float(row.t_start) * 1e6,
                "dur": float(row.t_end - row.t_start) * 1e6,
                "args": args,
            }
        )
    # otherData first: its format is the mark tltsim.core.marks.written_by_tltsim reads in the file's head
    return {"otherData": {"format": FORMAT, "policy": result.name}, "traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(result: Result, path: str | Path) -> Path:
    write_text(path, json.dumps(chrome_trace(result)))
    return Path(path)
