"""Tail migration in a real run (`--policy migrate`, `migrate+tlt`): the real executor's glue around
tltsim.control.migration's `MigrationControl`, which decides for it as it does for the simulator's `migrate` policy
(when a step's tail moves, onto which workers, which rows go where). Torch-free.

    tail = TailMove(knobs, store, step, rank, world, n, now)     n: the step's responses, every worker's
    ... each worker rolls out its rows (verl's blocks), telling `tail.finished(unfinished)` before every engine
        call, and stops once `tail.stop()`: the step's unfinished rows have fallen to `remaining` x n while more
        than `to_engines` workers hold some (the first worker to see it decides the targets, the busiest, from
        every worker's count in the store, and writes them there; every worker then stops at once)
    tail.leave()                       a worker whose rows all finished first: whether it is a target after all
    tail.outcome()                     such a worker, not a target: waits for the move (or for none to come)
    tail.publish(rows)                 every worker: its unfinished rows, in its engine's order (none once done)
    mine = tail.assigned()             a target: the rows it runs anew (round-robin, MigrationControl.assign)

A worker decides from counts each worker wrote before its latest engine call, so one whose last rows finished in
that call may be chosen although it has left its rollout. Each target is claimed in the store before the decision
is written, and a worker leaving claims itself first: the decider chooses again without one that has left, and one
that was claimed before it left runs its rows as a target.

A moved row runs anew on its target, its tokens so far at the end of its prompt (re-prefilled there, as the
simulator charges it: the target's own unfinished rows move too, onto a fresh engine), and is trained there. The
other workers are released at the move and do what `release` says: wait (idle), compute the old policy's log-probs of
the responses they finished (next-stage: the reward stage's forwards, done before the barrier), or train the drafter
(drafter, migrate+tlt: they are done, so the spot trainer may take them). When the move came depends on timing, so
it is recorded (steps columns migrate_at_s, migrated, released_engines); nothing is carried across steps.
"""
from __future__ import annotations

import json
import time

from tltsim.control.migration import MigrateKnobs, MigrationControl


class TailMove:
    """One step's migration, as one worker sees it (module docstring)."""

    def __init__(self, knobs: MigrateKnobs, store, step: int, rank: int, world: int, rows: int, now):
        self.control = MigrationControl(knobs)
        self.store, self.rank, self.world, self.n, self.now = store, rank, world, rows, now
        self.key = f"{step}/migrate"  # the move once decided: its targets and when (`now`)
        self.left_keys = [f"{step}/unfinished/{w}" for w in range(world)]  # each worker's unfinished rows
        self.claims = [f"{step}/claim/{w}" for w in range(world)]  # "target" (by a decider) or "left" (by itself)
        self.moving_keys = [f"{step}/moving/{w}" for w in range(world)]  # each worker's rows to move
        self.move: dict | None = None  # {"targets": [...], "at": seconds}
        self.never = False  # due, but on `to_engines` workers or fewer: the step runs to its end where it is
        self.gone_early = False  # this worker's rows all finished before any move was decided

    def finished(self, unfinished: int) -> None:
        """This worker's rows not yet finished (running, or waiting for a slot), before an engine call."""
        self.store.set(self.left_keys[self.rank], str(unfinished))

    def stop(self) -> bool:
        """Whether this worker stops now for the move: a worker has decided it, or this one sees it due and does."""
        if self.move is not None or self._read():
            return True
        if self.never:
            return False
        left = {w: int(self.store.get(k)) for w, k in enumerate(self.left_keys) if self.store.check([k])}
        if len(left) < self.world or not self.control.due(sum(left.values()), self.n):
            return False
        while (targets := self.control.targets(left)) is not None:
            gone = [t for t in targets if self._claim(t, "target") == "left"]
            if not gone:
                decided = self.store.compare_set(self.key, "", json.dumps({"targets": targets, "at": self.now()}))
                self.move = json.loads(decided)  # the first decision stands, this one's or another's
                return True
            left.update({t: 0 for t in gone})
        self.never = True
        return False

    def leave(self) -> bool:
        """This worker's rows have all finished, no move seen: it claims itself as gone, unless a decider claimed
        it as a target first, in which case it waits for the decision. Whether it is a target."""
        self.finished(0)
        if self._claim(self.rank, "left") == "left":
            self.gone_early = not self._read()  # else a move decided before it left, without it (released then)
            return False
        self.store.wait([self.key])
        self._read()
        return self.rank in self.move["targets"]

    def publish(self, rows: list) -> None:
        """This worker's unfinished rows (JSON-able), in its engine's order: what it hands over at a move."""
        self.store.set(self.moving_keys[self.rank], json.dumps(rows))

    def assigned(self) -> list:
        """The moving rows this worker runs anew: every worker's unfinished rows, in worker order, dealt round-robin
        over the targets (waits for every worker's `publish`)."""
        self.store.wait(self.moving_keys)
        moving = [row for key in self.moving_keys for row in json.loads(self.store.get(key))]
        where = self.control.assign(len(moving), self.move["targets"])
        return [moving[i] for i in where.get(self.rank, [])]

    def columns(self) -> dict:
        """The step's record (every worker's rows published): the rows moved, when (seconds into the rollout; NaN
        with no move) and the workers released."""
        if not (self.move or self._read()):
            return {"migrated": 0, "migrate_at_s": float("nan"), "released_engines": 0}
        self.store.wait(self.moving_keys)
        moved = sum(len(json.loads(self.store.get(key))) for key in self.moving_keys)
        return {"migrated": moved, "migrate_at_s": self.move["at"],
                "released_engines": self.world - len(self.move["targets"])}

    def outcome(self) -> bool:
        """A worker whose rows all finished before any move was decided: wait until one is (this worker is then
        released with the others, as the simulator releases every engine but the targets at the move) or until
        every worker has handed its rows over with none decided (no move this step). Whether a move came."""
        while not self._read():
            if self.store.check(self.moving_keys):
                return self._read()
            time.sleep(0.002)
        return True

    @property
    def released(self) -> bool:
        """Whether this worker was released at the move: every worker but the targets, one whose rows all finished
        before it included."""
        return self.move is not None and self.rank not in self.move["targets"]

    @property
    def target(self) -> bool:
        return self.move is not None and self.rank in self.move["targets"]

    def _read(self) -> bool:
        if self.move is None and self.store.check([self.key]):
            self.move = json.loads(self.store.get(self.key))
        return self.move is not None

    def _claim(self, worker: int, as_: str) -> str:
        """Claim `worker` as a target or as gone; the claim that came first."""
        return self.store.compare_set(self.claims[worker], "", as_).decode()
