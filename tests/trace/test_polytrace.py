"""PolyTrace's multi-turn workload log: every trajectory's turns, tool calls, tokens and latencies kept; bad lines
named by file, line and key."""
import json
from pathlib import Path

import numpy as np
import pytest

from tltsim.cli import main
from tltsim.core.errors import TltsimError
from tltsim.trace import load
from tltsim.trace.polytrace import is_multiturn_log, read_multiturn_log

SAMPLE = Path(__file__).resolve().parents[2] / "../shared/data/polytrace/multiturn_workload_sample.jsonl"


def _turn(i, tokens, gen_s, reason):
    return {"turn": i, "prompt_tokens": 300 + 100 * i, "cached_tokens": 0, "completion_tokens": tokens,
            "finish_reason": reason, "engine_latency_s": gen_s}


def trajectory(step, prompt, sample, gen, calls, final=None, reason="stop"):
    """A log line: turns generating `gen` tokens, `calls` = [(turn, latency_s, append_len)]."""
    turns = [_turn(i, g, 1.5 + i, "tool_calls" if i < len(gen) - 1 else "stop") for i, g in enumerate(gen)]
    tool_calls = [{"turn": t, "tool_name": "search", "latency_s": lat, "response_token_len": app - 14,
                   "append_len": app, "status": "success"} for t, lat, app in calls]
    return {"step": step, "prompt_len": 200 + prompt, "max_response_len": 3000, "turns": turns,
            "tool_calls": tool_calls, "finish_reason": reason, "final_response_len": final or sum(gen),
            "prompt_group_id": prompt, "sample_id": sample}


def lines(step):
    """Two prompts x 2 samples: one answers at once, one makes two calls on one turn, one is cut at the cap."""
    return [trajectory(step, 0, 0, [40, 131], [(0, 0.074, 1041)]),
            trajectory(step, 0, 1, [29], []),
            trajectory(step, 1, 0, [30, 28, 63], [(0, 0.25, 500), (1, 0.03, 494), (1, 0.5, 531)]),
            trajectory(step, 1, 1, [28, 70], [(0, 0.8, 534)], final=3000)]


def write(path: Path, recs) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in recs), encoding="utf-8")
    return path


@pytest.fixture
def log(tmp_path):
    d = tmp_path / "0617_0223"
    d.mkdir()
    for s in (0, 1):
        write(d / f"multiturn_workload_step_{s}.jsonl", lines(s))
    return d


def test_a_log_directory_keeps_each_trajectorys_turns_and_calls(log):
    assert is_multiturn_log(log) and is_multiturn_log(log / "multiturn_workload_step_0.jsonl")
    t = load(log)
    assert t.agentic and t.steps == [0, 1] and t.meta.group_size == 2 and t.meta.max_response_len == 3000
    assert t.meta.source == "polytrace" and "multiturn_workload_step_1.jsonl" in t.meta.provenance
    row = t.df.iloc[2]  # step 0, prompt 1, sample 0: two calls after turn 1, summed
    assert row["turn_response_len"] == [30, 28, 63] and row["response_len"] == 121
    assert row["tool_tokens"] == [500, 494 + 531, 0]
    assert row["tool_latency_s"][0] == 0.25 and row["tool_latency_s"][1] == pytest.approx(0.53)
    assert row["tool_latency_s"][2] is None and row["turn_gen_s"] == [1.5, 2.5, 3.5]
    assert t.df["finished"].tolist() == [True, True, True, False] * 2  # the last reached max_response_len


@pytest.mark.skipif(not SAMPLE.is_file(), reason="the PolyTrace reference sample lies beside the repository")
def test_the_reference_sample_keeps_every_number_it_logs():
    recs = [json.loads(x) for x in SAMPLE.read_text().splitlines() if x.strip()]
    t = load(SAMPLE)
    assert len(t.df) == len(recs)
    by_key = {(r["step"], r["prompt_group_id"], r["sample_id"]): r for r in recs}
    for row in t.df.itertuples():
        r = by_key[(row.step, row.prompt_id, row.sample)]
        assert row.prompt_len == r["prompt_len"]
        assert row.turn_response_len == [x["completion_tokens"] for x in r["turns"]]
        assert row.turn_gen_s == [x["engine_latency_s"] for x in r["turns"]]
        for i in range(len(r["turns"])):
            calls = [c for c in r["tool_calls"] if c["turn"] == i]
            assert row.tool_tokens[i] == sum(c["append_len"] for c in calls)
            assert row.tool_latency_s[i] == (pytest.approx(sum(c["latency_s"] for c in calls)) if calls else None)
    turns = t.turns
    assert len(turns) == sum(len(r["turns"]) for r in recs)
    assert turns["tool_tokens"].sum() == sum(c["append_len"] for r in recs for c in r["tool_calls"])
    assert np.nansum(turns["tool_latency_s"]) == pytest.approx(sum(c["latency_s"] for r in recs for c in r["tool_calls"]))


def test_convert_and_stats_read_a_log(log, tmp_path, capsys):
    out = tmp_path / "agentic.parquet"
    assert main(["trace", "convert", str(log), str(out)]) == 0
    assert load(out).df.equals(load(log).df)
    assert main(["trace", "stats", str(log / "multiturn_workload_step_1.jsonl"), "--json"]) == 0
    st = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert st["responses"] == 4


def test_a_log_as_runs_leave_it_generated_past_the_cap_and_stopped_mid_step(tmp_path, capsys):
    """The full Search-R1 log's two shapes: a turn that generates 2,127 tokens and keeps 138 in the context (the
    trajectory generates past max_response_len, which caps what is kept), and a last step file cut short by the run's
    stop (a group with some of its samples, a group with none): the cut step is left out with one warning, and
    `trace stats` says so; --max-len declares the cap, with a warning where the log says another."""
    d = tmp_path / "0617_0223"
    d.mkdir()
    long = trajectory(0, 0, 0, [78, 2127, 1965], [(0, 0.05, 998), (1, 0.02, 503)], final=3000, reason="length")
    for turn, kept in zip(long["turns"], [78, 138, 1969]):
        turn["assistant_append_len"] = kept
    write(d / "multiturn_workload_step_0.jsonl", [long] + lines(0)[1:])
    write(d / "multiturn_workload_step_1.jsonl", lines(1))
    write(d / "multiturn_workload_step_2.jsonl", lines(2)[:1])  # the run stopped: one of 4 trajectories logged
    out = tmp_path / "t.parquet"
    assert main(["trace", "convert", str(d), str(out), "--max-len", "4096"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tltsim: warning: {d}: step 2: 1 group with fewer than 2 samples (1 response) left out, and so the "
                   f"step, which had no whole group (a run stopped mid-step, or lines lost or added)",
                   f"tltsim: warning: --max-len 4096: {d} declares a cap of 3000; the trace takes 4096, as asked"]
    t = load(out)
    assert t.steps == [0, 1] and t.meta.max_response_len == 4096 and t.meta.group_size == 2
    row = t.df.iloc[0]
    assert row["response_len"] == 78 + 2127 + 1965 and row["turn_kept_len"] == [78, 138, 1969]
    assert not row["finished"] and t.df.iloc[1]["turn_kept_len"] == t.df.iloc[1]["turn_response_len"]  # none logged
    assert t.turns["kept_len"].iloc[:3].tolist() == [78, 138, 1969]
    assert main(["trace", "stats", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == ("left out of the source: incomplete groups: step 2: 1 group "
                                                       "with fewer than 2 samples (1 response) (the whole step)")
    only = tmp_path / "cut"
    only.mkdir()
    write(only / "multiturn_workload_step_2.jsonl", [trajectory(2, 0, 1, [29], [])])  # sample 1 of a group of 2+
    with pytest.raises(TltsimError, match=r"every group has fewer than 2 samples"):
        read_multiturn_log(only)


def _bad(recs):
    """Step-0 lines with one line replaced by `recs` (a dict edit or a raw string)."""
    good = lines(0)
    return good[:1] + recs + good[2:]


def _drop(rec, *path):
    *head, last = path
    d = rec
    for k in head:
        d = d[k]
    del d[last]
    return rec


def _set(rec, value, *path):
    *head, last = path
    d = rec
    for k in head:
        d = d[k]
    d[last] = value
    return rec


@pytest.mark.parametrize("bad, message", [
    ([_drop(trajectory(0, 0, 1, [29], []), "prompt_group_id")], r"line 2: no key 'prompt_group_id'"),
    ([_drop(trajectory(0, 0, 1, [29], []), "turns", 0, "completion_tokens")],
     r"line 2, key 'turns', item 0: no key 'completion_tokens'"),
    ([trajectory(0, 0, 1, [29, 5], [(2, 0.1, 10)])], r"line 2, key 'tool_calls', item 0, key 'turn': turn 2, but the "
                                                      r"trajectory has 2 turn"),
    ([trajectory(0, 0, 1, [29, 5], [(0, -0.1, 10)])], r"line 2, key 'tool_calls', item 0, key 'latency_s': -0.1 is "
                                                       r"not a time"),
    ([_set(trajectory(0, 0, 1, [29], []), float("nan"), "turns", 0, "engine_latency_s")],
     r"line 2, key 'turns', item 0, key 'engine_latency_s'"),
    ([trajectory(0, 0, 1, [29, 5], [])], r"line 2, key 'tool_calls': no call follows turn 0"),
    (['{"step": 0, "turns": ['], r"line 2: not valid JSON"),
    ([_set(trajectory(0, 0, 1, [29], []), 3.5, "prompt_len")], r"line 2, key 'prompt_len': 3.5 is not a whole number"),
    ([_set(trajectory(0, 0, 1, [29], []), 4096, "max_response_len")], r"line 2, key 'max_response_len': 4096, but "),
    ([trajectory(0, 0, 0, [29], [])], r"line 2, key 'sample_id': step 0 prompt_group_id 0 sample_id 0 is also at "),
    ([_set(trajectory(0, 0, 1, [29], []), "abort", "finish_reason")], r"line 2, key 'finish_reason'"),
])
def test_bad_lines_name_the_file_line_and_key(tmp_path, bad, message):
    f = write(tmp_path / "multiturn_workload_step_0.jsonl", _bad(bad))
    with pytest.raises(TltsimError, match=message) as e:
        read_multiturn_log(f)
    assert str(f) in str(e.value)


def test_bad_directories_are_named(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TltsimError, match="no .jsonl files"):
        read_multiturn_log(empty)
    d = tmp_path / "log"
    d.mkdir()
    write(d / "multiturn_workload_step_0.jsonl", lines(0))
    write(d / "notes.jsonl", [{"x": 1}])
    out = tmp_path / "out.parquet"
    assert main(["trace", "convert", str(d), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tltsim: error: ") and "notes.jsonl is not named" in err[0]
    assert not out.exists()
