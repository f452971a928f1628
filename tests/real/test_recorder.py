"""A timeline row means one thing on both sides: real/'s engine calls merge as the simulator's iterations do, and
the shipped real runs' timelines hold such rows."""
import math
from pathlib import Path

import pytest

from real.engine.adaptive import EngineCall
from real.run.recorder import intervals
from tltsim.core.records import Result
from tltsim.sim.engine import Entry, merge_entries
from tltsim.core.summary import GENERATION

ROOT = Path(__file__).resolve().parents[2]

# (mode, strategy, batch, accepted, tokens, t_start, t_end): an admission, plain decoding as the batch shrinks, the
# switch's re-prefill, then speculation whose batch and strategy change
CALLS = [("prefill", "", 4, math.nan, 40, 0.0, 1.0), ("decode", "", 4, math.nan, 4, 1.0, 1.5),
         ("decode", "", 3, math.nan, 3, 1.5, 2.0), ("prefill", "", 3, math.nan, 0, 2.0, 2.5),
         ("spec_decode", "4_1_4", 3, 2.0, 6, 2.5, 3.0), ("spec_decode", "4_1_4", 2, 3.0, 6, 3.0, 3.5),
         ("spec_decode", "2_1_2", 2, 1.0, 2, 3.5, 4.0)]


def test_real_calls_and_simulated_iterations_merge_into_the_same_rows():
    real = intervals(5, 1, [EngineCall(m, s, b, a, t, t1 - t0, t0, t1) for m, s, b, a, t, t0, t1 in CALLS])
    sim = merge_entries([Entry(m, t0, t1, b, t, a, s, int(m == "spec_decode")) for m, s, b, a, t, t0, t1 in CALLS])
    assert [r.state for r in real] == ["prefill", "decode", "prefill", "spec_decode"]  # by state only
    assert [(r.step, r.worker) for r in real] == [(5, 1)] * 4
    spec = real[-1]
    assert (spec.t_start, spec.t_end, spec.batch_size, spec.tokens) == (2.5, 4.0, 3, 14.0)  # batch at its start
    assert spec.accepted == 2.0 and spec.strategy == "4_1_4"  # mean over its iterations; the strategy run most
    assert real[1].batch_size == 4 and math.isnan(real[1].accepted) and real[1].strategy == ""
    for r, s in zip(real, sim, strict=True):
        assert (r.state, r.t_start, r.t_end, r.batch_size, r.tokens, r.strategy) == \
            (s.state, s.t_start, s.t_end, s.batch_size, s.tokens, s.strategy)
        assert r.accepted == s.accepted or (math.isnan(r.accepted) and math.isnan(s.accepted))


@pytest.mark.parametrize("run", sorted(p.name for p in (ROOT / "traces" / "runs").glob("real_*") if p.is_dir()))
def test_shipped_real_timelines_hold_the_rows_the_recorder_writes(run):
    """No two consecutive rollout rows of one worker and step in one state: the shipped runs' rows mean what the
    recorder's mean today (they were regenerated from per-batch rows, which fail this)."""
    tl = Result.load(ROOT / "traces" / "runs" / run).timeline
    keys = tl[["step", "worker", "state"]]
    folds = tl["state"].isin(GENERATION) & (keys == keys.shift()).all(axis=1)
    assert not folds.any(), tl[folds | folds.shift(-1, fill_value=False)]
