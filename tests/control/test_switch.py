import numpy as np
import pytest

from tltsim.core.errors import TltsimError
from tltsim.control.switch import SDSwitch


def run_timeline(switch, batches):
    """Per-iteration driving; returns (iteration, batch, on-after) for each iteration."""
    log = []
    for it, bs in enumerate(batches):
        ran_off = switch.advance(bs, 1)
        log.append((it, bs, ran_off, switch.on))
    return log


def test_adaptive_turns_on_after_patience_small_iterations():
    sw = SDSwitch(threshold=4, patience=3)
    log = run_timeline(sw, [6, 4, 3, 5, 4, 4, 4, 2, 1])
    # iteration 3 (batch 5 > 4) resets the count; 4,5,6 are the three small ones;
    # SD is on after iteration 6 and iterations 7, 8 run with it (0 ran off).
    assert log == [
        (0, 6, 1, False), (1, 4, 1, False), (2, 3, 1, False), (3, 5, 1, False),
        (4, 4, 1, False), (5, 4, 1, False), (6, 4, 1, True),
        (7, 2, 0, True), (8, 1, 0, True),
    ]


def test_stays_on_and_reset_starts_over():
    sw = SDSwitch(threshold=32, patience=2)
    assert sw.advance(8, 5) == 2 and sw.on
    assert sw.advance(100, 3) == 0 and sw.on  # a large batch later does not switch it off
    sw.reset()
    assert not sw.on
    assert sw.advance(8, 1) == 1 and not sw.on


def test_segment_returns_iterations_before_switch():
    sw = SDSwitch(threshold=32, patience=10)
    assert sw.advance(64, 100) == 100 and not sw.on
    assert sw.advance(32, 4) == 4 and not sw.on
    assert sw.advance(20, 50) == 6 and sw.on


def test_exactly_patience_turns_on_at_segment_end():
    sw = SDSwitch(threshold=32, patience=10)
    assert sw.advance(10, 10) == 10 and sw.on


def test_always_and_never():
    always = SDSwitch(mode="always")
    assert always.on and always.advance(512, 7) == 0
    never = SDSwitch(mode="never")
    assert never.advance(1, 1000) == 1000 and not never.on


def test_patience_zero_turns_on_at_first_small_batch():
    sw = SDSwitch(threshold=8, patience=0)
    assert sw.advance(9, 3) == 3 and not sw.on
    assert sw.advance(8, 3) == 0 and sw.on


def sd_per_iteration_by_segments(switch, segments):
    """[bool per iteration: ran with SD] when driven with advance(bs, n) per segment."""
    ran = []
    for bs, n in segments:
        k = switch.advance(bs, n)
        ran += [False] * k + [True] * (n - k)
    return ran


def sd_per_iteration_one_by_one(switch, segments):
    """The same, driven as the real engine does: advance(bs, 1) every iteration."""
    return [switch.advance(bs, 1) == 0 for bs, n in segments for _ in range(n)]


@pytest.mark.parametrize("seed", range(30))
def test_segments_equal_per_iteration(seed):
    rng = np.random.default_rng(seed)
    threshold, patience = int(rng.integers(1, 40)), int(rng.integers(0, 15))
    segments = [(int(rng.integers(1, 2 * threshold + 2)), int(rng.integers(0, 8)))
                for _ in range(40)]
    by_seg = SDSwitch(threshold=threshold, patience=patience)
    one_by_one = SDSwitch(threshold=threshold, patience=patience)
    ran_seg = sd_per_iteration_by_segments(by_seg, segments)
    assert ran_seg == sd_per_iteration_one_by_one(one_by_one, segments)
    assert by_seg.on == one_by_one.on


def test_equivalence_check_sees_a_switch():
    """Guard for the test above: its cases do switch SD on part-way."""
    segments = [(50, 3), (10, 4), (10, 0), (40, 2), (5, 12)]
    ran = sd_per_iteration_by_segments(SDSwitch(threshold=32, patience=10), segments)
    assert ran == [False] * 19 + [True] * 2
    assert ran == sd_per_iteration_one_by_one(SDSwitch(threshold=32, patience=10), segments)


@pytest.mark.parametrize("kwargs, match", [
    (dict(mode="sometimes"), "adaptive, always, never"),
    (dict(threshold=0), "threshold=0"),
    (dict(patience=-1), "patience=-1"),
])
def test_bad_config(kwargs, match):
    with pytest.raises(TltsimError, match=match):
        SDSwitch(**kwargs)


def fastrl_rule(batches, threshold=32, checks=10):
    """TLT's switch as its code (FastRL's SGLang fork, EAGLEWorker.should_enable_sd, restated) decides it, iteration
    by iteration: a decode iteration at a running batch <= threshold adds one to a count of consecutive such
    iterations, a larger batch sets the count to 0; the iteration that brings the count to `checks` still runs
    plainly and speculation is on from the next (after a re-prefill) to the rollout's end. The threshold is the
    engine's running batch whatever its TP (verl's speculative.bs_threshold, 32, passed to every engine as is).
    Returns per iteration whether it speculated."""
    count, on, out = 0, False, []
    for bs in batches:
        if on:
            out.append(True)
            continue
        count = count + 1 if bs <= threshold else 0
        on = count >= checks
        out.append(False)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_switch_follows_tlts_code(seed):
    """SDSwitch speculates in exactly the iterations TLT's own rule does, on a rollout's shrinking batch (with the
    bumps a re-admitted request makes), per iteration and per segment."""
    rng = np.random.default_rng(seed)
    batches = np.maximum(1, 64 - np.cumsum(rng.integers(0, 3, 200)) + rng.integers(0, 3, 200)).tolist()
    expected = fastrl_rule(batches)
    by_iteration = [not bool(r[2]) for r in run_timeline(SDSwitch(threshold=32, patience=10), batches)]
    assert by_iteration == expected
    segments = []  # runs of one batch size, as the simulator's fast path advances them
    for b in batches:
        if segments and segments[-1][0] == b:
            segments[-1][1] += 1
        else:
            segments.append([b, 1])
    assert sd_per_iteration_by_segments(SDSwitch(threshold=32, patience=10), segments) == expected
    assert any(expected) and not all(expected)
