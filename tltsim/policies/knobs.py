"""Policy knobs: a frozen dataclass per policy whose fields declare their range; one validator for all.

    @dataclass(frozen=True)
    class PartialKnobs:
        ratio: float = knob(2.0, lo=1.0)  # requests launched / requests trained on

`build(cls, name, knobs)` makes the dataclass from user values (config [policy_knobs] or
`--knob k=v`) and raises a TltsimError naming the policy, the knob, the value and what
is allowed when a value has the wrong type or lies out of range.
"""
from __future__ import annotations

import warnings
from dataclasses import MISSING, asdict, field, fields

from tltsim.errors import TltsimError, TltsimWarning
from tltsim.sim.hooks import Policy


def knob(default, lo=None, hi=None, choices=None, needs=None):
    """A dataclass field holding `default`, valid in [lo, hi] (numbers) or among `choices` (strings).

    `needs=(other, value)`: the knob acts only when knob `other` is `value`; setting it otherwise is a warning.
    """
    return field(default=default, metadata={"lo": lo, "hi": hi, "choices": choices, "needs": needs})


def names(cls) -> list[str]:
    return [f.name for f in fields(cls)]


def build(cls, name: str, knobs: dict):
    """cls(**knobs), each value type-checked and range-checked."""
    unknown = sorted(set(knobs) - set(names(cls)))
    if unknown:
        raise TltsimError(f"policy {name!r}: unknown knob(s) {', '.join(unknown)}; its knobs are {', '.join(names(cls))}")
    values = {}
    for f in fields(cls):
        default = f.default if f.default is not MISSING else None
        v = knobs.get(f.name, default)
        values[f.name] = _check(name, f.name, v, default, f.metadata)
    for f in fields(cls):
        needs = f.metadata.get("needs")
        if needs and f.name in knobs and values[needs[0]] != needs[1]:
            warnings.warn(f"policy {name!r}: knob {f.name} = {knobs[f.name]!r} is ignored unless "
                          f"{needs[0]} = {needs[1]!r}", TltsimWarning)
    return cls(**values)


def as_dict(k) -> dict:
    return asdict(k)


def _check(policy: str, key: str, v, default, meta):
    given = v

    def bad(why):
        return TltsimError(f"policy {policy!r}: {key} = {given!r} {why}")

    if isinstance(default, bool):
        if not isinstance(v, bool):
            raise bad("must be true or false")
        return v
    if isinstance(default, int):
        if not isinstance(v, int) or isinstance(v, bool):
            raise bad("must be an integer")
    elif isinstance(default, float):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise bad("must be a number")
        v = float(v)
    elif isinstance(default, str):
        if not isinstance(v, str):
            raise bad("must be a string")
        if meta.get("choices") and v not in meta["choices"]:
            raise bad(f"must be one of {', '.join(meta['choices'])}")
        return v
    lo, hi = meta.get("lo"), meta.get("hi")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise bad(f"must be in {rng}")
    return v


class KnobbedPolicy(Policy):
    """A policy whose knobs are the fields of its `Knobs` dataclass, type- and range-checked by `build`."""

    Knobs: type

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.knobs = names(cls.Knobs)

    def __init__(self, **knobs):
        self.k = build(self.Knobs, self.name, knobs)
        self.knobs = as_dict(self.k)
