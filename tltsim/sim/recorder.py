"""The simulator's recorder: what a simulated run writes as it goes, in the record schema (tltsim.core.records), for
`Result`.

The synchronous step loop (simulator.py) and the asynchronous one (async_loop.py) both write through
a `SimRecorder`: timeline rows (`TimelineRow`), one dict per step, the request columns of each step,
and the exact path's per-iteration frames.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tltsim.core.records import REQUEST_COLUMNS, TIMELINE_COLUMNS, TimelineRow


class SimRecorder:
    def __init__(self):
        self.timeline: list[TimelineRow] = []
        self.steps: list[dict] = []
        self.requests: list[dict] = []  # per step: column arrays of the requests frame
        self.iterations: list[pd.DataFrame] = []
        self.turns: list[pd.DataFrame] = []  # per engine and step of a multi-turn trace: its turns' rows

    def interval(self, row: TimelineRow) -> int:
        """Add a timeline row; returns its index (for `stretch`)."""
        self.timeline.append(row)
        return len(self.timeline) - 1

    def stretch(self, index: int, t_end: float, tokens: float = 0.0) -> None:
        """Row `index` lasts until `t_end` and gained `tokens` more."""
        row = self.timeline[index]
        self.timeline[index] = row._replace(t_end=t_end, tokens=row.tokens + tokens)

    def step(self, row: dict) -> None:
        """One step's row of the steps frame."""
        self.steps.append(row)

    def step_requests(self, columns: dict) -> None:
        """One step's requests, as column arrays (REQUEST_COLUMNS plus `finished`)."""
        self.requests.append(columns)

    def timeline_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.timeline, columns=TIMELINE_COLUMNS)

    def requests_frame(self) -> pd.DataFrame:
        """REQUEST_COLUMNS plus `finished` (False: stopped unfinished; response_len = tokens generated that step)."""
        if not self.requests:
            return pd.DataFrame(columns=REQUEST_COLUMNS + ["finished"])
        return pd.DataFrame({c: np.concatenate([r[c] for r in self.requests]) for c in self.requests[0]})

    def iterations_frame(self) -> pd.DataFrame | None:
        return pd.concat(self.iterations, ignore_index=True) if self.iterations else None
