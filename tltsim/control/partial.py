"""Partial rollout's decisions (APRIL's over-provisioning and recycling): what a step launches, when it stops,
what becomes of its unfinished rows. The simulator's `partial` policy (tltsim/policies/partial.py, which describes
the method and its defaults) and a real executor drive the same `PartialControl`:

    c = PartialControl(PartialKnobs())
    fresh = c.begin_step(need)            need: the groups the step trains on -> fresh groups to draw
    rows = c.rows(fresh_rows)             the step's rows: the carried groups first, then the fresh ones
    ... run them; stop every engine once `need` groups have finished (tltsim.control.groups: quota_stop, GroupQuota)
    dropped = c.end_step(step, rows, done, generated)   carry or drop the unfinished rows

`launched` and `carried_groups` are the step's record. What the next step resumes (`carry`: each unfinished row
with its tokens so far and the policy version of its first tokens) is the state a resume needs
(`state_dict`): the rows it carried were decided by timing, which a rerun would not reproduce.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tltsim.control.groups import concat, groups_in, object_column, rows_from_state, rows_state, take_rows
from tltsim.control.knobs import knob


@dataclass(frozen=True)
class PartialKnobs:
    ratio: float = knob(2.0, lo=1.0, hi=16.0)  # groups launched per group trained on (APRIL over-provisioning)
    unfinished: str = knob("resume", choices=("resume", "drop"))  # carry unfinished groups on, or throw them away


def groups_to_launch(ratio: float, need: int, carried: int) -> tuple[int, int]:
    """A step that trains on `need` groups, with `carried` groups carried from the last: (groups it launches, fresh
    ones among them). It launches `ratio` x `need` (at least `need`), the carried groups first, and never fewer
    than it carries."""
    launch = max(need, math.ceil(ratio * need - 1e-9))
    return max(launch, carried), max(0, launch - carried)


def carry_on(step: int, rows: dict, left: np.ndarray, generated: np.ndarray) -> dict:
    """The rows `left` picks among step `step`'s `rows`, as the next step resumes them, having generated
    `generated[left]` tokens this step: those tokens join the prompt (a resumed row is re-prefilled) and leave the
    response, and are counted in `carried`; a row keeps the policy version (`origin`) of its first tokens, and one
    with none yet gets them from the next step at the earliest. Single-turn columns; a trajectory's turn lists are
    `rest_of_trajectories`'."""
    carry = take_rows(rows, left)
    g = generated[left]
    carry["origin"] = np.where(carry["carried"] + g == 0, step + 1, carry["origin"])
    carry["prompt_len"] = carry["prompt_len"] + g
    carry["response_len"] = carry["response_len"] - g
    carry["carried"] = carry["carried"] + g
    return carry


def rest_of_trajectories(rows: dict, mask: np.ndarray, seen: dict) -> dict:
    """What is left of the trajectories `mask` picks among a step's rows (`rows`, its turn list columns) when their
    rollout stopped. `seen` holds, for each row that ran, what its turns had done by the stop: (tokens each turn
    had generated, when each was admitted, when each finished, NaN where not by then; the stop time); a row not in
    it had run none. Per row: the turn lists from the turn it was in (less the tokens it generated of it);
    `tool_done`, the tokens of the tool answers it had called for by then (they join its context: a tool does not
    depend on the policy's weights); and `tool_pending_s`, the seconds its call in flight still had to run (the
    next rollout waits for them). With the turns' kept tokens (`turn_kept_len`), the rest keeps its own, the turn it
    was in less what it generated of it, and `dropped_done` is the tokens its finished turns generated and left out
    of the context (they leave the resumed row's prompt). A trajectory whose turns were all generated is left one turn of no tokens."""
    cols = ("turn_response_len", "tool_latency_s", "tool_tokens", *(["turn_kept_len"] if "turn_kept_len" in rows
                                                                    else []))
    out = {c: [] for c in cols}
    done, dropped, pending = [], [], []
    for r in np.flatnonzero(mask):
        gen, lat, tok = (list(rows[c][r]) for c in ("turn_response_len", "tool_latency_s", "tool_tokens"))
        kept = list(rows["turn_kept_len"][r]) if "turn_kept_len" in rows else gen
        none = np.full(len(gen), np.nan)
        g, admitted, finished, stop = seen.get(int(r), (np.zeros(len(gen), np.int64), none, none, np.inf))
        j = int(np.sum(np.cumprod(g >= np.asarray(gen))))  # turns generated whole, from the first
        if j == len(gen):
            rest = ([0], [None], [0], [0])
        else:
            rest = ([gen[j] - int(g[j])] + gen[j + 1:], lat[j:], tok[j:], [kept[j] - int(g[j])] + kept[j + 1:])
        waits = 0 < j < len(gen) and np.isnan(admitted[j])  # its turn j waits on the call after turn j - 1
        pending.append(max(0.0, finished[j - 1] + lat[j - 1] - stop) if waits else 0.0)
        for c, v in zip(out, rest):
            out[c].append(v)
        done.append(int(sum(tok[:j])))
        dropped.append(int(sum(gen[:j]) - sum(kept[:j])))
    return {**{c: object_column(v) for c, v in out.items()}, "tool_done": np.array(done, np.int64),
            "dropped_done": np.array(dropped, np.int64),
            "tool_pending_s": np.array(pending, float)}


class PartialControl:
    """One run's partial-rollout decisions, step by step (module docstring); `carry` is what the next step resumes."""

    def __init__(self, knobs: PartialKnobs):
        self.k = knobs
        self.carry: dict = {}  # the unfinished rows the next step resumes (columns as the step's rows)
        self.need = 0  # groups the step in progress trains on (its quota)
        self.launched = 0  # groups it launched

    def begin_step(self, need: int) -> int:
        """A step that trains on `need` groups begins: the fresh groups to draw (after the carried ones)."""
        self.need = need
        self.launched, fresh = groups_to_launch(self.k.ratio, need, self.carried_groups)
        return fresh

    def rows(self, fresh: dict) -> dict:
        """The step's rows: the carried rows first, then the `fresh` ones drawn (begin_step's count of groups);
        the carry is handed over."""
        out = concat([self.carry, fresh])
        self.carry = {}
        return out

    def end_step(self, step: int, rows: dict, done: np.ndarray, generated: np.ndarray, trajectories=None) -> int:
        """Step `step` stopped with its rows' `done` mask (rows in finished groups: trained on) and the tokens each
        had `generated`: the unfinished rows are carried (`unfinished = "resume"`) or thrown away. Returns the
        responses whose tokens were thrown away. Multi-turn rows: `trajectories` is `rest_of_trajectories`'s `seen`
        for them."""
        left = ~done
        if self.k.unfinished != "resume":
            return int(np.sum(left & (generated > 0)))  # nothing is ever carried in this mode
        carry = carry_on(step, rows, left, generated)
        if "turn_response_len" in rows:  # trajectories go on from the turn they were in, after the call in flight
            rest = rest_of_trajectories(rows, left, trajectories or {})
            tool_done, dropped = rest.pop("tool_done"), rest.pop("dropped_done")
            carry.update(rest)
            carry["prompt_len"] = carry["prompt_len"] + tool_done - dropped
            carry["tool_total"] = carry["tool_total"] - tool_done
        self.carry = carry
        return 0

    @property
    def carried_groups(self) -> int:
        return groups_in(self.carry) if self.carry else 0

    def state_dict(self) -> dict:
        """The carried rows, as plain data."""
        return {"carry": rows_state(self.carry)}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""
        self.carry = rows_from_state(state["carry"])
