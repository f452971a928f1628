"""Named policies: what `--policy` / `--policies` accept.

A name maps to a factory `(**knobs) -> Policy` whose `knob_names` attribute lists its knobs.
Combinations are written `A+B` and built by composing the two policy objects
(`tltsim.policies.compose.Composite`); knobs go to every part that has them. A registered single policy
whose name holds a `+` (`das+tlt`, one TLT variant: the hybrid drafter) is that policy, never a combination. Any two
registered single policies may be combined; the combinations that make sense are
registered too, so `tltsim compare` runs them by default.
"""
from __future__ import annotations

from dataclasses import fields

from tltsim.control.decisions import RENAMED_KNOBS
from tltsim.control.knobs import check_known, takes
from tltsim.core.errors import TltsimError
from tltsim.policies.async_rl import AsyncRL
from tltsim.policies.ideal import Ideal
from tltsim.policies.compose import Composite
from tltsim.policies.length_aware import LongestFirst
from tltsim.policies.migrate import Migrate
from tltsim.policies.partial import PartialRollout
from tltsim.policies.tail_batching import TailBatching
from tltsim.policies.tlt import VARIANTS, variant_factory
from tltsim.sim.hooks import Policy, StepOutcome

REGISTRY: dict = {  # single policies: name -> factory(**knobs) with `knob_names`
    "verl": Policy,
    **{name: variant_factory(name) for name in VARIANTS},
    "ideal": Ideal,
    "partial": PartialRollout,
    "tail-batching": TailBatching,
    "longest-first": LongestFirst,
    "migrate": Migrate,
    "async": AsyncRL,
}
# combinations with TLT, and knob defaults a combination changes in its parts
COMBINATIONS: dict[str, dict] = {
    "partial+tlt": {},
    "tail-batching+tlt": {},
    "longest-first+tlt": {},
    "migrate+tlt": {"release": "drafter"},
}


def policy_names() -> list[str]:
    """Every registered name: the single policies, then the combinations."""
    return [*REGISTRY, *COMBINATIONS]


def make_policy(name: str, knobs: dict | None = None) -> Policy:
    """Build the policy registered under `name` (or `A+B` of two) with `knobs`; unknown names and knobs raise."""
    knobs = dict(knobs or {})
    key = name.strip().lower()
    if key in REGISTRY:
        return _single(key, knobs, name)
    parts = key.split("+")
    if len(parts) != 2 or any(p not in REGISTRY for p in parts):
        raise TltsimError(f"unknown policy {name!r}; choose one of {', '.join(policy_names())} (or A+B of two single ones)")
    preset = {**COMBINATIONS.get(key, {}), **knobs}
    allowed = {p: _takes(p) for p in parts}
    check_known(f"policy {name!r}", knobs, sorted(set().union(*allowed.values())))
    a, b = (_single(p, {k: v for k, v in preset.items() if k in allowed[p]}, p) for p in parts)
    return Composite(a, b)


def _takes(single: str) -> set[str]:
    """The knobs registered policy `single` takes: a speculating one also the drafter's older knobs, which it reads
    against its own variant's."""
    factory = REGISTRY[single]
    return {*factory.knob_names, *(RENAMED_KNOBS if hasattr(getattr(factory, "Knobs", None), "renamed") else ())}


def knobs_for(name: str, knobs: dict | None) -> dict:
    """The part of `knobs` that policy `name` takes (a combination: its parts'): what a run of several policies
    with one set of knobs (`tltsim compare --knob`) gives each; unknown names raise."""
    make_policy(name)
    key = name.strip().lower()
    taken = set().union(*(_takes(p) for p in ([key] if key in REGISTRY else key.split("+"))))
    return {k: v for k, v in (knobs or {}).items() if k in taken}


def policy_knobs(name: str) -> list[tuple[str, object, str]]:
    """(knob, default, the values it takes) of every knob of the registered policy `name`, a combination's parts'
    in order (each knob once, with the combination's default)."""
    make_policy(name)  # an unknown name: its refusal
    key = name.strip().lower()
    parts = [key] if key in REGISTRY else key.split("+")
    out: dict[str, tuple[object, str]] = {}
    for part in parts:
        factory = REGISTRY[part]
        cls = getattr(factory, "Knobs", None)
        if cls is None:
            continue
        defaults = {**getattr(factory, "defaults", {}), **COMBINATIONS.get(key, {})}
        for f in fields(cls):
            if f.name not in out:
                out[f.name] = (defaults.get(f.name, f.default), takes(f.default, f.metadata))
    return [(k, ",".join(default) if isinstance(default, tuple) else default, allowed)
            for k, (default, allowed) in out.items()]


def knob_text(value) -> str:
    """A knob's value as --knob KEY=VALUE spells it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _single(key: str, knobs: dict, name: str) -> Policy:
    cls = REGISTRY[key]
    if cls.knob_names:
        return cls(**knobs)  # its knob dataclass's `build` checks them
    check_known(f"policy {name!r}", knobs, ())
    return cls()


__all__ = ["Policy", "StepOutcome", "knob_text", "knobs_for", "make_policy", "policy_knobs", "policy_names",
           "REGISTRY"]
