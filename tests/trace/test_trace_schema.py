"""Validation of the trace schema: every error names file, row, column and the fix."""
import re

import pandas as pd
import pytest

from tltsim.core.errors import TltsimError
from tltsim.trace import Trace, TraceMeta


def frame(**cols):
    base = {"step": [0, 0, 0, 0], "prompt_id": [0, 0, 1, 1], "sample": [0, 1, 0, 1],
            "prompt_len": [10, 10, 20, 20], "response_len": [5, 7, 3, 9]}
    base.update(cols)
    return pd.DataFrame(base)


def error(df, meta=None):
    with pytest.raises(TltsimError) as e:
        Trace.from_frame(df, meta, path="t.csv")
    return str(e.value)


def test_valid_frame_gets_canonical_dtypes_sorted_rows_and_inferred_group():
    df = frame().iloc[::-1]
    t = Trace.from_frame(df)
    assert t.df["response_len"].tolist() == [5, 7, 3, 9]
    assert all(t.df[c].dtype == "int64" for c in ["step", "prompt_id", "sample", "prompt_len", "response_len"])
    assert t.meta.group_size == 2


def test_meta_passed_in_is_not_modified():
    meta = TraceMeta()
    Trace.from_frame(frame(), meta)
    assert meta.group_size is None


def test_missing_column():
    msg = error(frame().drop(columns=["response_len", "sample"]))
    assert msg == ("t.csv: missing column(s) 'sample', 'response_len'; a trace needs step, prompt_id, sample, "
                   "prompt_len, response_len (optional: reward, finished, engine, aborted)")


def test_no_rows():
    assert error(frame().iloc[:0]) == "t.csv: the trace has no rows; add at least one response"


def test_negative_length():
    msg = error(frame(response_len=[5, 7, -3, 9]))
    assert msg == ("t.csv, row 3, column 'response_len': -3 is not a valid length; lengths are whole token counts, "
                   ">= 1 (0 only on a row marked aborted)")


def test_zero_response_but_zero_prompt_is_fine():
    assert "row 2, column 'response_len': 0 is not a valid length" in error(frame(response_len=[5, 0, 3, 9]))
    assert Trace.from_frame(frame(prompt_len=[0, 0, 1, 1])).df["prompt_len"].tolist() == [0, 0, 1, 1]


def test_negative_id():
    assert error(frame(step=[0, 0, -1, -1])) == "t.csv, row 3, column 'step': -1 is negative; ids are >= 0"


@pytest.mark.parametrize("value, shown", [(4.5, "4.5"), ("abc", "'abc'"), (None, "an empty value"),
                                          (True, "True"), (float("inf"), "inf"), (2**60, str(2**60))])
def test_non_integer_length(value, shown):
    msg = error(frame(response_len=pd.Series([5, 7, value, 9], dtype=object)))
    assert msg == (f"t.csv, row 3, column 'response_len': {shown} is not a whole number below 2**53; "
                   f"response_len must be a whole number")


def test_whole_floats_and_numeric_text_are_accepted():
    t = Trace.from_frame(frame(response_len=pd.Series(["5", 7.0, " 3", "9.0"], dtype=object)))
    assert t.df["response_len"].tolist() == [5, 7, 3, 9]


def test_over_declared_max():
    msg = error(frame(response_len=[5, 7, 3, 90]), TraceMeta(max_response_len=64))
    assert msg == ("t.csv, row 4, column 'response_len': 90 exceeds the declared max_response_len 64; "
                   "fix the row or raise max_response_len in the metadata")


def test_duplicate_response():
    msg = error(frame(sample=[0, 1, 0, 0]))
    assert msg == ("t.csv, row 4, column 'sample': step 0 prompt 1 sample 0 appears twice; "
                   "each (step, prompt_id, sample) must be unique")


def test_inconsistent_group_sizes():
    df = pd.concat([frame(), frame().iloc[:1].assign(prompt_id=2)])
    msg = error(df)
    assert msg == ("t.csv, row 5, column 'prompt_id': step 0 prompt 2 has 1 samples but the group size is 2; "
                   "every prompt needs the same number of samples (set group_size in the metadata or complete the group)")


def test_declared_group_size_is_enforced():
    assert "step 0 prompt 0 has 2 samples but the group size is 4" in error(frame(), TraceMeta(group_size=4))


def test_bad_reward_and_finished():
    assert error(frame(reward=["x", 1, 1, 1])) == (
        "t.csv, row 1, column 'reward': 'x' is not a finite number; reward must be a number or empty")
    assert error(frame(finished=["yes", "no", "maybe", "true"])) == (
        "t.csv, row 3, column 'finished': 'maybe' is not a boolean; use true or false")


def test_aborted_rows_have_no_tokens_and_only_they():
    t = Trace.from_frame(frame(response_len=[5, 0, 3, 9], aborted=["false", "true", 0, False]))
    assert t.df["aborted"].tolist() == [False, True, False, False] and t.df["response_len"].tolist() == [5, 0, 3, 9]
    assert error(frame(response_len=[5, 4, 3, 9], aborted=[False, True, False, False])) == (
        "t.csv, row 2, column 'response_len': 4 tokens on a row marked aborted; an aborted request leaves no tokens "
        "(response_len 0), or set aborted false")
    assert "row 3, column 'response_len': 0 is not a valid length" in error(
        frame(response_len=[5, 0, 0, 9], aborted=[False, True, False, False]))
    assert error(frame(aborted=["no", "no", "perhaps", "no"])) == (
        "t.csv, row 3, column 'aborted': 'perhaps' is not a boolean; use true or false")


def test_optional_columns_are_converted():
    t = Trace.from_frame(frame(reward=["0.5", "", 1, None], finished=["true", "False", 1, 0], engine=["1", 0, 1, 0]))
    assert t.df["finished"].tolist() == [True, False, True, False]
    assert t.df["reward"].iloc[0] == 0.5 and t.df["reward"].isna().tolist() == [False, True, False, True]
    assert t.df["engine"].tolist() == [1, 0, 1, 0]


@pytest.mark.parametrize("d, text", [
    ({"max_response_len": "big"}, "metadata field 'max_response_len' must be a positive integer or null, got 'big'"),
    ({"group_size": 0}, "metadata field 'group_size' must be a positive integer or null, got 0"),
    ({"source": 3}, "metadata field 'source' must be text, got 3"),
    ([1], "trace metadata must be a JSON object, got list"),
])
def test_bad_metadata(d, text):
    with pytest.raises(TltsimError, match=re.escape(text)):
        TraceMeta.from_dict(d, path="m.json")


def test_select_steps():
    t = Trace.from_frame(pd.concat([frame(), frame(step=[3] * 4)]))
    assert t.steps == [0, 3]
    assert t.select_steps([3]).steps == [3]
    with pytest.raises(TltsimError, match="no steps of the trace fall in"):
        t.select_steps([1])


@pytest.mark.parametrize("big", [0, 2**40])  # 2**40: ids too large for one int64 sort key
def test_unsorted_rows_are_sorted_stably_and_repeats_found(big):
    df = pd.DataFrame({"step": [big + 1, big, big + 1, big], "prompt_id": [0, 2**30, 0, 2**30],
                       "sample": [1, 0, 0, 1], "prompt_len": 1, "response_len": [11, 12, 13, 14]})
    t = Trace.from_frame(df)
    assert t.df["response_len"].tolist() == [12, 14, 13, 11]
    again = pd.concat([df, df.iloc[[2]]])
    assert error(again).startswith(f"t.csv, row 5, column 'sample': step {big + 1} prompt 0 sample 0 appears twice")
