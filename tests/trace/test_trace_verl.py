"""verl rollout dumps: token counts from the run's tokenizer, groups, order, rewards, and malformed dumps."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tltsim.cli import main
from tltsim.core.errors import TltsimError, TltsimWarning
from tltsim.trace import load, save, stats
from tltsim.trace.tokens import token_counter
from tltsim.trace.verl import read_rollout_dump

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "examples" / "verl" / "tokenizer"  # a small byte-level BPE tokenizer (examples/verl/make_examples.py)
WORDS = "so the answer is x plus three wait let me check each digit again because twice seven".split()


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TOKENIZER))


def _lines(step, prompts, n, rng, shuffle=True):
    """verl's lines for one step: `prompts` prompts x n samples, shuffled as balance_batch reorders them."""
    lines = []
    for p in range(prompts):
        for j in range(n):
            text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 60)))) + (" ü€ 世界" if j == 1 else "")
            lines.append({"input": f"Prompt {p} of step {step}: solve it.", "output": text, "gts": "7",
                          "score": float(rng.random()), "step": step, "acc": True})
    order = rng.permutation(len(lines)) if shuffle else np.arange(len(lines))
    return [lines[i] for i in order]


def _write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)) + "\n" for x in lines),
                    encoding="utf-8")
    return path


@pytest.fixture
def dump(tmp_path):
    rng = np.random.default_rng(3)
    d = tmp_path / "rollout"
    d.mkdir()
    steps = {s: _lines(s, 5, 4, rng, shuffle=s != 2) for s in (1, 2, 3)}
    for s, lines in steps.items():
        _write(d / f"{s}.jsonl", lines)
    return d, steps


def test_token_counts_groups_order_and_rewards_are_kept(dump, tokenizer):
    d, steps = dump
    trace = read_rollout_dump(d, token_counter(str(TOKENIZER)))
    assert trace.steps == [1, 2, 3] and trace.meta.group_size == 4 and trace.meta.source == "verl-dump"
    for s, lines in steps.items():
        rows = trace.step(s)
        first = list(dict.fromkeys(x["input"] for x in lines))  # prompts in order of first appearance
        for pid, prompt in enumerate(first):
            mine = [x for x in lines if x["input"] == prompt]  # file order = sample order
            got = rows[rows.prompt_id == pid].sort_values("sample")
            want = [len(tokenizer(x["output"], add_special_tokens=False).input_ids) for x in mine]
            assert np.all(np.abs(got.response_len.to_numpy() - want) <= 1)
            assert got.reward.tolist() == [x["score"] for x in mine]
            assert set(got.prompt_len) == {len(tokenizer(prompt, add_special_tokens=False).input_ids)}


def test_aborted_requests_are_kept_marked_and_counted(tmp_path, capsys):
    # verl writes an aborted request as an empty output: the row stays (its group whole), marked aborted, no tokens
    lines = _lines(1, 3, 4, np.random.default_rng(2))
    empty = [1, 6]
    for i in empty:
        lines[i]["output"] = ""
    path = _write(tmp_path / "1.jsonl", lines)
    trace = read_rollout_dump(path, token_counter(str(TOKENIZER)))
    assert trace.meta.group_size == 4 and len(trace.df) == 12
    assert trace.df["aborted"].sum() == len(empty) and (trace.df.response_len[trace.df.aborted] == 0).all()
    assert (trace.df.response_len[~trace.df.aborted] > 0).all()
    assert stats(trace)["aborted_fraction"] == pytest.approx(len(empty) / 12)
    out = save(trace, tmp_path / "t.parquet")
    assert load(out).df["aborted"].tolist() == trace.df["aborted"].tolist()
    assert main(["trace", "stats", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[-1] == "aborted%" and table[-2].split()[-1] == f"{100 * len(empty) / 12:.1f}"
    # a group short of a line (a line lost) is left out, with a warning naming the step, and the trace says so
    lines.pop(4)
    with pytest.warns(TltsimWarning, match=r"step 1: 1 group with fewer than 4 samples \(3 responses\) left out \(a run stopped"):
        cut = read_rollout_dump(_write(tmp_path / "1.jsonl", lines), token_counter(str(TOKENIZER)))
    assert len(cut.df) == 8 and cut.df.groupby("prompt_id").size().tolist() == [4, 4]
    assert cut.meta.left_out == "incomplete groups: step 1: 1 group with fewer than 4 samples (3 responses)"


def test_a_prompt_drawn_twice_in_a_batch_is_two_groups(tmp_path):
    rng = np.random.default_rng(0)
    lines = _lines(1, 3, 2, rng)
    lines += [dict(x, output=x["output"] + " again") for x in lines if x["input"].startswith("Prompt 0 ")]
    trace = read_rollout_dump(_write(tmp_path / "1.jsonl", lines), token_counter(str(TOKENIZER)))
    assert trace.meta.group_size == 2 and trace.df.prompt_id.nunique() == 4


def test_the_step_comes_from_the_file_name_when_lines_have_none(tmp_path):
    lines = [{k: v for k, v in x.items() if k != "step"} for x in _lines(7, 2, 2, np.random.default_rng(1))]
    trace = read_rollout_dump(_write(tmp_path / "12.jsonl", lines), token_counter(str(TOKENIZER)))
    assert trace.steps == [12]


def _good(tmp_path, n=4):
    return _lines(1, 2, n, np.random.default_rng(5), shuffle=False)


@pytest.mark.parametrize("case, expect", [
    ("bad_json", r"1\.jsonl, line 3: not valid JSON"),
    ("missing_key", r"1\.jsonl, line 2: no key 'output'"),
    ("two_steps", r"1\.jsonl, line 6, key 'step': step 2, but line 1 is step 1; .*split the file by step"),
    ("not_utf8", r"1\.jsonl, line 4: byte 0xff at position \d+ is not UTF-8"),
    ("not_text", r"1\.jsonl, line 2, key 'input': expected the prompt text, got 17"),
    ("some_scored", r"1\.jsonl, line 4: 'score' is on some lines and not on others"),
])
def test_malformed_dumps_give_one_line_in_the_dumps_terms(tmp_path, case, expect):
    lines = _good(tmp_path)
    path = tmp_path / "1.jsonl"
    if case == "bad_json":
        lines[2] = '{"input": "x", "output": '
    elif case == "missing_key":
        del lines[1]["output"]
    elif case == "two_steps":
        lines[5]["step"] = 2
    elif case == "not_text":
        lines[1]["input"] = 17
    elif case == "some_scored":
        del lines[3]["score"]
    _write(path, lines)
    if case == "not_utf8":
        raw = path.read_bytes().split(b"\n")
        raw[3] = raw[3].replace(b"answer", b"ans\xffwer", 1) if b"answer" in raw[3] else raw[3][:20] + b"\xff" + raw[3][20:]
        path.write_bytes(b"\n".join(raw))
    with pytest.raises(TltsimError, match=expect) as e:
        read_rollout_dump(path, token_counter(str(TOKENIZER)))
    assert "\n" not in str(e.value)


def test_directory_problems_name_the_files(tmp_path):
    d = tmp_path / "dump"
    d.mkdir()
    count = token_counter(str(TOKENIZER))
    with pytest.raises(TltsimError, match="no .jsonl files"):
        read_rollout_dump(d, count)
    lines = _good(tmp_path)
    _write(d / "1.jsonl", lines)
    _write(d / "2.jsonl", lines)  # its lines say step 1 too
    with pytest.raises(TltsimError, match=r"2\.jsonl: step 1 is also in .*1\.jsonl"):
        read_rollout_dump(d, count)
    _write(d / "2.jsonl", [dict(x, step=2) for x in _good(tmp_path, n=2)])
    with pytest.raises(TltsimError, match=r"2\.jsonl: groups of 2 samples, but .*1\.jsonl has groups of 4"):
        read_rollout_dump(d, count)
    _write(d / "notes.jsonl", lines)
    with pytest.raises(TltsimError, match="notes.jsonl is not named by a step number"):
        read_rollout_dump(d, count)


def test_convert_cli_needs_a_tokenizer_and_says_why(dump, tmp_path, capsys):
    d, _ = dump
    out = tmp_path / "t.parquet"
    assert main(["trace", "convert", str(d), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "verl rollout dump" in err and "--tokenizer" in err
    assert main(["trace", "convert", str(d / "1.jsonl"), str(out)]) == 2
    assert "--tokenizer" in capsys.readouterr().err
    assert main(["trace", "stats", str(d / "1.jsonl")]) == 2  # the loader says the same
    assert "--tokenizer" in capsys.readouterr().err
    assert main(["trace", "convert", str(d), str(out), "--tokenizer", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["trace", "convert", str(d), str(out), "--tokenizer", str(TOKENIZER), "--max-len", "4096"]) == 0
    t = load(out)
    assert t.steps == [1, 2, 3] and t.meta.max_response_len == 4096 and "reward" in t.df


def test_loading_the_tokenizer_does_not_need_torch():
    code = ("import sys; sys.modules['torch'] = None\n"  # as on a machine without torch
            "from tltsim.trace.tokens import token_counter\n"
            f"print(token_counter({str(TOKENIZER)!r})(['so the answer is seven', '']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts[1] == 0 and counts[0] >= 1


def test_convert_takes_a_known_model_name_for_its_tokenizer(dump, tmp_path, capsys, monkeypatch):
    """`--tokenizer smollm2-135m` is the fetched model's directory in the cache; unfetched, one line says to fetch."""
    d, _ = dump
    monkeypatch.setenv("TLTSIM_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "t.parquet"
    assert main(["trace", "convert", str(d), str(out), "--tokenizer", "smollm2-135m"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tltsim real model fetch smollm2-135m" in err and not out.exists()
    fetched = tmp_path / "cache" / "models" / "smollm2-135m"  # as `fetch` leaves it: files, then its mark
    shutil.copytree(TOKENIZER, fetched)
    (fetched / "tltsim_model.json").write_text(json.dumps({"name": "smollm2-135m"}))
    assert main(["trace", "convert", str(d), str(out), "--tokenizer", "smollm2-135m"]) == 0
    by_dir = tmp_path / "by_dir.parquet"
    assert main(["trace", "convert", str(d), str(by_dir), "--tokenizer", str(TOKENIZER)]) == 0
    assert load(out).df.equals(load(by_dir).df)


@pytest.mark.parametrize("aborted_steps", [[2], [1, 3]])
def test_a_dump_whose_steps_differ_in_aborted_rows_converts(tmp_path, aborted_steps):
    """Only some steps hold an aborted request (an empty output): the steps without one have no rows to mark, and
    the joined trace marks theirs not aborted rather than refusing the dump."""
    rng, dump = np.random.default_rng(5), tmp_path / "dump"
    dump.mkdir()
    for step in (1, 2, 3):
        lines = _lines(step, 2, 4, rng)
        if step in aborted_steps:
            lines[3]["output"] = ""
        _write(dump / f"{step}.jsonl", lines)
    trace = read_rollout_dump(dump, token_counter(str(TOKENIZER)))
    assert trace.df["aborted"].dtype == bool and trace.df["aborted"].sum() == len(aborted_steps)
    assert sorted(trace.df.loc[trace.df.aborted, "step"]) == aborted_steps
    assert main(["trace", "convert", str(dump), str(tmp_path / "t.parquet"), "--tokenizer", str(TOKENIZER)]) == 0
    assert load(tmp_path / "t.parquet").df["aborted"].sum() == len(aborted_steps)


def test_a_dump_step_whose_every_request_aborted_converts_with_no_lengths(tmp_path):
    """verl dumps every request of such a step with an empty output: its rows stay, all aborted, and the step's
    length figures are empty rather than zeros."""
    rng, dump = np.random.default_rng(7), tmp_path / "dump"
    dump.mkdir()
    for step in (1, 2, 3):
        lines = _lines(step, 2, 4, rng)
        if step == 2:
            for line in lines:
                line["output"] = ""
        _write(dump / f"{step}.jsonl", lines)
    trace = read_rollout_dump(dump, token_counter(str(TOKENIZER)))
    by_step = trace.df.groupby("step")["aborted"].mean().to_dict()
    assert by_step == {1: 0.0, 2: 1.0, 3: 0.0}
    st = {e["step"]: e for e in stats(trace)["per_step"]}
    assert st[2]["aborted_fraction"] == 1.0 and st[2]["max"] == 0 and np.isnan(st[2]["mean"])


def test_a_nan_score_is_refused_naming_its_line(tmp_path):
    """verl writes a reward function's NaN as `NaN`; a trace's reward is a number, so the line is named."""
    lines = _lines(1, 2, 4, np.random.default_rng(6), shuffle=False)
    lines[5]["score"] = float("nan")
    _write(tmp_path / "1.jsonl", lines)
    with pytest.raises(TltsimError, match=r"1\.jsonl, line 6, key 'score': NaN is not a finite number"):
        read_rollout_dump(tmp_path, token_counter(str(TOKENIZER)))
