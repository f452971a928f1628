"""The record schema shared by the simulator and the real backend.

A run (simulated or real) is a `Result`: DataFrames with fixed columns, plus a
summary dict and the config that produced it. Plots, tables, the report and
validation read only these, so they work on either side.

timeline: one row per interval a worker spent in one state
    step, worker, state, t_start, t_end            (seconds since the run began)
    batch_size, tokens, accepted, strategy         (optional; NaN / "" when not applicable)
steps: one row per RL step
    step, t_start, rollout_s, reward_s, train_s, sync_s, total_s, ... (policy-specific extras)
requests: one row per response
    step, prompt_id, sample, engine, prompt_len, response_len, admitted_at, finished_at
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from tltsim.errors import TltsimError
from tltsim.io import atomic_path, write_json

# Worker states, in the order plots stack and colour them.
STATES = ["prefill", "decode", "spec_decode", "drafter_train", "idle", "reward", "train", "weight_sync"]


class TimelineRow(NamedTuple):
    """One timeline row: a worker in one state from t_start to t_end (the optional fields as the schema says)."""

    step: int
    worker: int
    state: str
    t_start: float
    t_end: float
    batch_size: float = math.nan
    tokens: float = 0.0
    accepted: float = math.nan
    strategy: str = ""


TIMELINE_COLUMNS = list(TimelineRow._fields)
STEP_COLUMNS = ["step", "t_start", "rollout_s", "reward_s", "train_s", "sync_s", "total_s"]
REQUEST_COLUMNS = ["step", "prompt_id", "sample", "engine", "prompt_len", "response_len", "admitted_at", "finished_at"]
# A real run's steps column speed_probe_s: seconds of one plain decode iteration at batch SPEED_BATCH after
# prompts of SPEED_CONTEXT tokens (real.profile.speed_probe), how fast the machine ran before the step
SPEED_BATCH, SPEED_CONTEXT = 8, 64

_FRAMES = ("timeline", "steps", "requests", "iterations")


@dataclass
class Result:
    """What one run produced. `iterations` is optional (per-iteration records, real runs and --exact)."""

    timeline: pd.DataFrame
    steps: pd.DataFrame
    requests: pd.DataFrame
    summary: dict
    config: dict = field(default_factory=dict)
    iterations: pd.DataFrame | None = None

    def save(self, out_dir: str | Path) -> Path:
        """Write Parquet files, summary.json and config.json into `out_dir`, each atomically.

        summary.json is written last: its presence marks a complete result.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name in _FRAMES:
            frame = getattr(self, name)
            if frame is None:
                continue
            with atomic_path(out / f"{name}.parquet") as tmp:
                frame.to_parquet(tmp, index=False)
        write_json(out / "config.json", self.config)
        write_json(out / "summary.json", self.summary)
        return out

    @classmethod
    def load(cls, out_dir: str | Path) -> "Result":
        out = Path(out_dir)
        if not (out / "summary.json").exists():
            raise TltsimError(
                f"{out}: not a complete result (no summary.json); point at a directory written by "
                f"`tltsim simulate`, `tltsim compare` or `tltsim real run`"
            )
        frames = {n: pd.read_parquet(out / f"{n}.parquet") for n in _FRAMES if (out / f"{n}.parquet").exists()}
        cfg_path = out / "config.json"
        return cls(
            timeline=frames["timeline"],
            steps=frames["steps"],
            requests=frames["requests"],
            iterations=frames.get("iterations"),
            summary=json.loads((out / "summary.json").read_text()),
            config=json.loads(cfg_path.read_text()) if cfg_path.exists() else {},
        )

    @property
    def name(self) -> str:
        return str(self.summary.get("policy", self.config.get("policy", "run")))
