"""Tail batching (RollPacker: Gao et al., 2025, "RollPacker: Mitigating Long-Tail Rollouts for Fast,
Synchronous RL Post-Training").

Short rounds: launch `eta` x the prompt groups the step trains on, fresh from
the prompt stream (tltsim.sim.prompts); when as many groups as the step
trains on have finished, abort the rest. The aborted responses' tokens are thrown
away (`dropped`) and their prompts are parked: prompts whose responses run long.
Long round: once the parked prompts fill a step's batch, or `long_every` short
rounds have passed with some parked, a step runs parked prompts (oldest first,
topped up with fresh ones) to completion, as verl would. Every sample is generated
by the policy that trains on it (staleness 0); the cost is a changed sample mix
(long prompts trained later, together) and the aborted work.

Defaults: RollPacker launches more prompts than a step needs in short rounds and
defers long-tail prompts to long rounds; `eta = 1.25` and `long_every = 4` are our
choices (with eta 1.25, a quarter of a batch is parked per short round, so four
short rounds fill one long round).

The decisions (what a step launches, which rows are parked, when a long round runs) are tltsim.control.tail's,
which a real executor drives too; this module is the simulator's glue: its prompt stream, rollout and step record.
"""
from __future__ import annotations

from tltsim.control.groups import groups_in
from tltsim.control.tail import TailBatchingKnobs, TailControl
from tltsim.policies.groups import rollout_until_groups
from tltsim.policies.knobs import KnobbedPolicy
from tltsim.sim.hooks import StepOutcome
from tltsim.sim.prompts import PromptStream


class TailBatching(KnobbedPolicy):
    """The simulator's glue: its prompt stream, rollout hook and step record around tltsim.control's `TailControl`,
    which decides."""

    name = "tail-batching"
    multi_turn = False  # stops a rollout on the single-turn token clock
    Knobs = TailBatchingKnobs

    def bind(self, sim) -> None:
        super().bind(sim)
        self.stream = PromptStream(sim.trace.df)
        self.control = TailControl(self.k)

    def prepare_step(self, step: int, df: dict) -> dict:
        fresh = self.control.begin_step(groups_in(df))
        return self.control.rows(step, self.stream.take(fresh, step))

    def rollout(self, step, df, shares, run):
        if self.control.long:
            self.done = None
            return super().rollout(step, df, shares, run)
        sr, self.done = rollout_until_groups(df, shares, run, self.control.need)
        return sr

    def end_rollout(self, step: int, t: float, df: dict, sr) -> StepOutcome:
        long = self.control.long
        dropped = self.control.end_step(df, self.done, sr.generated)
        columns = {"long_round": long, "launched_groups": groups_in(df), "parked_groups": self.control.parked_groups}
        if long:
            return StepOutcome(columns=columns)
        return StepOutcome(trained=self.done, dropped=dropped, columns=columns)
