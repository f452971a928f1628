"""verl 0.9.1's file logger as it writes (docs/verl.md): `json.dumps({"step", "data"})` a line, the file
truncated at each start of the trainer, validation outside the step timer."""
import json

import pytest

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
