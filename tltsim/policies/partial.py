"""Over-provisioned partial rollout (APRIL; Kimi k1.5's partial rollouts).

Each step launches `ratio` x the prompt groups the step trains on (the trace
step's group count), unfinished groups carried from the last step first, then
fresh groups from the prompt stream (tltsim.policies.groups). When as many groups
as the step trains on have finished, every engine stops. The finished groups are
trained on; each unfinished group is either carried into the next step and resumed
there, keeping the tokens generated so far (`unfinished = "resume"`, APRIL's
recycling), or thrown away (`"drop"`).

A resumed response is re-prefilled (its prompt and its tokens so far) when it is
admitted again, because the weights changed. A multi-turn trajectory goes on from the turn it was in
(rest_of_trajectories, below): the tool answers it had called for join its context. Its earliest tokens come from the
policy version of the step that started it: that is its staleness when it is
trained (steps columns `staleness_mean`, `staleness_max`).

Defaults: APRIL (Zhou et al., 2025, "APRIL: Active Partial Rollouts in RL to
tame long-tail generation") over-provisions the rollout batch and recycles
incomplete responses; `ratio = 2.0` (twice the requests needed) is our choice
inside the over-provisioning range it studies, `unfinished = "resume"` is its
recycling. Kimi k1.5 (2025) resumes long responses in later iterations the same way.
With ratio 1.0 every launched group must finish: the step is exactly verl's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tltsim.sim.hooks import StepOutcome
from tltsim.policies.groups import concat, groups_in, rollout_until_groups, take_rows
from tltsim.control.knobs import knob
from tltsim.policies.knobs import KnobbedPolicy
from tltsim.sim.prompts import PromptStream


@dataclass(frozen=True)
class PartialKnobs:
    ratio: float = knob(2.0, lo=1.0, hi=16.0)  # groups launched per group trained on (APRIL over-provisioning)
    unfinished: str = knob("resume", choices=("resume", "drop"))  # carry unfinished groups on, or throw them away


class PartialRollout(KnobbedPolicy):
    name = "partial"
    Knobs = PartialKnobs

    def bind(self, sim) -> None:
        super().bind(sim)
        self.stream = PromptStream(sim.trace.df)
        self.carry: dict = {}

    def prepare_step(self, step: int, df: dict) -> dict:
        self.need = groups_in(df)
        launch = max(self.need, math.ceil(self.k.ratio * self.need - 1e-9))
        carried = groups_in(self.carry) if self.carry else 0
        out = concat([self.carry, self.stream.take(max(0, launch - carried), step)])
        self.launched = max(launch, carried)
        self.carry = {}
        return out

    def rollout(self, step, df, shares, run):
        sr, self.done = rollout_until_groups(df, shares, run, self.need)
        return sr

    def end_rollout(self, step: int, t: float, df: dict, sr) -> StepOutcome:
        left = ~self.done
        dropped = 0
        if self.k.unfinished == "resume":
            carry = take_rows(df, left)
            g = sr.generated[left]
            # a row keeps the version of its first tokens; one with none yet gets them next step at the earliest
            carry["origin"] = np.where(carry["carried"] + g == 0, step + 1, carry["origin"])
            carry["prompt_len"] = carry["prompt_len"] + g
            carry["response_len"] = carry["response_len"] - g
            carry["carried"] = carry["carried"] + g
            if "turn_response_len" in df:  # trajectories go on from the turn they were in, after the call in flight
                rest = rest_of_trajectories(df, left, sr.turn_records)
                done = rest.pop("tool_done")
                carry.update(rest)
                carry["prompt_len"] = carry["prompt_len"] + done
                carry["tool_total"] = carry["tool_total"] - done
            self.carry = carry
        else:
            dropped = int(np.sum(left & (sr.generated > 0)))  # nothing is ever carried in this mode
        return StepOutcome(trained=self.done, dropped=dropped, columns={
            "launched_groups": self.launched,
            "carried_groups": groups_in(self.carry) if self.carry else 0,
        })


def rest_of_trajectories(df: dict, mask: np.ndarray, turn_records: list) -> dict:
    """What is left of the trajectories `mask` picks among a step's rows (`df`, its turn list columns) when their
    rollout stopped (a StepRollout's `turn_records`, cut): per row the turn lists from the turn it was in (less the
    tokens it generated of it); `tool_done`, the tokens of the tool answers it had called for by then (they join
    its context: a tool does not depend on the policy's weights); and `tool_pending_s`, the seconds its call in
    flight still had to run (the next rollout waits for them). A trajectory whose turns were all generated is
    left one turn of no tokens."""
    seen = {}  # row -> (per-turn tokens at the stop, admitted_at, finished_at, the stop)
    for rows, rec, _ in turn_records:
        per_turn = rec.get("got", rec["gen"]).astype(np.int64)
        for i, r in enumerate(rows):
            a, b = rec["first"][i], rec["first"][i + 1]
            seen[int(r)] = (per_turn[a:b], rec["admitted_at"][a:b], rec["finished_at"][a:b], rec.get("stop", np.inf))
    out = {c: [] for c in ("turn_response_len", "tool_latency_s", "tool_tokens")}
    done, pending = [], []
    for r in np.flatnonzero(mask):
        gen, lat, tok = (list(df[c][r]) for c in ("turn_response_len", "tool_latency_s", "tool_tokens"))
        none = np.full(len(gen), np.nan)
        g, admitted, finished, stop = seen.get(int(r), (np.zeros(len(gen), np.int64), none, none, np.inf))
        j = int(np.sum(np.cumprod(g >= np.asarray(gen))))  # turns generated whole, from the first
        if j == len(gen):
            rest = ([0], [None], [0])
        else:
            rest = ([gen[j] - int(g[j])] + gen[j + 1:], lat[j:], tok[j:])
        waits = 0 < j < len(gen) and np.isnan(admitted[j])  # its turn j waits on the call after turn j - 1
        pending.append(max(0.0, finished[j - 1] + lat[j - 1] - stop) if waits else 0.0)
        for c, v in zip(out, rest):
            out[c].append(v)
        done.append(int(sum(tok[:j])))
    as_column = lambda lists: np.array(lists + [None], dtype=object)[:-1]  # noqa: E731 (an object array of lists)
    return {**{c: as_column(v) for c, v in out.items()}, "tool_done": np.array(done, np.int64),
            "tool_pending_s": np.array(pending, float)}
