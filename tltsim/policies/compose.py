"""`A+B`: two policies as one, each hook forwarded to both in a defined order.

    Composite(PartialRollout(), TLTPolicy("tlt"))   # registry name "partial+tlt"

Order: hooks that transform or decide (prepare_step, split, rollout, speculation)
go to A first; a transforming hook (prepare_step) chains A then B; a deciding hook
takes the first answer that is not the default (split, speculation), and `rollout`
is the one of the part that overrides it (at most one may). A policy that owns the
step loop (async) runs it with a part that only speculates (async+tlt): the loop asks the composite, which forwards
to both, for speculation and tells it of versions and waits. Hooks that
observe (bind, begin_step, worker_done) go to A then B. `end_rollout` asks both and
merges their outcomes: spans and columns united (a worker claimed by both is an
error), trained masks intersected, dropped counts and pre-work added.

Knobs are dispatched by name: each knob goes to every part that has it.
"""
from __future__ import annotations

import numpy as np

from tltsim.core.errors import TltsimError
from tltsim.sim.hooks import Policy, StepOutcome


class Composite(Policy):
    def __init__(self, a: Policy, b: Policy):
        self.parts = (a, b)
        self.name = f"{a.name}+{b.name}"
        self.knob_names = tuple(dict.fromkeys([*a.knob_names, *b.knob_names]))
        self.knob_values = {**b.knob_values, **a.knob_values}
        loops = [p for p in self.parts if type(p).loop is not Policy.loop]
        self._loop_owner = loops[0] if loops else None
        if loops:
            other = b if loops[0] is a else a
            why = "it runs its own step loop too" if len(loops) > 1 else other.loop_refusal()
            if why:
                raise TltsimError(f"policy {self.name!r}: {loops[0].name!r} runs its own step loop, and "
                                  f"{other.name!r} cannot run inside it: {why}; run {loops[0].name!r} alone or with "
                                  f"a policy that only speculates (e.g. {loops[0].name}+tlt)")
        owners = [p for p in self.parts if type(p).rollout is not Policy.rollout]
        if len(owners) > 1:
            raise TltsimError(f"policy {self.name!r}: both {a.name!r} and {b.name!r} decide how a rollout runs; "
                              f"combine one of them with a policy that does not (e.g. {a.name}+tlt)")
        self._rollout_owner = owners[0] if owners else a

    @property
    def multi_turn(self) -> bool:
        return all(p.multi_turn for p in self.parts)

    @property
    def trains_drafter(self) -> bool:
        return any(getattr(p, "trains_drafter", False) for p in self.parts)

    def reserved_gpus(self, cluster) -> int:
        return sum(p.reserved_gpus(cluster) for p in self.parts)

    def bind(self, sim) -> None:
        self.sim = sim
        for p in self.parts:
            p.bind(sim)

    def prepare_step(self, step: int, df: dict) -> dict:
        for p in self.parts:
            df = p.prepare_step(step, df)
        return df

    def split(self, df: dict, engines: int):
        return next((s for s in (p.split(df, engines) for p in self.parts) if s is not None), None)

    def begin_step(self, step: int, t: float) -> None:
        for p in self.parts:
            p.begin_step(step, t)

    def rollout(self, step, df, shares, run):
        return self._rollout_owner.rollout(step, df, shares, run)

    def priority(self, df: dict, rows):
        return next((q for q in (p.priority(df, rows) for p in self.parts) if q is not None), None)

    def speculation(self, engine: int, rows=None):
        return next((s for s in (p.speculation(engine, rows) for p in self.parts) if s is not None), None)

    def loop(self, sim, env, bar):
        return self._loop_owner.loop(sim, env, bar) if self._loop_owner else None

    def loop_refusal(self) -> str | None:
        return "it is a combination already"

    def begin_version(self, version: int, t: float) -> None:
        for p in self.parts:
            p.begin_version(version, t)

    def idle_training(self, seconds: float) -> float:
        return sum(p.idle_training(seconds) for p in self.parts)

    def end_version(self, version: int, lengths: np.ndarray) -> dict:
        a, b = (p.end_version(version, lengths) for p in self.parts)
        return {**b, **a}

    def worker_done(self, engine: int, t: float) -> None:
        for p in self.parts:
            p.worker_done(engine, t)

    def end_rollout(self, step: int, t: float, df: dict, sr) -> StepOutcome:
        a, b = (p.end_rollout(step, t, df, sr) for p in self.parts)
        clash = sorted(set(a.spans) & set(b.spans))
        if clash:
            raise TltsimError(f"policy {self.name!r}: both parts claim workers {clash} after their rollout; "
                              f"set the first part's release knob so that only one does")
        trained = a.trained if b.trained is None else b.trained if a.trained is None else a.trained & b.trained
        return StepOutcome(
            spans={**a.spans, **b.spans},
            trained=None if trained is None else np.asarray(trained),
            dropped=a.dropped + b.dropped,
            prework_gpu_s=a.prework_gpu_s + b.prework_gpu_s,
            columns={**b.columns, **a.columns},
            release_s=max(a.release_s, b.release_s),
        )

    def summary(self) -> dict:
        return {**self.parts[1].summary(), **self.parts[0].summary()}
