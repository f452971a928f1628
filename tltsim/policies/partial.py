"""Over-provisioned partial rollout (APRIL; Kimi k1.5's partial rollouts).

Each step launches `ratio` x the prompt groups the step trains on (the trace
step's group count), unfinished groups carried from the last step first, then
fresh groups from the prompt stream (tltsim.sim.prompts). When as many groups
as the step trains on have finished, every engine stops. The finished groups are
trained on; each unfinished group is either carried into the next step and resumed
there, keeping the tokens generated so far (`unfinished = "resume"`, APRIL's
recycling), or thrown away (`"drop"`).

A resumed response is re-prefilled (its prompt and its tokens so far) when it is
admitted again, because the weights changed. A multi-turn trajectory goes on from the turn it was in
(tltsim.control.partial.rest_of_trajectories): the tool answers it had called for join its context. Its
earliest tokens come from the policy version of the step that started it: that is its staleness when it is
trained (steps columns `staleness_mean`, `staleness_max`).

Defaults: APRIL (Zhou et al., 2025, "APRIL: Active Partial Rollouts in RL to
tame long-tail generation") over-provisions the rollout batch and recycles
incomplete responses; `ratio = 2.0` (twice the requests needed) is our choice
inside the over-provisioning range it studies, `unfinished = "resume"` is its
recycling. Kimi k1.5 (2025) resumes long responses in later iterations the same way.
With ratio 1.0 every launched group must finish: the step is exactly verl's.

The decisions (what a step launches, when it stops, what is carried) are tltsim.control.partial's, which a
real executor drives too; this module is the simulator's glue: its prompt stream, rollout and step record.
"""
from __future__ import annotations

import numpy as np

from tltsim.control.groups import groups_in
from tltsim.control.partial import PartialControl, PartialKnobs
from tltsim.policies.groups import rollout_until_groups
from tltsim.policies.knobs import KnobbedPolicy
from tltsim.sim.hooks import StepOutcome
from tltsim.sim.prompts import PromptStream


class PartialRollout(KnobbedPolicy):
    """The simulator's glue: its prompt stream, rollout hook and step record around tltsim.control's
    `PartialControl`, which decides."""

    name = "partial"
    Knobs = PartialKnobs

    def bind(self, sim) -> None:
        super().bind(sim)
        self.stream = PromptStream(sim.trace.df)
        self.control = PartialControl(self.k)

    def prepare_step(self, step: int, df: dict) -> dict:
        fresh = self.control.begin_step(groups_in(df))
        return self.control.rows(self.stream.take(fresh, step))

    def rollout(self, step, df, shares, run):
        sr, self.done = rollout_until_groups(df, shares, run, self.control.need)
        return sr

    def end_rollout(self, step: int, t: float, df: dict, sr) -> StepOutcome:
        seen = turns_seen(sr.turn_records) if "turn_response_len" in df else None
        dropped = self.control.end_step(step, df, self.done, sr.generated, seen)
        return StepOutcome(trained=self.done, dropped=dropped, columns={
            "launched_groups": self.control.launched,
            "carried_groups": self.control.carried_groups,
        })


def turns_seen(turn_records: list) -> dict:
    """What each row's turns had done when the rollout stopped, from a StepRollout's `turn_records` (cut): row ->
    (per-turn tokens at the stop, admitted_at, finished_at, the stop), as
    tltsim.control.partial.rest_of_trajectories takes it."""
    seen = {}
    for rows, rec, _ in turn_records:
        per_turn = rec.get("got", rec["gen"]).astype(np.int64)
        for i, r in enumerate(rows):
            a, b = rec["first"][i], rec["first"][i + 1]
            seen[int(r)] = (per_turn[a:b], rec["admitted_at"][a:b], rec["finished_at"][a:b], rec.get("stop", np.inf))
    return seen
