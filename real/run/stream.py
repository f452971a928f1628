"""The real executor of the policies whose steps draw prompt groups from a stream and stop at a quota: partial
rollout (`--policy partial`, `partial+tlt`: tltsim.control.partial's `PartialControl` decides) and tail batching
(`tail-batching`, `tail-batching+tlt`: tltsim.control.tail's `TailControl`), the controls the simulator's policies
drive too (what a step launches, when it stops, what is carried or parked). Torch-free.

    steps = PartialSteps(knobs, prompts, group, max_new_tokens)      or TailSteps(...)
    rows = steps.begin(step, prompt_len)         the step's rows, as the control orders them
    share, runs = worker_rows(rows, rank, world) a worker's rows (contiguous whole groups), those its engine runs
    quota = steps.quota(store, step, rank, world, rows, share)     None: every row runs to its end (a long round)
    ... each worker runs its rows, telling `quota.finished(rows)`, until `quota.stop()` (every worker's view)
    finished, new, extra = gathered(rows, parts)   every worker's rows' state (all_gather)
    done, columns = steps.end(step, rows, finished, new)

The prompt stream: the run's prompt groups in order, as a data loader serves them (real.run.problems.stream_problem),
so a run that draws `prompts` groups a step poses verl's prompts. A row's `prompt_id` and `group` are its group's k,
its `step` the step that launched it.

A real row's `response_len` is what it may still generate (its budget: max_new_tokens less its tokens so far), and
a finished row's is what it generated: the tokens left, as the simulator's `response_len` is, for a row whose
length no one knows in advance. `tokens` (an object column) holds each row's tokens so far: a partial step carries
an unfinished row with them, and the next step runs it again with them appended to its prompt (re-prefilled under
the new weights); a tail-batching step parks an unfinished row's prompt and throws its tokens away, and a long
round runs it anew. Which rows finished before every engine stopped depends on timing, so the carried and parked
rows (in `state_dict`, the run's checkpoint) are the record a resumed run follows.
"""
from __future__ import annotations

import json

import numpy as np

from tltsim.control.groups import GroupQuota, group_shares, groups_in, object_column
from tltsim.control.partial import PartialControl, PartialKnobs
from tltsim.control.tail import TailBatchingKnobs, TailControl
from tltsim.core.off_policy import off_policy_columns


class StreamSteps:
    """One run's steps of a policy that draws from the prompt stream (module docstring): the stream's position and
    the policy's control, `control`, whose state is the checkpoint's."""

    def __init__(self, control, prompts: int, group: int, max_new_tokens: int):
        self.control = control
        self.prompts, self.group, self.max_new_tokens = prompts, group, max_new_tokens
        self.served = 0  # prompt groups drawn from the stream so far; also the next group's k
        self.drawn = 0  # of them, drawn by the step in progress

    @property
    def need(self) -> int:
        """Groups the step in progress trains on (its quota): `prompts`, as verl's step."""
        return self.control.need

    def begin(self, step: int, prompt_len) -> dict:
        """Step `step`'s rows: the fresh groups the control asks for, drawn from the stream (`prompt_len(k)`: the
        token length of group k's prompt), after the carried or parked ones it runs."""
        fresh = self.drawn = self.control.begin_step(self.prompts)
        k = np.repeat(np.arange(self.served, self.served + fresh), self.group)
        self.served += fresh
        n = len(k)
        lens = {g: prompt_len(g) for g in np.unique(k).tolist()}
        rows = {"step": np.full(n, step), "prompt_id": k, "sample": np.tile(np.arange(self.group), fresh), "group": k,
                "prompt_len": np.array([lens[g] for g in k.tolist()], np.int64),
                "response_len": np.full(n, self.max_new_tokens, np.int64), "origin": np.full(n, step),
                "carried": np.zeros(n, np.int64), "tokens": object_column([[] for _ in range(n)])}
        return self._rows(step, rows if n else {})

    def quota(self, store, step: int, rank: int, world: int, rows: dict, share: np.ndarray) -> "StoreQuota":
        """Worker `rank`'s view of the step's quota, told of its rows that finished in an earlier step."""
        quota = StoreQuota(store, step, rank, world, rows["group"], self.need)
        quota.finished(share[rows["response_len"][share] == 0])
        return quota

    def end(self, step: int, rows: dict, finished: np.ndarray, new_tokens: list[list[int]]) -> tuple[np.ndarray, dict]:
        """Step `step` stopped: per row of `rows` whether it has `finished` (this step or before) and the tokens it
        generated this step. The rows in finished groups are trained on; the control decides the rest. Returns (the
        mask of trained rows, the step's columns: the control's, `drawn_groups` (fresh from the stream) and the
        off-policy ones, tltsim.core.off_policy). `rows` is updated: `tokens` holds each row's tokens so far, and a
        finished row's `response_len` is the tokens it generated this step."""
        generated = np.array([len(t) for t in new_tokens], np.int64)
        quota = GroupQuota(rows["group"], len(rows["group"]))
        quota.finished(np.flatnonzero(finished))
        rows["tokens"] = object_column([list(a) + list(b) for a, b in zip(rows["tokens"], new_tokens)])
        rows["response_len"] = np.where(finished, generated, rows["response_len"])
        dropped, columns = self._end(step, rows, quota.done, generated)
        return quota.done, {**columns, "drawn_groups": self.drawn, **off_policy_columns(step, rows, quota.done, dropped)}

    def state_dict(self) -> dict:
        return {"served": self.served, **self.control.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.served = int(state["served"])
        self.control.load_state_dict(state)


class PartialSteps(StreamSteps):
    """Partial rollout's steps: carried rows first, every step stopped at its quota, unfinished rows carried."""

    def __init__(self, knobs: PartialKnobs, prompts: int, group: int, max_new_tokens: int):
        super().__init__(PartialControl(knobs), prompts, group, max_new_tokens)

    def _rows(self, step: int, fresh: dict) -> dict:
        return self.control.rows(fresh)

    def _end(self, step: int, rows: dict, done: np.ndarray, generated: np.ndarray) -> tuple[int, dict]:
        dropped = self.control.end_step(step, rows, done, generated)
        return dropped, {"launched_groups": self.control.launched, "carried_groups": self.control.carried_groups}


class TailSteps(StreamSteps):
    """Tail batching's steps: a short round stopped at its quota, its unfinished rows' prompts parked (their tokens
    thrown away); a long round runs the oldest parked groups anew, and fresh ones, each to its end."""

    def __init__(self, knobs: TailBatchingKnobs, prompts: int, group: int, max_new_tokens: int):
        super().__init__(TailControl(knobs), prompts, group, max_new_tokens)

    def quota(self, store, step: int, rank: int, world: int, rows: dict, share: np.ndarray) -> "StoreQuota | None":
        return None if self.control.long else super().quota(store, step, rank, world, rows, share)

    def _rows(self, step: int, fresh: dict) -> dict:
        rows = self.control.rows(step, fresh)
        if self.control.long:  # parked rows start again: nothing of their aborted tokens is kept
            n = len(rows["step"])
            rows.update(tokens=object_column([[] for _ in range(n)]),
                        response_len=np.full(n, self.max_new_tokens, np.int64), carried=np.zeros(n, np.int64))
        return rows

    def _end(self, step: int, rows: dict, done: np.ndarray, generated: np.ndarray) -> tuple[int, dict]:
        long = self.control.long
        dropped = self.control.end_step(rows, None if long else done, generated)
        return dropped, {"long_round": long, "launched_groups": groups_in(rows),
                         "parked_groups": self.control.parked_groups}


def worker_rows(rows: dict, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    """Worker `rank`'s rows of the step (indices: its contiguous chunk of whole groups, group_shares) and those among
    them its engine runs (the others finished in an earlier step, their group carried for a sibling)."""
    share = group_shares(rows["group"], world)[rank]
    return share, share[rows["response_len"][share] > 0]


def gathered(rows: dict, parts: list[list[tuple]]) -> tuple[np.ndarray, list[list[int]], dict]:
    """Every worker's account of its rows (`parts`: per worker, (row index, finished, tokens generated this step,
    *extra) per row its engine ran) as the step's: (finished mask, a row that ran in no engine finished earlier;
    each row's tokens this step; row index -> extra)."""
    finished, new, extra = rows["response_len"] == 0, [[] for _ in rows["step"]], {}
    for i, ended, tokens, *more in (row for part in parts for row in part):
        finished[i], new[i], extra[i] = ended, list(tokens), tuple(more)
    return finished, new, extra


class StoreQuota:
    """tltsim.control.groups.GroupQuota over every worker's rows of a step: each worker tells the others which of
    the step's rows it has finished (its key in the run's store, rewritten as it finishes more) and reads theirs.
    `stop()` is this worker's view: whether `need` groups have finished; every worker stops once its view says so,
    so an engine may finish a few more rows than the quota needed (the step's record says which)."""

    def __init__(self, store, step: int, rank: int, world: int, group: np.ndarray, need: int):
        self.store, self.rank, self.world = store, rank, world
        self.keys = [f"{step}/finished/{w}" for w in range(world)]
        self.quota = GroupQuota(group, need)
        self.seen = [set() for _ in range(world)]  # rows of each worker fed to the quota
        self.mine: set[int] = set()

    def finished(self, rows) -> None:
        """This worker's rows (indices into the step's rows) that have finished, any already told among them."""
        new = set(map(int, rows)) - self.mine
        if new:
            self.mine |= new
            self.store.set(self.keys[self.rank], json.dumps(sorted(self.mine)))

    def stop(self) -> bool:
        """Whether every engine stops now: `need` groups have finished, as far as this worker has heard."""
        for w in range(self.world):
            if w == self.rank:
                rows = self.mine
            elif self.store.check([self.keys[w]]):
                rows = set(json.loads(self.store.get(self.keys[w])))
            else:
                continue
            new = rows - self.seen[w]
            if new:
                self.seen[w] |= new
                self.quota.finished(sorted(new))
        return self.quota.stopped

