"""Partial rollout in a real run (`--policy partial`, `partial+tlt`): the real executor's glue around
tltsim.control.partial's `PartialControl`, which decides for it as it does for the simulator's `partial` policy
(what a step launches, when it stops, what is carried). Torch-free.

    steps = PartialSteps(knobs, prompts, group, max_new_tokens)
    rows = steps.begin(step, prompt_len)         the step's rows: the carried groups first, then fresh ones
    share, runs = worker_rows(rows, rank, world) a worker's rows (contiguous whole groups), those its engine runs
    quota = steps.quota(store, step, rank, world, rows, share)
    ... each worker runs its rows, telling `quota.finished(rows)`, until `quota.stop()` (every worker's view)
    finished, new, extra = gathered(rows, parts)   every worker's rows' state (all_gather)
    done, columns = steps.end(step, rows, finished, new)

The prompt stream: the run's prompt groups in order, as a data loader serves them; group k is problem k % prompts
of `step_problems(..., k // prompts, ...)` (real/run/worker.py), so a run that launches `prompts` groups a step
poses verl's prompts. A row's `prompt_id` and `group` are its group's k, its `step` the step that launched it.

A real row's `response_len` is what it may still generate (its budget: max_new_tokens less its tokens so far),
and 0 once it has finished: what the simulator's `response_len` is (the tokens left) for a row whose length no one
knows in advance. `tokens` (an object column) holds each row's tokens so far; a carried row runs again with them
appended to its prompt (re-prefilled under the new weights) and goes on from there. Which rows finished before
every engine stopped depends on timing, so the carry (in `state_dict`, the run's checkpoint) is the record a
resumed run follows.
"""
from __future__ import annotations

import json

import numpy as np

from tltsim.control.groups import GroupQuota, group_shares
from tltsim.control.partial import PartialControl, PartialKnobs
from tltsim.core.off_policy import off_policy_columns


class PartialSteps:
    """One run's partial-rollout steps (module docstring): the prompt stream's position and the control's carry."""

    def __init__(self, knobs: PartialKnobs, prompts: int, group: int, max_new_tokens: int):
        self.control = PartialControl(knobs)
        self.prompts, self.group, self.max_new_tokens = prompts, group, max_new_tokens
        self.served = 0  # prompt groups drawn from the stream so far; also the next group's k

    @property
    def need(self) -> int:
        """Groups the step in progress trains on (its quota): `prompts`, as verl's step."""
        return self.control.need

    def begin(self, step: int, prompt_len) -> dict:
        """Step `step`'s rows: the carried ones first, then the fresh groups PartialControl asks for, drawn from the
        stream (`prompt_len(k)`: the token length of group k's prompt)."""
        fresh = self.control.begin_step(self.prompts)
        k = np.repeat(np.arange(self.served, self.served + fresh), self.group)
        self.served += fresh
        n = len(k)
        lens = {g: prompt_len(g) for g in np.unique(k).tolist()}
        rows = {"step": np.full(n, step), "prompt_id": k, "sample": np.tile(np.arange(self.group), fresh), "group": k,
                "prompt_len": np.array([lens[g] for g in k.tolist()], np.int64),
                "response_len": np.full(n, self.max_new_tokens, np.int64), "origin": np.full(n, step),
                "carried": np.zeros(n, np.int64), "tokens": _lists([[] for _ in range(n)])}
        return self.control.rows(rows if n else {})

    def quota(self, store, step: int, rank: int, world: int, rows: dict, share: np.ndarray) -> "StoreQuota":
        """Worker `rank`'s view of the step's quota, told of its rows that finished in an earlier step."""
        quota = StoreQuota(store, step, rank, world, rows["group"], self.need)
        quota.finished(share[rows["response_len"][share] == 0])
        return quota

    def end(self, step: int, rows: dict, finished: np.ndarray, new_tokens: list[list[int]]) -> tuple[np.ndarray, dict]:
        """Step `step` stopped: per row of `rows` whether it has `finished` (this step or before) and the tokens it
        generated this step. The rows in finished groups are trained on; the rest are carried or dropped
        (PartialControl.end_step). Returns (the mask of trained rows, the step's columns: launched and carried groups,
        and the off-policy ones, tltsim.core.off_policy). `rows` is updated: `tokens` holds each row's tokens so far,
        and a finished row's `response_len` is the tokens it generated this step (its carry's is then 0)."""
        generated = np.array([len(t) for t in new_tokens], np.int64)
        quota = GroupQuota(rows["group"], len(rows["group"]))
        quota.finished(np.flatnonzero(finished))
        rows["tokens"] = _lists([list(a) + list(b) for a, b in zip(rows["tokens"], new_tokens)])
        rows["response_len"] = np.where(finished, generated, rows["response_len"])
        dropped = self.control.end_step(step, rows, quota.done, generated)
        return quota.done, {"launched_groups": self.control.launched, "carried_groups": self.control.carried_groups,
                            **off_policy_columns(step, rows, quota.done, dropped)}

    def state_dict(self) -> dict:
        return {"served": self.served, **self.control.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.served = int(state["served"])
        self.control.load_state_dict(state)


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


def _lists(values: list[list[int]]) -> np.ndarray:
    """An object column of lists (never a 2-d array)."""
    return np.array(values + [None], dtype=object)[:-1]
