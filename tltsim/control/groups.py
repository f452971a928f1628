"""A step's rows as column arrays, grouped by prompt: what the policies that launch more groups than a step
trains on (partial rollout, tail batching) decide over.

Rows are a dict of equal-length numpy columns (`step`, `prompt_id`, `prompt_len`, `response_len`, and
optionally `group`: a prompt group's id, `origin`: the policy version of a row's first tokens, `carried`: its
tokens generated in earlier steps); an empty dict is no rows.

    streamed(policy)                         whether a policy's steps draw from the prompt stream (STREAMED)
    groups_in(rows)                          prompt groups among the rows
    concat([a, b]), take_rows(rows, mask)    rows joined, rows picked
    needs_engine(response_len, aborted)      the rows an engine must run (the others count as finished at 0)
    group_shares(group, engines)             each engine's rows: contiguous chunks of whole groups (verl's split)
    rewards_disagree(rows)                   the rows whose group's rewards differ (GRPO trains on those alone)
    quota_stop(group, finish, target)        when a step stops: once `target` groups have finished (offline)
    GroupQuota(group, target)                the same rule told of rows as they finish (online)
    rows_state(rows), rows_from_state(s)     rows as plain data (a checkpoint) and back
    object_column(lists)                     a column whose cells are lists
"""
from __future__ import annotations

import numpy as np

STREAMED = ("partial", "tail-batching")  # the policies whose steps draw prompt groups from a stream (their +tlt too)


def streamed(policy: str) -> bool:
    """Whether `policy`'s steps draw their prompt groups from a stream (STREAMED, alone or +tlt)."""
    return policy.removesuffix("+tlt") in STREAMED


def groups_in(rows: dict) -> int:
    """Prompt groups among `rows` (by `group`, else by `prompt_id`)."""
    return len(np.unique(rows["group"])) if "group" in rows else len(np.unique(rows["prompt_id"]))


def concat(parts: list[dict]) -> dict:
    """The rows of every part, in order (empty parts skipped; {} when none has rows)."""
    parts = [p for p in parts if p and len(p["step"])]
    if not parts:
        return {}
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def take_rows(rows: dict, mask: np.ndarray) -> dict:
    """The rows `mask` (a boolean mask or indices) picks."""
    return {c: v[mask] for c, v in rows.items()}


def needs_engine(response_len: np.ndarray, aborted: np.ndarray | None = None) -> np.ndarray:
    """Mask of the rows an engine runs: those with tokens left to generate, and the trace's aborted rows (admitted,
    then aborted). A row with nothing left (finished in an earlier step) counts as finished at time 0."""
    return (response_len > 0) | (aborted if aborted is not None else False)


def group_shares(group: np.ndarray, engines: int) -> list[np.ndarray]:
    """Each of `engines` engines' rows (indices, in admission order): the rows in order, cut into contiguous chunks
    of whole groups (a group's rows are adjacent), as even in groups as they divide (verl's split)."""
    n = len(group)
    group_starts = np.flatnonzero(np.concatenate([[True], np.diff(group) != 0])) if n else np.array([], np.int64)
    chunks = np.array_split(np.arange(len(group_starts)), engines)
    edges = [group_starts[c[0]] if len(c) else n for c in chunks[1:]]
    return [np.arange(a, b) for a, b in zip([0, *edges], [*edges, n])]


def quota_stop(group: np.ndarray, finish: np.ndarray, target: int) -> tuple[float, np.ndarray]:
    """When a step stops that stops once `target` prompt groups have finished (a group finishes with its last row),
    given each row's `group` and finish time: (the stop time, mask of the rows in groups finished by then: every
    group finished at the stop time, which may be more than `target` on a tie). No rows or a target of 0: stop at 0."""
    n = len(group)
    _, inverse = np.unique(group, return_inverse=True)
    group_done = np.zeros(inverse.max() + 1 if n else 0)
    np.maximum.at(group_done, inverse, finish)
    stop = float(np.sort(group_done)[min(target, len(group_done)) - 1]) if len(group_done) and target else 0.0
    return stop, group_done[inverse] <= stop


class GroupQuota:
    """`quota_stop`'s rule for an executor told of rows as they finish: `finished(rows)` for the rows that finished
    at one moment (all of them at once on a tie) says whether the step stops now; `done` is then the mask of rows in
    finished groups. Rows that need no engine (`needs_engine`) are told at the start, as finished at 0."""

    def __init__(self, group: np.ndarray, target: int):
        self.ids, self._inverse = np.unique(np.asarray(group), return_inverse=True)
        self._left = np.bincount(self._inverse, minlength=len(self.ids))  # rows of each group not yet finished
        self.target = min(int(target), len(self.ids))
        self.stopped = self.target == 0  # nothing to wait for

    @property
    def finished_groups(self) -> int:
        return int(np.sum(self._left == 0))

    @property
    def done(self) -> np.ndarray:
        """Mask of the rows whose group has finished."""
        return self._left[self._inverse] == 0

    def finished(self, rows) -> bool:
        """Rows (indices) finished at the same moment: whether the step stops now (every engine stops)."""
        np.subtract.at(self._left, self._inverse[np.asarray(rows, dtype=np.int64)], 1)
        if not self.stopped and self.finished_groups >= self.target:
            self.stopped = True
        return self.stopped


def object_column(lists: list) -> np.ndarray:
    """A column of lists: an object array holding each list whole (never a 2-d array, even when they are as long)."""
    return np.array(list(lists) + [None], dtype=object)[:-1]


def rows_state(rows: dict) -> dict:
    """`rows` as plain data: per column its dtype and values as lists (an object column of lists stays one)."""
    return {c: {"dtype": str(v.dtype), "values": v.tolist()} for c, v in rows.items()}


def rows_from_state(state: dict) -> dict:
    """The rows `rows_state` wrote."""
    out = {}
    for c, s in state.items():
        if s["dtype"] == "object":  # a column of lists: an object array of them, never a 2-d array
            out[c] = object_column(s["values"])
        else:
            out[c] = np.asarray(s["values"], dtype=s["dtype"]).reshape(-1)
    return out


def rewards_disagree(rows: dict) -> np.ndarray:
    """Per row: whether its prompt group's rewards differ (a group whose rewards all agree has a GRPO advantage, and
    so a gradient, of zero: rl.skip_zero_advantage neither scores nor trains it)."""
    _, group = np.unique(rows["group"] if "group" in rows else rows["prompt_id"], return_inverse=True)
    reward = np.asarray(rows["reward"], dtype=float)
    low, high = np.full(group.max(initial=-1) + 1, np.inf), np.full(group.max(initial=-1) + 1, -np.inf)
    np.minimum.at(low, group, reward)
    np.maximum.at(high, group, reward)
    return high[group] > low[group]
