"""`tltsim real profile`: one row per timed step of each kind, and the simulator can fit it."""

import pytest

from tltsim.cli import main
from tltsim.cost.profiled import KINDS, Profiled, read_profile


def test_profile_cli_writes_a_profile_the_cost_model_fits(tmp_path):
    out = tmp_path / "p.csv"
    rc = main(["real", "profile", "--model", "test-llama", "--batches", "1,3", "--contexts", "8,16",
               "--strategies", "4_1_4,2_2_3", "--repeats", "2", "--train-rows", "1,3", "-o", str(out)])
    assert rc == 0
    df = read_profile(out)
    assert set(df.kind) == set(KINDS)
    assert (df.seconds > 0).all()
    dec = df[df.kind == "decode"]
    assert sorted(set(dec.batch)) == [1, 3] and len(dec) == 2 * 2 * 2
    spec = df[df.kind == "spec"]
    assert set(zip(spec.depth, spec.topk, spec.verify)) == {(4, 1, 4), (2, 2, 3)}
    # contexts are the batch's KV tokens when the step starts: at least batch x prompt length
    assert (dec.context >= dec.batch * 8).all()
    # catch-ups per cell: the build over every token, then 1, 4 and 16 tokens a row, twice (--repeats 2)
    up = df[df.kind == "catchup"]
    assert len(up) == 2 * 2 * (1 + 2 * 3) and (up.seconds > 0).all()
    assert sorted(set((up.tokens / up.batch).round(6))) == [1, 4, 8, 16]  # 8, 16: builds at prompts of 8, 16
    builds = up[up.tokens == up.context]
    assert len(builds) == 4 and sorted(set(builds.context / builds.batch)) == [8, 16]
    for kind in ("train", "logprob", "drafter_train"):  # --train-rows 1,3, each timed twice (--repeats 2)
        assert (df.kind == kind).sum() == 2 * 2, kind
    fit = Profiled.fit(df)
    assert float(fit.decode_time(1, 10)) > 0 and fit.drafter_train_tokens_per_s(1) > 0


def test_profile_rejects_bad_grid(tmp_path, capsys):
    rc = main(["real", "profile", "--model", "test-llama", "--batches", "0,x", "-o", str(tmp_path / "p.csv")])
    assert rc == 2 and "--batches '0,x': expected comma-separated positive integers" in capsys.readouterr().err
    # the profile samples as a run does by default; its temperature is checked as a run's is
    with pytest.raises(SystemExit) as exit_:  # refused by the parser, before torch is loaded
        main(["real", "profile", "--model", "test-llama", "--temperature", "0", "-o", str(tmp_path / "p.csv")])
    assert exit_.value.code == 2
    assert "argument --temperature: 0 is out of range; give a finite number > 0" in capsys.readouterr().err
    assert not (tmp_path / "p.csv").exists()


def test_profile_in_two_processes_keeps_both_timings(tmp_path):
    out, one = tmp_path / "p.csv", tmp_path / "one.csv"
    grid = ["--model", "test-llama", "--batches", "2", "--contexts", "8", "--strategies", "4_1_4", "--repeats", "2"]
    assert main(["real", "profile", *grid, "--processes", "2", "-o", str(out)]) == 0
    assert main(["real", "profile", *grid, "-o", str(one)]) == 0
    df, single = read_profile(out), read_profile(one)
    assert len(df) == 2 * len(single)
    # both ranks train on batches of the sizes the single process (--seed 0) drew: in the gradient all-reduce
    # neither waits for a larger batch, so each train row's time is its own size's
    first, second = df.iloc[: len(single)], df.iloc[len(single):]
    for rows in (first, second):
        assert rows[rows.kind == "train"].tokens.tolist() == single[single.kind == "train"].tokens.tolist()
    with pytest.raises(SystemExit) as exit_:
        main(["real", "profile", *grid, "--processes", "0", "-o", str(out)])
    assert exit_.value.code == 2
