"""Tail migration in a real run (real/run/migration.py): the same move as the simulator's on the same lengths, a
worker that left its rollout never chosen as a target, and a run that moves its tail, releases a worker and trains
the moved rows where they finished."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dict_store import DictStore

from real.run.migration import TailMove
from tltsim.control.migration import MigrateKnobs, MigrationControl


@pytest.mark.parametrize("workers,to_engines,seed,moves", [(2, 1, 1, True), (3, 1, 0, True), (4, 2, 0, True),
                                                           (3, 2, 1, True), (2, 1, 0, False)])
def test_the_real_move_is_the_simulators_on_the_same_lengths(workers, to_engines, seed, moves):
    """Workers whose rows all run at once and generate a token a second: each tells its unfinished rows and asks
    whether to stop at every second; the first to see the move due decides it. The step stops, moves onto the
    same targets and deals the same rows to each as the simulator's rule on the rows' finish times
    (MigrationControl.when, targets, assign); or, where the tail is on `to_engines` workers or fewer when due, neither
    moves."""
    rng = np.random.default_rng(seed)
    lengths = [rng.integers(1, 40, size=4) for _ in range(workers)]
    knobs = MigrateKnobs(remaining=0.25, to_engines=to_engines)
    n = 4 * workers
    store = DictStore()
    tails = [TailMove(knobs, store, 0, w, workers, n, lambda: 0.0) for w in range(workers)]
    stopped_at = None
    for t in range(41):
        for w in range(workers):
            tails[w].finished(int(np.sum(lengths[w] > t)))
        if any(tail.stop() for tail in tails):
            stopped_at = t
            break

    control = MigrationControl(knobs)
    at = control.when(np.concatenate(lengths).astype(float), n)
    targets = control.targets({w: int(np.sum(x > at)) for w, x in enumerate(lengths)})
    assert (targets is not None) == moves
    if targets is None:
        assert stopped_at is None and all(tail.move is None and tail.never for tail in tails)
        return
    assert stopped_at == at and [tail.stop() for tail in tails] == [True] * workers
    assert tails[0].move["targets"] == targets
    for w, tail in enumerate(tails):  # each hands over its unfinished rows, (worker, row) as the sim orders them
        tail.publish([[w, r] for r in np.flatnonzero(lengths[w] > at).tolist()])
    moving = [(w, r) for w in range(workers) for r in np.flatnonzero(lengths[w] > at).tolist()]
    where = control.assign(len(moving), targets)
    for w, tail in enumerate(tails):
        assert [tuple(x) for x in tail.assigned()] == [moving[i] for i in where.get(w, [])] if w in targets else \
            tail.released


def test_a_worker_that_left_is_never_a_target_and_one_claimed_first_runs_as_one():
    """Worker 1 told 3 unfinished rows, then finished them all in one engine call and left its rollout; worker 0,
    deciding from the count worker 1 told last, would move onto worker 1: it sees worker 1 gone and moves onto
    itself instead. Had worker 0 claimed worker 1 first, worker 1 leaving learns it is a target."""
    knobs = MigrateKnobs(remaining=0.5, to_engines=1)
    store = DictStore()
    a, b, c = (TailMove(knobs, store, 0, w, 3, 6, lambda: 1.5) for w in range(3))
    a.finished(1), b.finished(3), c.finished(1)
    assert not b.leave() and b.move is None and b.gone_early and not b.released  # gone before any decision
    assert a.stop() and a.move["targets"] == [0] and c.stop() and c.released
    assert b.outcome() and b.released  # the move came: released with the others, as the simulator has it

    store = DictStore()
    a, b, c = (TailMove(knobs, store, 0, w, 3, 6, lambda: 1.5) for w in range(3))
    a.finished(1), b.finished(2), c.finished(0)
    assert a.stop() and a.move == {"targets": [1], "at": 1.5}
    assert b.leave() and b.target  # claimed before it could leave: it runs the tail


def test_a_worker_gone_before_a_move_that_never_comes_is_not_released():
    """Worker 1 finished first; then only worker 0 holds rows (to_engines = 1): no move. Worker 1 waits for the
    step's outcome: every worker's hand-over, no decision; it is not released."""
    store = DictStore()
    a, b = (TailMove(MigrateKnobs(remaining=0.5, to_engines=1), store, 0, w, 2, 4, lambda: 1.0) for w in range(2))
    a.finished(2)
    assert not b.leave() and b.gone_early
    b.publish([])
    assert not a.stop() and a.never  # due, but one worker holds every unfinished row
    a.publish([[0, 1, [5], 0.0]])
    assert not b.outcome() and not b.released and b.columns()["migrated"] == 0


def test_migrate_is_refused_what_a_real_run_cannot_do(tmp_path):
    from real.run.config import RunConfig
    from tltsim.core.errors import TltsimError

    with pytest.raises(TltsimError, match="release = 'drafter' needs a drafter"):
        RunConfig(policy="migrate", knobs={"release": "drafter"}).checked()
    with pytest.raises(TltsimError, match="drop --answers"):
        RunConfig(policy="migrate", answers=str(tmp_path)).checked()
    with pytest.raises(TltsimError, match="remaining = 2"):
        RunConfig(policy="migrate+tlt", knobs={"remaining": 2}).checked()
    assert RunConfig(policy="migrate+tlt", knobs={"to_engines": 1, "threshold": 4}).checked().migration().to_engines == 1


@pytest.mark.slow
def test_a_migrate_run_moves_its_tail_and_trains_it_where_it_finished(tmp_path):
    """2 workers, one group of 2 each, run one row at a time: once half the step's rows are unfinished, the tail moves
    onto one worker, which runs its rows anew and trains them; the other is released and computes its finished rows'
    log-probs before the barrier (next-stage). When the move comes depends on timing (a worker that falls behind may
    find the other done), so the test holds what every timing keeps; and whether it comes: a worker held up by the
    machine while the other finishes both its rows finds the tail on itself alone, which does not move
    (MigrationControl.targets), and the step ends as verl's. validate's replay, on the profile's clock, moves one row
    a worker."""
    from real.run.config import RunConfig
    from real.run.launch import launch
    from tltsim.analysis.validation.validate import validate
    from tltsim.core.records import Result

    launch(RunConfig(policy="migrate", workers=2, steps=2, prompts=2, group=2, max_running=1, max_new_tokens=24,
                     probe=0, speed_probe=0, knobs={"remaining": 0.5, "to_engines": 1}), tmp_path / "run")
    res = Result.load(tmp_path / "run")
    steps = res.steps.set_index("step")
    # a worker whose rows all finished before the move was decided is released with nothing moved (a slow machine);
    # a tail on one worker does not move (nothing released)
    assert steps["migrated"].between(0, 2).all() and steps["released_engines"].isin([0, 1]).all()
    assert (steps.loc[steps["released_engines"] == 0, "migrated"] == 0).all()
    moved = steps[steps["migrated"] > 0]
    assert (moved["migrate_at_s"] > 0).all() and (moved["migrate_at_s"] < moved["rollout_s"]).all()
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert (requests.groupby("step").size() == 4).all() and (requests["response_len"] <= 24).all()
    for step, g in requests.groupby("step"):
        tl = res.timeline[res.timeline["step"] == step]
        rewards = tl[tl["state"] == "reward"].groupby("worker").size()
        if steps.at[step, "released_engines"] == 0:  # no move: every row trained where it ran, no early forwards
            assert sorted(rewards.tolist()) == [1, 1] and (g.groupby("engine").size() == 2).all()
            continue
        released = int(rewards.idxmax())  # the early log-prob forwards are a second reward span
        assert sorted(rewards.tolist()) == [1, 2]
        # the target trains its own two rows and whatever of the released worker's moved
        assert (g["engine"] == 1 - released).sum() in range(2, 2 + steps.at[step, "migrated"] + 1)
        mine = tl[tl["worker"] == released]
        reward = mine[mine["state"] == "reward"]["t_start"]
        assert reward.min() < mine[mine["state"] == "train"]["t_start"].min()
        assert reward.min() < steps.at[step, "t_start"] + steps.at[step, "rollout_s"]  # before the barrier
    v = validate([tmp_path / "run"], Path(__file__).resolve().parents[2] / "traces/profiles/real_cpu_profile.csv")
    assert next(iter(v.predicted.values())).steps["migrated"].tolist() == [2, 2]
