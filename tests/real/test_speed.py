"""`tltsim real speed`: the rows it prints (once), in the dtype it is given."""
import json

import pytest
import torch

import real.tools.speed
from real.models import hub
from tltsim.cli import main

NAME = "smollm2-135m"  # a model with its own tokenizer: speed decodes the task's chat prompts


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_speed_measures_the_target_in_the_dtype_given(monkeypatch, capsys, dtype):
    seen = []
    measure = real.tools.speed.measure

    def spy(target, *args, **kwargs):
        seen.append(next(target.parameters()).dtype)
        return measure(target, *args, **kwargs)

    monkeypatch.setattr(real.tools.speed, "measure", spy)
    hub.fetch(NAME, log=lambda _: None)  # reused when cached
    rc = main(["real", "speed", "--model", NAME, "--drafters", "suffix", "--batches", "1", "--rounds", "1",
               "--max-new-tokens", "6", "--dtype", dtype, "--json", "--threads", "1"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and seen == [getattr(torch, dtype)]
    assert [(r["mode"], r["drafter"]) for r in rows] == [("decode", ""), ("spec_decode", "suffix")]
    assert all(r["tok_s"] > 0 for r in rows) and rows[1]["identical"] is True  # greedy: lossless in either dtype


def test_each_row_is_printed_once_as_a_table_or_as_json(monkeypatch, capsys):
    """Without a model: measuring replaced by two rows (reported to its progress callback as it goes), the checks
    of the model's files skipped."""
    import real.cli
    import real.drafters
    import real.models.targets

    rows = [{**dict.fromkeys(real.tools.speed.KEYS, 0), "batch": 1, "mode": m, "drafter": d, "tok_s": t}
            for m, d, t in (("decode", "", 123.25), ("spec_decode", "suffix", 234.5))]

    def measure(target, factories, prompts, settings, log=None):
        for row in rows:
            if log:
                log(row)
        return rows

    monkeypatch.setattr(real.tools.speed, "measure", measure)
    monkeypatch.setattr(real.tools.speed, "heldout_prompts", lambda task, n: [[1, 2, 3]] * n)
    monkeypatch.setattr(real.models.targets, "load_target", lambda *a, **k: None)
    monkeypatch.setattr(real.models.targets, "load_task", lambda *a, **k: None)
    monkeypatch.setattr(real.drafters, "load", lambda *a, **k: None)
    monkeypatch.setattr(real.cli, "_check_memory", lambda *a: None)
    monkeypatch.setitem(real.cli.CHECKS, "speed", lambda args: None)
    argv = ["real", "speed", "--model", "m", "--drafters", "suffix", "--batches", "1"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.count("123.25") == 1 and out.count("234.5") == 1 and len(out.splitlines()) == 3
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out) == rows
