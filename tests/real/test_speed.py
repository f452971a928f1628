"""`tltsim real speed`: the rows it prints, in the dtype it is given."""
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
