import numpy as np
import pytest

from tltsim.core.errors import TltsimError
from tltsim.control.coordinator import DataBuffer, SpotTrainer, WorkerState

B, I, T = WorkerState.BUSY, WorkerState.IDLE, WorkerState.TRAINING


def test_min_idle_then_join_then_preempt_whole_log():
    st = SpotTrainer(4, min_idle=2)
    assert st.start_rollout(0, 0.0) == []
    assert st.worker_done(2, 5.0) == []            # one idle < min_idle: waits
    assert st.worker_done(0, 7.0) == [0, 2]        # two idle: both start training
    assert st.worker_done(3, 9.0) == [3]           # later finisher joins at once
    assert st.training_workers == [0, 2, 3]
    assert st.worker_done(1, 12.0) == [1]          # the last one too (training continues)
    assert st.start_rollout(1, 20.0) == [0, 1, 2, 3]
    assert st.log == [
        (0.0, 0, B), (0.0, 1, B), (0.0, 2, B), (0.0, 3, B),
        (5.0, 2, I),
        (7.0, 0, I), (7.0, 0, T), (7.0, 2, T),
        (9.0, 3, I), (9.0, 3, T),
        (12.0, 1, I), (12.0, 1, T),
        (20.0, 0, B), (20.0, 1, B), (20.0, 2, B), (20.0, 3, B),
    ]
    assert [st.state(w) for w in range(4)] == [B, B, B, B]


def test_preempt_after_rollout_and_next_rollout():
    st = SpotTrainer(2)
    st.start_rollout(0, 0.0)
    assert st.worker_done(1, 3.0) == [1]           # min_idle 1: trains at once
    assert st.worker_done(0, 4.0) == [0]
    assert st.preempt(4.0) == [0, 1]               # colocated RL update needs the GPUs
    assert st.start_rollout(1, 10.0) == []         # nothing left to preempt
    assert st.log == [
        (0.0, 0, B), (0.0, 1, B),
        (3.0, 1, I), (3.0, 1, T),
        (4.0, 0, I), (4.0, 0, T),
        (4.0, 0, I), (4.0, 1, I),
        (10.0, 0, B), (10.0, 1, B),
    ]


def test_cadence_trains_every_kth_step_only():
    st = SpotTrainer(2, cadence=2)
    started = {}
    for step in range(4):
        st.start_rollout(step, 10.0 * step)
        started[step] = st.worker_done(0, 10.0 * step + 1) + st.worker_done(1, 10.0 * step + 2)
    assert started == {0: [0, 1], 1: [], 2: [0, 1], 3: []}
    assert st.log[-4:] == [(30.0, 0, B), (30.0, 1, B), (31.0, 0, I), (32.0, 1, I)]


def test_disabled_never_trains():
    st = SpotTrainer(3, enabled=False)
    st.start_rollout(0, 0.0)
    assert [st.worker_done(w, 1.0 + w) for w in range(3)] == [[], [], []]
    assert st.log == [(0.0, 0, B), (0.0, 1, B), (0.0, 2, B), (1.0, 0, I), (2.0, 1, I), (3.0, 2, I)]


def test_seconds_in_counts_harvested_time():
    st = SpotTrainer(3, min_idle=2)
    st.start_rollout(0, 0.0)
    st.worker_done(0, 2.0)
    st.worker_done(1, 5.0)                          # 0 and 1 train from 5
    st.worker_done(2, 9.0)                          # 2 trains from 9
    st.start_rollout(1, 10.0)
    assert st.seconds_in(T, until=10.0) == pytest.approx(5 + 5 + 1)
    assert st.seconds_in(I, until=10.0) == pytest.approx(3)        # worker 0, 2..5
    assert st.seconds_in(B, until=12.0) == pytest.approx(2 + 5 + 9 + 3 * 2)


def test_bad_calls():
    st = SpotTrainer(2)
    with pytest.raises(ValueError, match="not busy"):
        st.worker_done(0, 1.0)                      # no rollout started
    st.start_rollout(0, 5.0)
    st.worker_done(0, 6.0)
    with pytest.raises(ValueError, match="training, not busy"):
        st.worker_done(0, 7.0)
    with pytest.raises(ValueError, match="backwards"):
        st.worker_done(1, 5.5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_workers=0), "num_workers=0"),
    (dict(num_workers=2, min_idle=3), r"min_idle=3.*\[1, 2\]"),
    (dict(num_workers=2, cadence=0), "cadence=0"),
])
def test_bad_config(kwargs, match):
    n = kwargs.pop("num_workers")
    with pytest.raises(TltsimError, match=match):
        SpotTrainer(n, **kwargs)


def test_buffer_keeps_last_steps_and_long_tail_of_the_one_before():
    buf = DataBuffer(last_n_steps=1, keep_long_prev=0.25)
    buf.add(0, [100, 900, 300, 5000])
    buf.add(1, [50, 80])                            # early finishers of step 1: short
    data = buf.samples(1)
    assert sorted(data.lengths.tolist()) == [50, 80, 5000]  # step 1 + longest quarter of step 0
    assert (data.num_samples, data.num_tokens) == (3, 5130)
    assert data.mean_length == pytest.approx(5130 / 3)
    no_keep = DataBuffer(last_n_steps=1).samples  # keep_long_prev 0: short bias stays
    assert no_keep(1).num_samples == 0


def test_buffer_window_and_eviction():
    buf = DataBuffer(last_n_steps=2, keep_long_prev=0.5)
    for step in range(4):
        buf.add(step, [10 * (step + 1), 10 * (step + 1) + 1])
    # step 3: steps 2, 3 whole; the longer half of step 1; step 0 dropped
    assert sorted(buf.samples(3).lengths.tolist()) == [21, 30, 31, 40, 41]
    with pytest.raises(ValueError, match="older than the buffer keeps"):
        buf.add(0, [1])
    assert buf.samples(9).num_samples == 0 and buf.samples(9).mean_length == 0.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(last_n_steps=0), "last_n_steps=0"),
    (dict(keep_long_prev=1.5), "keep_long_prev=1.5"),
])
def test_buffer_bad_config(kwargs, match):
    with pytest.raises(TltsimError, match=match):
        DataBuffer(**kwargs)


def test_buffer_rejects_negative_lengths():
    with pytest.raises(ValueError, match=">= 0"):
        DataBuffer().add(0, np.array([3, -1]))
