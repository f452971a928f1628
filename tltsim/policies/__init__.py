"""Named policies: what `--policy` / `--policies` accept.

A name maps to a factory `(knobs: dict) -> Policy`. Combinations are written
`A+B` and built by composing policy objects (see `make_policy`).
"""
from __future__ import annotations

from tltsim.errors import TltsimError
from tltsim.policies.base import Ideal, Policy, StepOutcome
from tltsim.policies.tlt import VARIANTS, variant_factory

REGISTRY: dict = {"verl": Policy, **{name: variant_factory(name) for name in VARIANTS}, "ideal": Ideal}


def policy_names() -> list[str]:
    return list(REGISTRY)


def make_policy(name: str, knobs: dict | None = None) -> Policy:
    """Build the policy registered under `name` with `knobs` (unknown names and knobs raise TltsimError)."""
    knobs = dict(knobs or {})
    key = name.strip().lower()
    if key not in REGISTRY:
        raise TltsimError(f"unknown policy {name!r}; choose one of {', '.join(REGISTRY)}")
    cls = REGISTRY[key]
    allowed = set(getattr(cls, "knobs", {}))
    unknown = sorted(set(knobs) - allowed)
    if unknown:
        raise TltsimError(
            f"policy {name!r}: unknown knob(s) {', '.join(unknown)}; "
            + (f"its knobs are {', '.join(sorted(allowed))}" if allowed else "it takes no knobs")
        )
    return cls(**knobs) if allowed else cls()


__all__ = ["Policy", "StepOutcome", "make_policy", "policy_names", "REGISTRY"]
