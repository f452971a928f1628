"""`tltsim real run --task agentic` on SmolLM2-135M: rows call the calculator for real, and the run records each
trajectory's turns (the trace's turn list columns, the Result's turns frame, tool_wait on the timeline) consistently
with the tokens it generated and the answers the tool gave."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from real.engine.tools import run_calculator
from real.models import hub
from real.run.config import ANSWERS_FILE
from real.run.launch import RunConfig, launch
from real.tasks.agentic import AgenticTask
from tltsim.core.errors import TltsimError
from tltsim.core.records import TURN_RECORD_COLUMNS, Result
from tltsim.trace import load as load_trace

pytestmark = pytest.mark.slow
NAME = "smollm2-135m"
PROFILE = Path(__file__).resolve().parents[2] / "traces" / "profiles" / "smollm2_longtail_cpu_profile.csv"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    hub.fetch(NAME, log=lambda _: None)  # reused when cached
    out = tmp_path_factory.mktemp("agentic") / "run"
    # one row at a time per engine: a row that calls the tool leaves its engine nothing to decode (tool_wait);
    # speculating with a chain of 4 (drafts of several tokens, a call's end among them): the default arms' tree of 48
    # verifies 48 tokens an iteration, twice the rollout's time on a CPU, and the strategy is not what this file checks
    cfg = RunConfig(policy="static-sd", workers=2, steps=1, model=NAME, task="agentic", prompts=2, group=2,
                    greedy=True, max_new_tokens=40, max_running=1, probe=0, speed_probe=0,
                    knobs={"sd": "always", "arms": "4_1_4"})
    launch(cfg, out)
    return out, cfg.checked().make_task()


def test_the_trace_holds_each_trajectorys_turns(run):
    out, task = run
    trace = load_trace(out / "trace.parquet")
    df = trace.df
    assert trace.agentic and len(df) == 4
    turns = df["turn_response_len"].map(len)
    assert (turns >= 2).all()  # greedy SmolLM2 calls the calculator on every problem
    assert (df["turn_response_len"].map(sum) == df["response_len"]).all()
    calls = [lat for cell in df["tool_latency_s"] for lat in cell if lat is not None]
    assert len(calls) == int((turns - 1).sum()) and all(0 < lat < 5 for lat in calls)
    assert all(g > 0 for cell in df["turn_gen_s"] for g in cell)
    answers = pd.read_parquet(out / ANSWERS_FILE)
    assert trace.sequence_tokens().tolist() == answers["tokens"].map(len).tolist()


def test_tool_tokens_are_the_tokenized_answers_of_the_calls_the_model_wrote(run):
    out, task = run
    assert isinstance(task, AgenticTask)
    df = load_trace(out / "trace.parquet").df
    answers = pd.read_parquet(out / ANSWERS_FILE)
    for row, tokens in zip(df.itertuples(), answers["tokens"]):
        tokens, at = [int(t) for t in tokens], 0
        for generated, latency, tool in zip(row.turn_response_len, row.tool_latency_s, row.tool_tokens):
            turn = tokens[at: at + generated]
            at += generated
            if latency is None:
                assert tool == 0 and task.tools.call(turn) is None
                continue
            code = task.tools.call(turn)
            assert code is not None  # the turn ended with the call
            assert tokens[at: at + tool] == task.tools.answer_ids(run_calculator(code).output)
            at += tool
        assert at == len(tokens)


def test_the_turns_frame_follows_each_trajectorys_context(run):
    out, _ = run
    result = Result.load(out)
    trace = load_trace(out / "trace.parquet").df
    turns = result.turns
    assert list(turns.columns) == TURN_RECORD_COLUMNS
    assert len(turns) == int(trace["turn_response_len"].map(len).sum())
    for (_, prompt, sample), t in turns.groupby(["step", "prompt_id", "sample"]):
        row = trace[(trace["prompt_id"] == prompt) & (trace["sample"] == sample)].iloc[0]
        assert t["turn"].tolist() == list(range(len(t)))
        assert t["response_len"].tolist() == row["turn_response_len"]
        assert t["prompt_tokens"].iloc[0] == row["prompt_len"] and t["cached_tokens"].iloc[0] == 0
        before = t.iloc[:-1].reset_index(drop=True)
        after = t.iloc[1:].reset_index(drop=True)
        assert (after["prompt_tokens"] == before["prompt_tokens"] + before["response_len"] + before["tool_tokens"]).all()
        assert (after["cached_tokens"] == before["prompt_tokens"] + before["response_len"] - 1).all()  # KV kept
        assert (before["tool_latency_s"] > 0).all() and math.isnan(t["tool_latency_s"].iloc[-1])
        assert (t["finished_at"] > t["admitted_at"]).all()
        assert (after["admitted_at"].to_numpy() >= before["finished_at"].to_numpy()).all()


def test_tool_wait_is_where_an_engine_had_only_rows_waiting_on_tools(run):
    out, _ = run
    result = Result.load(out)
    tl, turns = result.timeline, result.turns
    wait = tl[tl["state"] == "tool_wait"]
    assert set(wait["worker"]) == set(turns["engine"])  # every engine waited, one row at a time
    for worker, rows in wait.groupby("worker"):
        latency = turns.loc[turns["engine"] == worker, "tool_latency_s"].sum()
        assert 0 < (rows["t_end"] - rows["t_start"]).sum() <= latency + 0.05
    steps = result.steps
    assert steps["turns"].iloc[0] == len(turns) and steps["trajectories"].iloc[0] == 4
    assert result.summary["turns_per_trajectory"] == pytest.approx(len(turns) / 4)
    assert result.summary["tool_wait_share"] > 0
    assert result.iterations["mode"].isin(["decode", "spec_decode"]).all()


def test_an_agentic_run_replays_no_answers(run):
    out, _ = run
    with pytest.raises(TltsimError, match="replays no recorded answers"):
        RunConfig(model=NAME, task="agentic", answers=str(out)).checked()


def test_validate_replays_the_run_turn_by_turn(run):
    # the simulator replays the recorded trajectories on the machine's profile (the event executor: a multi-turn
    # replay has no iterations frame, so no work domain): the turns and tool calls are the run's, the times its own
    from tltsim.analysis.validation.validate import validate

    out, _ = run
    v = validate([out], profile=PROFILE)
    rows = v.per_step.set_index("metric")
    for metric in ("turns", "tool_calls"):
        assert rows.loc[metric, "measured"] == rows.loc[metric, "predicted"] > 0
    assert rows.loc["tool_wait_s", "predicted"] >= 0 and rows.loc["rollout_s", "predicted"] > 0
    assert v.work.empty and v.divergence.empty
