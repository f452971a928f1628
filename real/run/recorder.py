"""The real run's recorder: what a real run writes after every step, in the record schema (tltsim.core.records), as
the simulator's recorder (tltsim.sim.recorder) does for a simulated one.

Each worker describes its step in a `WorkerStep` (intervals, engine calls, responses); rank 0
merges them into a `Recorder` and rewrites RUN_DIR: the Result files (timeline, steps, requests,
iterations, config, summary last), trace.parquet and answers.parquet (every response's token ids, which
`tltsim real run --answers RUN_DIR` replays), each atomically, so a run killed at any moment leaves every
finished step readable.

Clock: seconds since the run began, one origin for every worker. A step runs from its start (all
workers past a barrier) to the end of the last worker's weight sync; each worker's intervals tile
that span (a worker done early with its sync waits `idle` until the step's end). Bookkeeping
between steps (these records, the checkpoint, the drafter probe) belongs to no step, so the
makespan is the sum of the step times and busy + idle = workers x makespan, as in the simulator.

A run whose task calls a tool (real/tasks/agentic.py) records its trajectories' turns: the trace's turn list columns
(turn_response_len, tool_latency_s, tool_tokens, turn_gen_s; response_len counts the tokens the model generated,
the tools' answers are the rest of answers.parquet's tokens), the Result's turns frame (TURN_RECORD_COLUMNS), the
steps columns turns, trajectories, tool_calls and tool_wait_share (of the engines' rollout seconds, engines x
rollout_s, the share they spent with every row waiting on a tool: the timeline's tool_wait rows), as the
simulator records them.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from real.engine.adaptive import EngineCall
from real.run.config import ANSWERS_FILE  # step, prompt_id, sample, tokens (the response's token ids)
from tltsim.core.records import (REQUEST_COLUMNS, STEP_COLUMNS, TIMELINE_COLUMNS, TURN_RECORD_COLUMNS, Result,
                                  TimelineRow, merge_states)
from tltsim.core.io import atomic_path
from tltsim.core.off_policy import off_policy_summary
from tltsim.core.summary import summarize
from tltsim.trace import Trace, TraceMeta, save as save_trace

ITERATION_COLUMNS = ["step", "worker", "batch_size", "mode", "strategy", "accepted", "wall_s", "t_end", "tokens",
                     "reprefill"]
TRACE_FILE = "trace.parquet"


def recorded_answers(run_dir: str | Path) -> dict[tuple[int, int, int], list[int]]:
    """A run directory's answers.parquet: (step, prompt_id, sample) -> the response's token ids."""
    frame = pd.read_parquet(Path(run_dir) / ANSWERS_FILE)
    return {(int(a), int(p), int(j)): [int(t) for t in tokens]
            for a, p, j, tokens in zip(frame["step"], frame["prompt_id"], frame["sample"], frame["tokens"])}


@dataclass
class WorkerStep:
    """One worker's account of one RL step (picklable: it travels to rank 0)."""

    worker: int
    calls: list[EngineCall]  # engine calls of its rollout, in order
    phases: list[tuple[str, float, float]]  # (state, t_start, t_end) after its rollout: idle, drafter_train, reward, ...
    responses: list[dict]  # prompt_id, sample, prompt_len, response_len, reward, finished, admitted_at, finished_at,
    # tokens (the response's token ids); with a tool, turns (per turn the turns frame's columns but step, prompt_id,
    # sample and engine); engine, where another worker generated it (asynchronous RL's trainer reports them)
    done_at: float  # run clock when its share was generated
    drafter_batches: int = 0  # spot-training batches it ran this step
    extra: dict = field(default_factory=dict)  # per-worker counts summed into the step row (a hybrid's history_rows,
    # trained_rows: rows drafted from the history and by the trained drafter)


def intervals(step: int, worker: int, calls: list[EngineCall]) -> list[TimelineRow]:
    """The timeline rows of a worker's rollout in step `step`: its calls merged as the simulator merges its
    iterations (tltsim.core.records.merge_states: consecutive calls in one state make one row)."""
    return merge_states([TimelineRow(step, worker, c.mode, c.t_start, c.t_end, c.batch_size, float(c.tokens), c.accepted,
                                     c.strategy) for c in calls], [int(c.mode == "spec_decode") for c in calls])


def turn_lists(turns: list[dict] | None) -> dict:
    """A trajectory's turns (WorkerStep.responses' `turns`) as the trace's turn list columns (none for None)."""
    if turns is None:
        return {}
    return {"turn_response_len": [t["response_len"] for t in turns],
            "tool_latency_s": [None if math.isnan(t["tool_latency_s"]) else t["tool_latency_s"] for t in turns],
            "tool_tokens": [t["tool_tokens"] for t in turns],
            "turn_gen_s": [t["finished_at"] - t["admitted_at"] for t in turns]}


def turn_records(turns: list, iteration_end: list[float]) -> list[dict]:
    """A finished row's turns (real.engine.records.Turn) as the turns frame's columns (tltsim.core.records.TURN_RECORD_COLUMNS, but the step's,
    the prompt's and the engine's), on the run clock (`iteration_end`: real.engine.adaptive.Rollout's)."""
    return [{"turn": k, "prompt_tokens": t.context, "cached_tokens": t.cached, "response_len": t.generated,
             "admitted_at": iteration_end[t.start_iteration], "finished_at": iteration_end[t.end_iteration],
             "tool_latency_s": t.tool.latency_s if t.tool is not None else float("nan"), "tool_tokens": t.tool_tokens}
            for k, t in enumerate(turns)]


class Recorder:
    """Every finished step's rows, and how to write them as a Result directory plus trace.parquet."""

    def __init__(self, config: dict, meta: TraceMeta):
        self.config = config
        self.meta = meta
        self.timeline: list[TimelineRow] = []
        self.steps: list[dict] = []
        self.requests: list[dict] = []
        self.iterations: list[dict] = []
        self.trace: list[dict] = []
        self.answers: list[dict] = []
        self.turns: list[dict] = []
        self.extra_summary: dict = {}

    @classmethod
    def resume(cls, out: str | Path, config: dict, meta: TraceMeta, last_step: int) -> "Recorder":
        """A recorder holding the rows of steps <= `last_step` already in `out` (later steps are dropped:
        their checkpoint was never written, so they run again)."""
        rec = cls(config, meta)
        old = Result.load(out, sealed=False)  # a kill during the last save leaves no manifest; rows are filtered
        keep = lambda df: df[df["step"] <= last_step]  # noqa: E731
        rows = keep(old.timeline)[TIMELINE_COLUMNS].itertuples(index=False, name=None)
        rec.timeline = [TimelineRow(*r) for r in rows]
        rec.steps = keep(old.steps).to_dict("records")
        rec.requests = keep(old.requests).to_dict("records")
        rec.iterations = keep(old.iterations).to_dict("records") if old.iterations is not None else []
        rec.trace = keep(pd.read_parquet(Path(out) / TRACE_FILE)).to_dict("records")
        if (Path(out) / ANSWERS_FILE).is_file():  # absent from a run recorded before runs kept their answers
            rec.answers = [{**a, "tokens": list(a["tokens"])}
                           for a in keep(pd.read_parquet(Path(out) / ANSWERS_FILE)).to_dict("records")]
        rec.turns = keep(old.turns).to_dict("records") if old.turns is not None else []
        rec.extra_summary = {k: old.summary[k] for k in ("drafter_warmup_s",) if k in old.summary}
        return rec

    @property
    def clock_end(self) -> float:
        """Where the run clock stood at the end of the last recorded step (0 before any)."""
        return max((r.t_end for r in self.timeline), default=0.0)

    def add(self, step: int, t0: float, reports: list[WorkerStep], columns: dict) -> dict:
        """Record step `step` (started at t0) from every worker's report; returns its steps row."""
        reports = sorted(reports, key=lambda r: r.worker)
        end = max(r.phases[-1][2] if r.phases else r.done_at for r in reports)
        barrier = max(r.done_at for r in reports)
        phase_end = {s: max((b for r in reports for st, _, b in r.phases if st == s), default=barrier)
                     for s in ("reward", "train", "weight_sync")}
        for r in reports:
            rows = intervals(step, r.worker, r.calls)
            rows += [TimelineRow(step, r.worker, s, a, b) for s, a, b in r.phases if b > a]
            last = max((row.t_end for row in rows), default=t0)
            if end > last:
                rows.append(TimelineRow(step, r.worker, "idle", last, end))
            self.timeline += rows
            self.iterations += [{"step": step, "worker": r.worker, "batch_size": c.batch_size, "mode": c.mode,
                                 "strategy": c.strategy, "accepted": c.accepted, "wall_s": c.wall_s, "t_end": c.t_end,
                                 "tokens": c.tokens, "reprefill": c.reprefill} for c in r.calls
                                if c.mode not in ("prefill", "tool_wait")]
            for resp in r.responses:
                self.requests.append({"step": step, "engine": r.worker, **{k: resp[k] for k in REQUEST_COLUMNS
                                                                           if k in resp}, "finished": resp["finished"]})
                self.trace.append({"step": step, "prompt_id": resp["prompt_id"], "sample": resp["sample"],
                                   "prompt_len": resp["prompt_len"], "response_len": resp["response_len"],
                                   "reward": resp["reward"], "finished": resp["finished"],
                                   "engine": resp.get("engine", r.worker),
                                   **turn_lists(resp.get("turns"))})
                self.turns += [{"step": step, "prompt_id": resp["prompt_id"], "sample": resp["sample"],
                                "engine": r.worker, **turn} for turn in resp.get("turns", [])]
                self.answers.append({"step": step, "prompt_id": resp["prompt_id"], "sample": resp["sample"],
                                     "tokens": list(resp["tokens"])})
        responses = [resp for r in reports for resp in r.responses]
        finished_at = np.array([resp["finished_at"] for resp in responses]) - t0
        t90 = float(np.quantile(finished_at, 0.9, method="inverted_cdf")) if len(finished_at) else 0.0
        calls = [c for r in reports for c in r.calls]
        spec = [c for c in calls if c.mode == "spec_decode"]
        engine_s = sum(r.done_at - t0 for r in reports)
        strategies = Counter(c.strategy for c in spec)
        rewards = np.array([resp["reward"] for resp in responses], dtype=float)
        row = {
            "step": step, "t_start": t0, "rollout_s": barrier - t0, "reward_s": phase_end["reward"] - barrier,
            "train_s": phase_end["train"] - phase_end["reward"], "sync_s": end - phase_end["train"], "total_s": end - t0,
            "responses": len(responses), "response_tokens": int(sum(resp["response_len"] for resp in responses)),
            "tail_s": (barrier - t0) - t90,
            "sd_share": sum(c.t_end - c.t_start for c in spec) / engine_s if engine_s else 0.0,
            "mean_accepted": float(np.mean([c.accepted for c in spec])) if spec else math.nan,
            "strategies": ",".join(f"{s}:{n}" for s, n in strategies.most_common()),
            "mean_reward": float(rewards.mean()) if rewards.size else math.nan,
            "accuracy": float((rewards >= 1.0).mean()) if rewards.size else math.nan,
            "drafter_train_s": sum(b - a for r in reports for s, a, b in r.phases if s == "drafter_train"),
            "drafter_train_batches": sum(r.drafter_batches for r in reports),
            **{k: sum(r.extra.get(k, 0) for r in reports) for k in sorted({k for r in reports for k in r.extra})},
            **columns,
        }
        if any("turns" in resp for resp in responses):  # as the simulator counts them (tltsim.sim.simulator)
            rollout_engine_s = len(reports) * (barrier - t0)
            row.update(turns=sum(len(resp["turns"]) for resp in responses), trajectories=len(responses),
                       tool_calls=sum(not math.isnan(t["tool_latency_s"]) for resp in responses for t in resp["turns"]),
                       tool_wait_share=sum(c.t_end - c.t_start for c in calls if c.mode == "tool_wait") / rollout_engine_s
                       if rollout_engine_s else 0.0)
        self.steps.append(row)
        return row

    def result(self) -> Result:
        steps = pd.DataFrame(self.steps)
        steps = steps[STEP_COLUMNS + [c for c in steps.columns if c not in STEP_COLUMNS]]
        timeline = pd.DataFrame(self.timeline, columns=TIMELINE_COLUMNS)
        workers = int(self.config["workers"])
        makespan = float(steps["total_s"].sum())
        summary = {"policy": self.config["policy"], "trace": "real", **summarize(timeline, steps, makespan, workers),
                   "mean_reward": float(steps["mean_reward"].mean()), **off_policy_summary(steps),
                   **self.extra_summary}
        if steps["drafter_accepted"].notna().any():
            summary["drafter_accepted"] = float(steps["drafter_accepted"].mean())
        if "history_rows" in steps and (drafted := steps["history_rows"].sum() + steps["trained_rows"].sum()):
            summary["history_share"] = float(steps["history_rows"].sum() / drafted)
        requests = pd.DataFrame(self.requests, columns=REQUEST_COLUMNS + ["finished"])
        iterations = pd.DataFrame(self.iterations, columns=ITERATION_COLUMNS)
        turns = pd.DataFrame(self.turns, columns=TURN_RECORD_COLUMNS) if self.turns else None
        return Result(timeline, steps, requests, summary, self.config, iterations, turns)

    def save(self, out: str | Path) -> Result:
        """Write trace.parquet and answers.parquet, then the Result (summary.json last); each file atomically."""
        trace = Trace.from_frame(pd.DataFrame(self.trace), self.meta)
        save_trace(trace, Path(out) / TRACE_FILE)
        answers = pd.DataFrame(self.answers, columns=["step", "prompt_id", "sample", "tokens"])
        with atomic_path(Path(out) / ANSWERS_FILE) as tmp:
            answers.to_parquet(tmp, index=False)
        result = self.result()
        result.save(out)
        return result
