"""Loading and saving: round trips, the verl and Vidur importers, and every loader failure."""
import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tltsim.core.errors import TltsimError
from tltsim.trace import Trace, TraceMeta, load, save, synth
from tltsim.trace.formats import sidecar


@pytest.fixture
def rich_trace():
    """A small trace with every optional column, a missing reward and awkward floats."""
    t = synth("lognormal", 3, 4, 2, 3000, seed=7)
    rng = np.random.default_rng(1)
    df = t.df.assign(reward=rng.random(len(t.df)) / 3, engine=np.arange(len(t.df)) % 3)
    df.loc[2, "reward"] = np.nan
    meta = TraceMeta(source="test", model="m", max_response_len=3000, group_size=2, provenance="made in a test, line 2\nüñí")
    return Trace.from_frame(df, meta)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_round_trip_is_exact(tmp_path, rich_trace, suffix):
    path = save(rich_trace, tmp_path / f"t{suffix}")
    back = load(path)
    pd.testing.assert_frame_equal(back.df, rich_trace.df, check_exact=True)
    assert back.meta == rich_trace.meta
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"t{suffix}"] + ([f"t{suffix}.meta.json"] if suffix != ".parquet" else []))


def test_parquet_keeps_meta_in_schema(tmp_path, rich_trace):
    save(rich_trace, tmp_path / "t.parquet")
    raw = pq.read_schema(tmp_path / "t.parquet").metadata[b"tltsim.meta"]
    assert json.loads(raw)["provenance"] == rich_trace.meta.provenance


def test_csv_without_sidecar_gets_default_meta(tmp_path, rich_trace):
    save(rich_trace, tmp_path / "t.csv")
    sidecar(tmp_path / "t.csv").unlink()
    t = load(tmp_path / "t.csv")
    assert t.meta.source == "unknown" and t.meta.max_response_len is None and t.meta.group_size == 2


def test_save_failure_keeps_old_file(tmp_path, rich_trace):
    path = save(rich_trace, tmp_path / "t.parquet")
    before = path.read_bytes()
    broken = Trace(rich_trace.df.assign(step=[object()] * len(rich_trace.df)), rich_trace.meta)
    with pytest.raises(Exception):
        save(broken, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


# --- verl-style JSONL -------------------------------------------------------------

def verl_lines(*recs):
    return "".join(json.dumps(r) + "\n" for r in recs)


def test_verl_import(tmp_path):
    p = tmp_path / "rollout.jsonl"
    p.write_text(verl_lines(
        {"step": 0, "dp_rank": 1, "input": 112, "output": [450, 453, 396], "n_sampling": 3, "reward": [1, 0, 1]},
        {"step": 0, "dp_rank": 0, "input": 80, "output": [10, 20, 30], "n_sampling": 3},
        {"step": 1, "dp_rank": 0, "input": 5, "output": [7, 8, 9]},
    ) + "\n")
    t = load(p)
    assert t.meta.source == "verl" and t.meta.group_size == 3
    assert t.df.to_dict("list") == {
        "step": [0] * 6 + [1] * 3,
        "prompt_id": [0, 0, 0, 1, 1, 1, 0, 0, 0],
        "sample": [0, 1, 2] * 3,
        "prompt_len": [112] * 3 + [80] * 3 + [5] * 3,
        "response_len": [450, 453, 396, 10, 20, 30, 7, 8, 9],
        "engine": [1, 1, 1, 0, 0, 0, 0, 0, 0],
    }


def test_verl_without_dp_rank_has_no_engine(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(verl_lines({"step": 2, "input": 1, "output": [3]}))
    assert "engine" not in load(p).df.columns


@pytest.mark.parametrize("recs, text", [
    ([{"step": 0, "input": 1, "output": [3, 4]}, {"step": 0, "input": 1, "output": [3]}],
     "r.jsonl, line 2, key 'output': 1 responses but the group size is 2 (line 1); every prompt needs the same number of samples"),
    ([{"step": 0, "input": 1, "output": [3, 4], "n_sampling": 3}],
     "r.jsonl, line 1: 'n_sampling' is 3 but 'output' has 2 lengths; make them agree (one length per sample)"),
    ([{"step": 0, "input": 1, "output": [3, -4]}],
     "r.jsonl, line 1, key 'output', item 1: -4 is not a response length; lengths are whole numbers >= 1"),
    ([{"step": 0, "input": 1, "output": [3, 4.5]}],
     "r.jsonl, line 1, key 'output', item 1: 4.5 is not a response length"),
    ([{"step": 0, "input": 1, "output": []}],
     "r.jsonl, line 1, key 'output': the list is empty; every prompt needs at least one response"),
    ([{"step": 0, "output": [3]}],
     "r.jsonl, line 1: missing key 'input'; a verl-style record needs 'step', 'input' and 'output'"),
    ([{"step": "x", "input": 1, "output": [3]}],
     "r.jsonl, line 1, key 'step': 'x' is not a whole number >= 0"),
    ([{"step": 0, "input": 1, "output": [3], "dp_rank": 0}, {"step": 0, "input": 1, "output": [3]}],
     "r.jsonl, line 2: 'dp_rank' is on some lines and not others; give it on every line or none"),
    ([{"step": 0, "input": 1, "output": [3]}, {"step": 0, "input": 1, "output": "3"}],
     "r.jsonl, line 2, key 'output': expected a list of response lengths, got '3'"),
])
def test_verl_errors(tmp_path, recs, text):
    p = tmp_path / "r.jsonl"
    p.write_text(verl_lines(*recs))
    with pytest.raises(TltsimError) as e:
        load(p)
    assert str(e.value).startswith(f"{tmp_path}/{text}")


# --- Vidur CSV ---------------------------------------------------------------------

def test_vidur_import_orders_by_arrival(tmp_path):
    p = tmp_path / "vidur.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens,num_total_tokens\n"
                 "0.5,100,20,120\n0.1,200,30,230\n0.5,300,40,340\n")
    t = load(p)
    assert t.meta.source == "vidur" and t.meta.group_size == 1
    assert t.df["step"].tolist() == [0, 0, 0]
    assert t.df["prompt_len"].tolist() == [200, 100, 300]  # arrival order, ties in file order
    assert t.df["response_len"].tolist() == [30, 20, 40]
    chunked = load(p, requests_per_step=2)
    assert chunked.df[["step", "prompt_id"]].values.tolist() == [[0, 0], [0, 1], [1, 0]]


@pytest.mark.parametrize("row, text", [
    ("x,1,2", "row 2, column 'arrived_at': 'x' is not a time; arrived_at must be a finite number of seconds"),
    ("1,-1,2", "row 2, column 'num_prefill_tokens': '-1' is not a token count; it must be a whole number >= 0"),
    ("1,1,0", "row 2, column 'num_decode_tokens': '0' is not a token count; it must be a whole number >= 1"),
    ("1,1,2.5", "row 2, column 'num_decode_tokens': '2.5' is not a token count"),
])
def test_vidur_errors(tmp_path, row, text):
    p = tmp_path / "v.csv"
    p.write_text(f"arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n{row}\n")
    with pytest.raises(TltsimError, match=re.escape(f"{p}, {text}")):
        load(p)


def test_requests_per_step_only_for_vidur(tmp_path, rich_trace):
    for suffix in [".csv", ".parquet"]:
        path = save(rich_trace, tmp_path / f"t{suffix}")
        with pytest.raises(TltsimError, match="requests_per_step applies to Vidur CSV traces only"):
            load(path, requests_per_step=3)


# --- loader failures ---------------------------------------------------------------

def load_error(path, **kw):
    with pytest.raises(TltsimError) as e:
        load(path, **kw)
    return str(e.value)


def test_missing_file_directory_and_suffix(tmp_path):
    assert load_error(tmp_path / "no.csv") == f"{tmp_path / 'no.csv'} does not exist; give the path of a trace file (.parquet, .csv, .jsonl)"
    (tmp_path / "d.csv").mkdir()
    assert "d.csv is a directory" in load_error(tmp_path / "d.csv")
    (tmp_path / "t.txt").write_text("x")
    assert load_error(tmp_path / "t.txt") == f"{tmp_path / 't.txt'}: unknown trace format '.txt'; use one of .parquet, .csv, .jsonl"


def test_corrupt_parquet(tmp_path, rich_trace):
    p = tmp_path / "t.parquet"
    p.write_bytes(b"not parquet at all")
    assert load_error(p).startswith(f"{p}: not a readable Parquet file (")
    save(rich_trace, p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    assert "not a readable Parquet file" in load_error(p)


def test_parquet_with_bad_tltsim_meta(tmp_path, rich_trace):
    table = pa.Table.from_pandas(rich_trace.df).replace_schema_metadata({b"tltsim.meta": b"{oops"})
    pq.write_table(table, tmp_path / "t.parquet")
    assert "the tltsim metadata is not valid JSON" in load_error(tmp_path / "t.parquet")


def test_bad_json_line_is_named(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"step": 0}\n\n{"step": 1,\n')
    assert load_error(p).startswith(f"{p}, line 3: not valid JSON (")
    p.write_text('{"step": 0}\n[1, 2]\n')
    assert load_error(p) == f"{p}, line 2: a JSON list, not an object; each line of a JSONL trace is one JSON object"


def test_empty_and_binary_files(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n\n")
    assert "the file has no records" in load_error(tmp_path / "e.jsonl")
    (tmp_path / "e.csv").write_text("")
    assert "the file is empty" in load_error(tmp_path / "e.csv")
    (tmp_path / "b.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    assert load_error(tmp_path / "b.jsonl").startswith(f"{tmp_path / 'b.jsonl'}, line 1: byte 0xff at position 1 is not UTF-8")
    (tmp_path / "h.csv").write_text("step,prompt_id,sample,prompt_len,response_len\n")
    assert "the trace has no rows" in load_error(tmp_path / "h.csv")


def test_csv_errors_name_row_and_column(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("step,prompt_id,sample,prompt_len,response_len\n0,0,0,5,7\n0,1,0,5,seven\n")
    assert load_error(p) == f"{p}, row 2, column 'response_len': 'seven' is not a whole number below 2**53; response_len must be a whole number"
    p.write_text("step,prompt_id,sample,prompt_len\n0,0,0,5\n")
    assert "missing column 'response_len'; a CSV trace needs step, prompt_id, sample, prompt_len, response_len, or the Vidur columns" in load_error(p)
    p.write_text('step,prompt_id,sample,prompt_len,response_len\n0,0,0,5,"7\n')
    assert "not a readable CSV file" in load_error(p)


def test_bad_sidecar(tmp_path, rich_trace):
    save(rich_trace, tmp_path / "t.csv")
    sidecar(tmp_path / "t.csv").write_text("{not json")
    assert "t.csv.meta.json: not valid JSON" in load_error(tmp_path / "t.csv")
    sidecar(tmp_path / "t.csv").write_text('{"max_response_len": 10}')
    assert "exceeds the declared max_response_len 10" in load_error(tmp_path / "t.csv")


def test_csv_field_counts_and_duplicate_header(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("step,prompt_id,sample,prompt_len,response_len\n0,0,0,5,7\n\n0,1,0,5,7,9\n")
    assert load_error(p) == f"{p}, line 4: 6 fields but the header has 5; every row needs one value per column"
    p.write_text("step,prompt_id,sample,prompt_len,response_len,step\n0,0,0,5,7,1\n")
    assert load_error(p) == f"{p}: column(s) 'step' appear more than once in the header; name each column once"


def test_jsonl_values_are_read_exactly(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"step": 0, "prompt_id": 0, "sample": 0, "prompt_len": 5, "response_len": 7.0000000000000001}\n')
    assert load_error(p).endswith("column 'response_len': 7.0000000000000001 is not a whole number below 2**53; response_len must be a whole number")
    p.write_text('{"step": 0, "prompt_id": 0, "sample": 0, "prompt_len": "5", "response_len": 7.0, "reward": 0.1}\n')
    t = load(p)
    assert t.df["response_len"].tolist() == [7] and t.df["prompt_len"].tolist() == [5] and t.df["reward"].tolist() == [0.1]


@pytest.mark.parametrize("column, text", [
    (pa.array(["5", "x"]), "row 2, column 'response_len': 'x' is not a whole number"),
    (pa.array([5.0, 6.5]), "row 2, column 'response_len': 6.5 is not a whole number"),
    (pa.array([5, None], pa.int64()), "row 2, column 'response_len': an empty value is not a whole number"),
    (pa.array([[5], [6]]), "row 1, column 'response_len': array([5]) is not a whole number"),
    (pa.array([2, 1], pa.timestamp("s")), "row 1, column 'response_len': Timestamp('1970-01-01 00:00:02') is not a whole number"),
    (pa.array(["5", "6"]).dictionary_encode(), None),
    (pa.array([5.0, 6.0]), None),
])
def test_parquet_column_types(tmp_path, column, text):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"step": [0, 0], "prompt_id": [0, 1], "sample": [0, 0], "prompt_len": [1, 2], "response_len": column}), path)
    if text is None:
        assert load(path).df["response_len"].tolist() == [5, 6]
    else:
        assert load_error(path).startswith(f"{path}, {text}")


def test_each_format_is_recognised_by_the_registry_in_its_order(tmp_path):
    """detect() tries FORMATS in order: a log recognised by its content before the plain format of its suffix, and
    PolyTrace's step files before a rollout dump (a folder of .jsonl files is also what a dump looks like)."""
    from tltsim.trace.formats import FORMATS, detect

    poly = tmp_path / "poly"
    poly.mkdir()
    (poly / "multiturn_workload_step_1.jsonl").write_text('{"turns": [], "tool_calls": []}\n')
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "1.jsonl").write_text('{"input": "q", "output": "a"}\n')
    files = {"lengths.jsonl": '{"output": [3, 4]}\n', "ours.jsonl": '{"step": 0}\n',
             "vidur.csv": "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,2\n", "ours.csv": "step,response_len\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "t.parquet").write_bytes(b"")
    found = {p: detect(tmp_path / p).name for p in ("poly", "dump", *files, "t.parquet")}
    assert found == {"poly": "PolyTrace's multi-turn workload log", "dump": "verl rollout dump",
                     "lengths.jsonl": "length log", "ours.jsonl": "JSONL trace", "vidur.csv": "Vidur CSV trace",
                     "ours.csv": "CSV trace", "t.parquet": "Parquet trace"}
    assert len({f.name for f in FORMATS}) == len(FORMATS) == 7
    with pytest.raises(TltsimError, match="count_tokens applies to verl rollout dumps only"):
        load(tmp_path / "ours.jsonl", count_tokens=len)
