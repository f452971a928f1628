"""verl 0.9.1's file logger as it writes (docs/verl.md): `json.dumps({"step", "data"})` a line, the file
truncated at each start of the trainer, validation outside the step timer."""
import json

import pytest

from tltsim.core.errors import TltsimError, TltsimWarning
from tltsim.verl_metrics import read_metrics


def _file_logger(path, calls):
    """What verl's FileLogger leaves: the file opened with "w" (truncated), one json.dumps line per log call."""
    with open(path, "w") as fp:
        for step, data in calls:
            fp.write(json.dumps({"step": step, "data": data}) + "\n")


def _train(step, gen, total, **extra):
    return step, {"timing_s/gen": gen, "timing_s/step": total, "response_length/mean": 300.0 + step, **extra}


def test_a_validating_step_keeps_its_own_step_time_and_validation_lines_are_not_steps(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _file_logger(path, [
        (0, {"val-core/acc/mean@1": 0.2}),  # trainer.val_before_train: validation only, before step 1
        _train(1, 10.0, 20.0),
        # test_freq 2: `testing` runs after the step timer closed, logged beside it, not inside timing_s/step
        _train(2, 11.0, 21.0, **{"timing_s/testing": 50.0, "val-core/acc/mean@1": 0.3}),
        _train(3, 12.0, 22.0),
    ])
    m = read_metrics(path)
    assert m.index.tolist() == [1, 2, 3]
    assert m.step_s.tolist() == [20.0, 21.0, 22.0] and m.gen_s.tolist() == [10.0, 11.0, 12.0]
    assert {"gen_s", "step_s", "len_mean", "len_max"} <= set(m.columns)


def test_a_resumed_run_holds_the_steps_since_the_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _file_logger(path, [_train(1, 10.0, 20.0), _train(2, 11.0, 21.0)])
    # resumed from the step-2 checkpoint: the trainer reopens the file with "w"; validation at the checkpoint's step
    _file_logger(path, [(2, {"val-core/acc/mean@1": 0.3}), _train(3, 12.0, 22.0), _train(4, 13.0, 23.0)])
    m = read_metrics(path)
    assert m.index.tolist() == [3, 4] and m.step_s.tolist() == pytest.approx([22.0, 23.0])


def test_a_phase_that_took_no_time_is_zero_but_a_rollout_of_none_is_refused(tmp_path):
    """verl logs 0.0 for a phase with nothing to do (no reference model); a step's rollout always takes time."""
    from tltsim.core.errors import TltsimError

    path = tmp_path / "metrics.jsonl"
    _file_logger(path, [_train(1, 10.0, 20.0, **{"timing_s/old_log_prob": 0.0})])
    assert read_metrics(path).old_log_prob_s.tolist() == [0.0]
    _file_logger(path, [_train(1, 0.0, 20.0)])
    with pytest.raises(TltsimError, match=r"'timing_s/gen': 0.0 is not a time or length \(a finite number > 0\)"):
        read_metrics(path)


def test_a_last_line_cut_short_is_left_out_with_a_warning(tmp_path):
    """A trainer killed while the file logger wrote a line leaves it without its end (and its newline)."""
    path = tmp_path / "metrics.jsonl"
    _file_logger(path, [_train(1, 10.0, 20.0), _train(2, 11.0, 21.0)])
    path.write_text(path.read_text() + '{"step": 3, "data": {"timing_s/gen": 1')
    with pytest.warns(TltsimWarning, match=r"metrics\.jsonl, line 3: cut short"):
        m = read_metrics(path)
    assert m.index.tolist() == [1, 2]
    path.write_text(path.read_text() + "\n")  # with its newline it was written whole: a bad line, refused
    with pytest.raises(TltsimError, match=r"line 3: not valid JSON"):
        read_metrics(path)


def test_two_runs_in_one_file_are_refused_naming_where_the_steps_start_again(tmp_path):
    """Two runs' files joined (cat a.jsonl b.jsonl), or a logger that appended: the steps start again."""
    path = tmp_path / "metrics.jsonl"
    _file_logger(path, [_train(1, 10.0, 20.0), _train(2, 11.0, 21.0), (0, {"val-core/acc/mean@1": 0.2}),
                        _train(1, 12.0, 22.0)])
    with pytest.raises(TltsimError, match=r"line 4: step 1 after step 2 \(line 2\): the steps start again"):
        read_metrics(path)


def test_a_resumed_run_continues_from_the_checkpoints_step(tmp_path):
    """A run resumed from the step-4 checkpoint: its file starts at the validation line of step 4, then step 5."""
    path = tmp_path / "metrics.jsonl"
    _file_logger(path, [(4, {"val-core/acc/mean@1": 0.3}), _train(5, 10.0, 20.0), _train(6, 11.0, 21.0)])
    assert read_metrics(path).index.tolist() == [5, 6]


def test_a_step_whose_every_request_aborted_is_left_out_and_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    aborted = {"response_length/mean": 0.0, "response_length/max": 0, "response/aborted_ratio": 1.0,
               "response_length_non_aborted/mean": None}
    _file_logger(path, [_train(1, 10.0, 20.0), (2, {"timing_s/gen": 3.0, "timing_s/step": 9.0, **aborted}),
                        _train(3, 12.0, 22.0)])
    with pytest.warns(TltsimWarning, match=r"step\(s\) 2 \(line 2\): every request aborted"):
        m = read_metrics(path)
    assert m.index.tolist() == [1, 3] and m.attrs["all_aborted"] == [2]
    _file_logger(path, [(1, {"timing_s/gen": 3.0, **aborted})])
    with pytest.raises(TltsimError, match="every step's requests aborted"):
        read_metrics(path)
