"""A multi-turn trace: its turn list columns, checked, saved and read back, and expanded one row per turn."""
import numpy as np
import pandas as pd
import pytest

from tltsim.core.errors import TltsimError
from tltsim.trace import Trace, load, save
from tltsim.trace.schema import tool_calls


def frame(**over):
    df = pd.DataFrame({"step": [0, 0], "prompt_id": [0, 0], "sample": [0, 1], "prompt_len": [10, 10],
                       "response_len": [30, 5], "turn_response_len": [[10, 20], [5]],
                       "tool_latency_s": [[0.5, None], [None]], "tool_tokens": [[100, 0], [0]]})
    for k, v in over.items():
        df[k] = v
    return df


def test_turns_expand_one_row_per_turn_and_sequences_count_tool_tokens():
    t = Trace.from_frame(frame())
    assert t.agentic
    turns = t.turns
    assert turns[["sample", "turn", "response_len", "tool_tokens"]].values.tolist() == [[0, 0, 10, 100], [0, 1, 20, 0],
                                                                                       [1, 0, 5, 0]]
    assert turns["tool_latency_s"].iloc[0] == 0.5 and np.isnan(turns["tool_latency_s"].iloc[1:]).all()
    assert t.sequence_tokens().tolist() == [130, 5]
    assert Trace.from_frame(frame().drop(columns=["turn_response_len", "tool_latency_s", "tool_tokens"])).turns is None


@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_turns_survive_a_save(tmp_path, suffix):
    t = Trace.from_frame(frame(turn_gen_s=[[1.5, 2.0], [0.25]]))
    back = load(save(t, tmp_path / f"t.{suffix}"))
    pd.testing.assert_frame_equal(back.turns, t.turns)
    assert back.turns["gen_s"].tolist() == [1.5, 2.0, 0.25]


def test_csv_refuses_a_multi_turn_trace(tmp_path):
    with pytest.raises(TltsimError, match="save it as .parquet or .jsonl"):
        save(Trace.from_frame(frame()), tmp_path / "t.csv")
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("over, message", [
    ({"turn_response_len": [[10, 21], [5]]}, "sums to 31 tokens but response_len is 30"),
    ({"tool_tokens": [[100], [0]]}, "1 entries but turn_response_len has 2"),
    ({"tool_latency_s": [[None, None], [None]], "tool_tokens": [[0, 0], [0]]}, "is null after turn 0"),
    ({"tool_tokens": [[100, 0], [3]]}, "which called no tool"),
    ({"tool_latency_s": [[-1.0, None], [None]]}, "is not a time in seconds"),
    ({"turn_response_len": [[10, 20.5], [5]]}, "not a whole token count"),
    ({"turn_response_len": [[], [5]]}, "at least one turn"),
])
def test_bad_turns_name_the_row_and_column(over, message):
    with pytest.raises(TltsimError, match=message):
        Trace.from_frame(frame(**over))


def test_turn_columns_come_together():
    with pytest.raises(TltsimError, match="a multi-turn trace has all of"):
        Trace.from_frame(frame().drop(columns=["tool_tokens"]))


def test_a_last_turn_may_call_a_tool_whose_answer_ends_the_trajectory():
    t = Trace.from_frame(frame(tool_latency_s=[[0.5, 0.25], [None]], tool_tokens=[[100, 40], [0]]))
    assert t.sequence_tokens().tolist() == [170, 5]


def test_a_tool_call_is_a_turn_whose_latency_is_neither_null_nor_nan():
    """One count of a step's tool calls for the synchronous and the asynchronous loop: a turn list read from a file
    holds null where no tool ran, one built from an array NaN."""
    assert tool_calls([[0.5, None], [None], [0.0, np.nan, 2.0]]) == 3
    assert tool_calls(frame()["tool_latency_s"]) == 1 and tool_calls([]) == 0
