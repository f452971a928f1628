"""Length logs as PolyTrace's instrumented trainers leave them: a directory of packed_lengths_step_<step>.jsonl files
beside reward timings and DAPO's filter indices, validation rollouts among the lines."""
import json
from pathlib import Path

import pytest

from tltsim.cli import main
from tltsim.core.errors import TltsimError
from tltsim.trace import load
from tltsim.trace.formats import detect


def group(step, rank, index, prompt_len, lengths, validate=False):
    return {"step": step, "rank": 4 * rank, "dp_rank": rank, "tp_rank": 0, "local_index": index, "input": prompt_len,
            "output": lengths, "n_sampling": len(lengths), "validate": validate}


def write(path: Path, recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


@pytest.fixture
def log(tmp_path):
    d = tmp_path / "20260614_023133"
    d.mkdir()
    for step in (0, 1, 10):  # step files sort by their number, not their name
        write(d / f"packed_lengths_step_{step}.jsonl",
              [group(step, 0, 0, 112, [450, 453, 396]), group(step, 1, 0, 157, [491, 16000, 165]),
               group(step, 0, 1, 90, [12, 13, 14], validate=True)])
        write(d / f"reward_timings_step_{step}.jsonl", [{"step": step, "rank": 0, "reward_time_s": 77.3}])
    write(d / "dapo_filter_indices.jsonl", [{"workload_step": 0, "kept_prompt_indices": [0]}])
    return d


def test_a_length_log_directory_reads_every_training_group(log, tmp_path, capsys):
    assert detect(log).name == "length log"
    t = load(log)
    assert t.steps == [0, 1, 10] and t.meta.group_size == 3 and len(t.df) == 18
    step = t.step(10)
    assert step["response_len"].tolist() == [450, 453, 396, 491, 16000, 165]
    assert step["prompt_len"].tolist() == [112] * 3 + [157] * 3 and step["engine"].tolist() == [0] * 3 + [1] * 3
    assert t.meta.left_out == "validation rollouts: 3 prompt groups"
    assert "packed_lengths_step_<step>.jsonl (3 files)" in t.meta.provenance
    assert "not read (no response lengths): dapo_filter_indices.jsonl, reward_timings_step_<step>.jsonl (3 files)" \
        in t.meta.provenance
    out = tmp_path / "t.parquet"
    assert main(["trace", "convert", str(log), str(out), "--max-len", "16000"]) == 0
    assert capsys.readouterr().err == ""  # the log declares no cap: nothing to disagree with
    assert load(out).meta.max_response_len == 16000 and load(out).df.equals(t.df)
    assert main(["trace", "convert", str(log), str(out), "--max-len", "8192", "--force"]) == 2
    assert "16000 exceeds the declared max_response_len 8192" in capsys.readouterr().err


def test_a_length_log_of_validation_rollouts_alone_or_of_mixed_groups_is_refused(tmp_path):
    d = tmp_path / "log"
    d.mkdir()
    write(d / "packed_lengths_step_0.jsonl", [group(0, 0, 0, 10, [5, 6], validate=True)])
    with pytest.raises(TltsimError, match=r"every line is a validation rollout"):
        load(d)
    write(d / "packed_lengths_step_0.jsonl", [group(0, 0, 0, 10, [5, 6])])
    write(d / "packed_lengths_step_1.jsonl", [group(1, 0, 0, 10, [5, 6, 7])])
    with pytest.raises(TltsimError, match=r"packed_lengths_step_1\.jsonl: groups of 3 samples, but "
                                          r"packed_lengths_step_0\.jsonl has groups of 2"):
        load(d)
    write(d / "packed_lengths_step_1.jsonl", [group(0, 0, 0, 10, [5, 6])])
    with pytest.raises(TltsimError, match=r"packed_lengths_step_1\.jsonl: step 0 is also in packed_lengths_step_0"):
        load(d)
