"""The record schema shared by the simulator and the real backend.

A run (simulated or real) is a `Result`: DataFrames with fixed columns, plus a
summary dict and the config that produced it. Plots, tables, the report and
validation read only these, so they work on either side.

timeline: one row per interval a worker spent in one state
    step, worker, state, t_start, t_end            (seconds since the run began)
    batch_size, tokens, accepted, strategy         (optional; NaN / "" when not applicable)
    A row is a run of consecutive work in one state (`merge_states`, for the simulator and `real/` alike): a
    change of batch or strategy within it does not start a new row. batch_size is the running batch when the
    row began, tokens its tokens, accepted the mean accepted length of its speculative iterations, strategy
    the one it ran most. Per-iteration batches and strategies are the iterations frame's (exact runs and real
    runs), which the validation's work domain and the tuner chart read.
steps: one row per RL step
    step, t_start, rollout_s, reward_s, train_s, sync_s, total_s, ... (policy-specific extras)
requests: one row per response
    step, prompt_id, sample, engine, prompt_len, response_len, admitted_at, finished_at
turns: one row per turn of a multi-turn trajectory (optional: runs of an agentic trace)
    step, prompt_id, sample, engine, turn, prompt_tokens, cached_tokens, response_len, admitted_at,
    finished_at, tool_latency_s, tool_tokens
    prompt_tokens is the context the turn starts from (the prompt, earlier turns and tool answers),
    cached_tokens the part of it whose KV the engine still held (a prefix-cache hit; the rest was
    prefilled), response_len the tokens the turn generated, admitted_at and finished_at its generation's
    start and end; tool_latency_s and tool_tokens the tool call after it (NaN and 0 where it called none).

A result directory holds <frame>.parquet for each frame, config.json, summary.json and, written
last, manifest.json (kind "result"): the names, sizes and sha256 of those files (and of the files
written beside them, such as timeline.perfetto.json). `Result.load` reads a directory only when its
files agree with its manifest, so a truncated file, a missing one, a flipped bit or one left by
another run is an error that says which, never a silent mix or a silently wrong value.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from tltsim.core.errors import TltsimError
from tltsim.core.io import MANIFEST, atomic_path, manifest_kind, read_manifest, write_json, write_manifest

# Worker states, in the order plots stack and colour them. tool_wait: an engine whose trajectories all wait on
# tool calls, with nothing to generate (idle, as far as the GPU goes).
STATES = ["prefill", "decode", "spec_decode", "drafter_train", "tool_wait", "idle", "reward", "train", "weight_sync"]
IDLE_STATES = ("tool_wait", "idle")  # states in which a worker's GPUs do nothing


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


def merge_states(rows: list[TimelineRow], weights: list[float]) -> list[TimelineRow]:
    """One worker's rows in time order, consecutive rows of one state merged into one (the schema's meaning of a
    timeline row): t_start and batch_size of the first, t_end of the last, tokens summed, accepted the mean over
    the merged speculative iterations (`weights[i]`: how many row i holds; 0 for a row that did not speculate),
    strategy the one of most weight."""
    out: list[TimelineRow] = []
    counts: list[Counter] = []
    for row, w in zip(rows, weights):
        if out and out[-1].state == row.state:
            last = out[-1]._replace(t_end=row.t_end, tokens=out[-1].tokens + row.tokens)
        else:
            last = row._replace(accepted=math.nan, strategy="")
            out.append(last)
            counts.append(Counter())
        if w > 0:
            c = counts[-1]
            total = sum(c.values())
            c[row.strategy] += w
            last = last._replace(accepted=row.accepted if total == 0 else (last.accepted * total + row.accepted * w)
                                 / (total + w), strategy=c.most_common(1)[0][0])
        out[-1] = last
    return out
STEP_COLUMNS = ["step", "t_start", "rollout_s", "reward_s", "train_s", "sync_s", "total_s"]
REQUEST_COLUMNS = ["step", "prompt_id", "sample", "engine", "prompt_len", "response_len", "admitted_at", "finished_at"]
TURN_RECORD_COLUMNS = ["step", "prompt_id", "sample", "engine", "turn", "prompt_tokens", "cached_tokens", "response_len",
                       "admitted_at", "finished_at", "tool_latency_s", "tool_tokens"]
# A real run's steps column speed_probe_s: seconds of one plain decode iteration at batch SPEED_BATCH after
# prompts of SPEED_CONTEXT tokens (real.tools.profile.speed_probe), how fast the machine ran before the step
SPEED_BATCH, SPEED_CONTEXT = 8, 64

_FRAMES = ("timeline", "steps", "requests", "iterations", "turns")
_REQUIRED = ("timeline.parquet", "steps.parquet", "requests.parquet", "summary.json")
RESULT_FILES = frozenset({*(f"{n}.parquet" for n in _FRAMES), "config.json", "summary.json", MANIFEST})


@dataclass
class Result:
    """What one run produced. `iterations` is optional (per-iteration records, real runs and --exact), as is
    `turns` (runs of a multi-turn trace)."""

    timeline: pd.DataFrame
    steps: pd.DataFrame
    requests: pd.DataFrame
    summary: dict
    config: dict = field(default_factory=dict)
    iterations: pd.DataFrame | None = None
    turns: pd.DataFrame | None = None

    def save(self, out_dir: str | Path, also=()) -> Path:
        """Write Parquet files, summary.json and config.json into `out_dir`, each atomically, then its manifest.

        The manifest (written last, removed first) lists the files of this save with their sizes and
        sha256, and the files `also` names (written into `out_dir` before, such as a timeline export): a
        directory whose manifest is missing or disagrees with its files is not loaded. Write a new result
        into a fresh directory (`tltsim.core.io.atomic_dir`); saving over an old one in place (a real run after
        every step) leaves the directory unreadable until the save completes.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST).unlink(missing_ok=True)
        written = []
        for name in _FRAMES:
            frame, file = getattr(self, name), out / f"{name}.parquet"
            if frame is None:
                file.unlink(missing_ok=True)  # an earlier save's, not this result's
                continue
            with atomic_path(file) as tmp:
                frame.to_parquet(tmp, index=False)
            written.append(file.name)
        write_json(out / "config.json", self.config)
        write_json(out / "summary.json", self.summary)
        write_manifest(out, [*written, "config.json", "summary.json", *also], kind="result")
        return out

    @classmethod
    def load(cls, out_dir: str | Path, sealed: bool = True) -> "Result":
        """The result in `out_dir`; a directory that is not one complete result is a TltsimError saying why.

        `sealed=False` also reads a directory without a manifest, from the result files it has: a run
        directory caught in the middle of an in-place save, whose rows the caller filters by step.
        """
        out = Path(out_dir)
        inside = sorted(d.name for d in out.iterdir() if (d / MANIFEST).is_file()) if out.is_dir() else []
        if inside and manifest_kind(out) != "result":
            raise TltsimError(f"{out}: holds results ({', '.join(inside)}), is not one; give those, "
                              f"e.g. {out / inside[0]}")
        if sealed or (out / MANIFEST).exists():
            names = read_manifest(out, "result")
        else:
            names = [n for n in sorted(RESULT_FILES) if (out / n).is_file()]
        missing = [n for n in _REQUIRED if n not in names]
        if missing:
            raise TltsimError(f"{out}: its manifest lacks {', '.join(missing)}; not a result of "
                              f"`tltsim simulate`, `tltsim compare` or `tltsim real run`")
        frames = {n: _read(out, f"{n}.parquet", pd.read_parquet) for n in _FRAMES if f"{n}.parquet" in names}
        return cls(
            timeline=frames["timeline"],
            steps=frames["steps"],
            requests=frames["requests"],
            iterations=frames.get("iterations"),
            turns=frames.get("turns"),
            summary=_read(out, "summary.json", _json),
            config=_read(out, "config.json", _json) if "config.json" in names else {},
        )

    @property
    def name(self) -> str:
        return str(self.summary.get("policy", self.config.get("policy", "run")))


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _read(out: Path, name: str, read):
    """read(out / name); a file that cannot be parsed is a TltsimError naming it."""
    try:
        return read(out / name)
    except (OSError, ValueError, RecursionError):  # pyarrow: OSError or ArrowInvalid (a ValueError); json ValueErrors
        kind = "Parquet" if name.endswith(".parquet") else "JSON"
        raise TltsimError(f"{out}: {name} is not readable {kind} (damaged); write the result again") from None
