"""`tltsim trace ...`: output, and bad input as one line on stderr with exit code 2."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from tltsim.cli import main
from tltsim.core import glossary
from tltsim.trace import load, stats, synth


@pytest.fixture
def dapo(tmp_path):
    out = tmp_path / "d.parquet"
    assert main(["trace", "synth", "dapo", "--steps", "3", "--prompts", "12", "--group", "4",
                 "--max-len", "8192", "--seed", "1", "-o", str(out)]) == 0
    return out


def test_synth_writes_the_trace_the_api_makes(dapo, capsys):
    capsys.readouterr()
    again = dapo.with_name("again.csv")
    assert main(["trace", "synth", "dapo", "--steps", "3", "--prompts", "12", "--group", "4",
                 "--max-len", "8192", "--seed", "1", "-o", str(again)]) == 0
    assert capsys.readouterr().out == f"wrote {again}: 3 steps x 12 prompts x 4 samples (144 responses), family dapo\n"
    t = load(dapo)
    assert t.df.equals(synth("dapo", 3, 12, 4, 8192, seed=1).df) and t.df.equals(load(again).df)
    assert t.meta.max_response_len == 8192 and t.meta.source == "synth:dapo"


def test_synth_drift_and_params_reach_the_generator(tmp_path):
    out = tmp_path / "l.csv"
    assert main(["trace", "synth", "lognormal", "--steps", "2", "--prompts", "4", "--group", "2", "--max-len", "100000",
                 "--seed", "3", "--drift", "0.5", "--param", "median=50", "--param", "rho=0", "-o", str(out)]) == 0
    meta = load(out).meta
    assert "--seed 3 --drift 0.5 --param median=50 --param rho=0 -o FILE" in meta.provenance
    assert "Parameters: median=50.0, sigma=0.8, rho=0.0, drift=0.5," in meta.provenance


def test_stats_json_is_the_api_dict(dapo, capsys):
    capsys.readouterr()
    assert main(["trace", "stats", str(dapo), "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    got = json.loads(out)
    assert got == json.loads(json.dumps(stats(load(dapo))))
    assert {"steps", "responses", "median", "p90", "p99", "max", "tail_share", "truncated_fraction", "per_step"} <= set(got)
    assert len(got["per_step"]) == 3 and got["per_step"][0]["step"] == 0


def test_stats_table_has_a_row_per_step_and_overall(dapo, capsys):
    capsys.readouterr()
    assert main(["trace", "stats", str(dapo)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{dapo}: source synth:dapo, model synthetic, cap 8192, group 4, 3 steps, 144 responses"
    assert lines[1].split() == ["step", "responses", "mean", "median", "p90", "p99", "max", "max/med", "trunc%", "tail%", "aborted%"]
    # each column printed is explained in --help, in this order (a multi-turn trace's second table: the rest)
    assert lines[1].split() == list(glossary.TRACE_STATS)[:len(lines[1].split())]
    assert [line.split()[0] for line in lines[2:-1]] == ["0", "1", "2", "all"]
    assert lines[-1] == "(columns: `tltsim trace stats --help`)"  # where each column is defined
    st = stats(load(dapo))
    assert lines[-2].split()[1:3] == ["144", f"{st['mean']:.0f}"]


def test_convert_between_formats_and_import(tmp_path, dapo, capsys):
    out = tmp_path / "d.jsonl"
    assert main(["trace", "convert", str(dapo), str(out)]) == 0
    assert load(out).df.equals(load(dapo).df) and load(out).meta == load(dapo).meta
    vidur = tmp_path / "v.csv"
    vidur.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1,20,6\n2,30,70\n")
    assert main(["trace", "convert", str(vidur), str(tmp_path / "v.parquet"), "--requests-per-step", "2", "--max-len", "100"]) == 0
    t = load(tmp_path / "v.parquet")
    assert t.steps == [0, 1] and t.meta.source == "vidur" and t.meta.max_response_len == 100


def run_error(capsys, argv):
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("tltsim: error: ")
    return captured.err.strip()


def test_bad_inputs_give_one_line_and_exit_2(tmp_path, dapo, capsys):
    assert run_error(capsys, ["trace", "stats", str(tmp_path / "none.parquet")]).endswith("does not exist; give the path of a trace file (.parquet, .csv, .jsonl)")
    (tmp_path / "bad.jsonl").write_text('{"step": 0}\n{nope\n')
    assert run_error(capsys, ["trace", "stats", str(tmp_path / "bad.jsonl")]).startswith(f"tltsim: error: {tmp_path / 'bad.jsonl'}, line 2: not valid JSON")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 garbage")
    assert "not a readable Parquet file" in run_error(capsys, ["trace", "stats", str(tmp_path / "bad.parquet")])
    assert "unknown trace format '.xlsx'" in run_error(capsys, ["trace", "convert", str(dapo), str(tmp_path / "d.xlsx")])
    assert "unknown synthetic family 'zipf'" in run_error(capsys, ["trace", "synth", "zipf", "--steps", "1", "--prompts", "1", "--group", "1", "--max-len", "9", "--seed", "0", "-o", str(tmp_path / "z.csv")])
    assert "--param 'rho': expected NAME=VALUE" in run_error(capsys, ["trace", "synth", "dapo", "--steps", "1", "--prompts", "1", "--group", "1", "--max-len", "9", "--seed", "0", "--param", "rho", "-o", str(tmp_path / "z.csv")])
    pd.DataFrame({"step": [0], "prompt_id": [0], "sample": [0], "prompt_len": [1], "response_len": [-4]}).to_csv(tmp_path / "neg.csv", index=False)
    assert run_error(capsys, ["trace", "stats", str(tmp_path / "neg.csv")]) == (
        f"tltsim: error: {tmp_path / 'neg.csv'}, row 1, column 'response_len': -4 is not a valid length; lengths are whole token counts, >= 1 (0 only on a row marked aborted)")


def test_subprocess_exit_code_and_single_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("step,prompt_id,sample,prompt_len,response_len\n0,0,0,5,1.5\n")
    r = subprocess.run([sys.executable, "-m", "tltsim", "trace", "stats", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"tltsim: error: {bad}, row 1, column 'response_len': '1.5' is not a whole number below 2**53; response_len must be a whole number\n"
