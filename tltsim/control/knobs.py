"""Knobs: a frozen dataclass whose fields declare their type and range; one checker for every policy's knobs.

    @dataclass(frozen=True)
    class PartialKnobs:
        ratio: float = knob(2.0, lo=1.0)  # requests launched / requests trained on

A knob's type is its default's (bool, int, float, str; other types, such as a tuple of strategies, are left
to the dataclass's own checks). `build(cls, name, values)` makes the dataclass from user values (config
[policy_knobs], `--knob k=v`, a real run's knobs) with every field checked, by the dataclass's `checked(name)`
where it has one (knobs that constrain one another), else by `check_fields(k, name)`. Both raise a TltsimError
naming the policy, the knob, the value and what is allowed:

    policy 'partial': ratio = 0.5 must be a number in [1.0, 16.0]

A knob the dataclass lacks is refused by `check_known`, the one unknown-knob check, which a policy without knobs,
a combination of two policies and a tuner call too:

    policy 'partial+tlt': unknown knob(s) nope; its knobs are arms, ...
"""
from __future__ import annotations

import warnings
from dataclasses import MISSING, field, fields, replace

from tltsim.core.errors import TltsimError, TltsimWarning


def knob(default, lo=None, hi=None, choices=None, needs=None):
    """A dataclass field holding `default`, valid in [lo, hi] (numbers) or among `choices` (strings).

    `needs=(other, value)`: the knob acts only when knob `other` is `value`; setting it otherwise is a warning.
    """
    return field(default=default, metadata={"lo": lo, "hi": hi, "choices": choices, "needs": needs})


def knob_names(cls) -> tuple[str, ...]:
    """The knobs (field names) of knob dataclass `cls`, in declaration order."""
    return tuple(f.name for f in fields(cls))


def check_known(owner: str, values, names) -> None:
    """A TltsimError when `values` sets a knob not among `names`, the knobs `owner` takes (e.g. "policy 'partial'",
    "tuner 'beg'"): the one unknown-knob check of every policy, combination and tuner."""
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise TltsimError(f"{owner}: unknown knob(s) {', '.join(unknown)}; "
                          + (f"its knobs are {', '.join(names)}" if names else "it takes no knobs"))


def build(cls, name: str, values: dict):
    """cls(**values) for policy `name`, every knob checked; unknown knobs raise, knobs set where they do not
    act (`needs`) warn. A dataclass that reads older knob names as the knobs they became does so first
    (`renamed(name, values)`)."""
    if hasattr(cls, "renamed"):
        values = cls.renamed(name, values)
    check_known(f"policy {name!r}", values, knob_names(cls))
    k = cls(**values)
    k = k.checked(name) if hasattr(k, "checked") else check_fields(k, name)  # a dataclass whose knobs constrain
    # one another checks them together in its own `checked`, after check_fields
    for f in fields(cls):
        if f.name in values and not acts(k, f):
            other, value = f.metadata["needs"]
            warnings.warn(f"policy {name!r}: knob {f.name} = {values[f.name]!r} is ignored unless "
                          f"{other} = {value!r}", TltsimWarning)
    return k


def acts(k, f) -> bool:
    """Whether knob field `f` of knobs `k` acts: it needs no other knob's value (`needs`), or that knob has it."""
    needs = f.metadata.get("needs")
    return not needs or getattr(k, needs[0]) == needs[1]


def check_fields(k, name: str):
    """Knob dataclass `k` with each field type- and range-checked (an integer given for a number made a
    float); TltsimError naming policy `name`, the knob, its value and what is allowed."""
    changed = {}
    for f in fields(k):
        v = getattr(k, f.name)
        checked = _check(name, f.name, v, f.default if f.default is not MISSING else None, f.metadata)
        if checked is not v:
            changed[f.name] = checked
    return replace(k, **changed) if changed else k


def _check(policy: str, key: str, v, default, meta):
    lo, hi, choices = meta.get("lo"), meta.get("hi"), meta.get("choices")

    def bad(allowed):
        return TltsimError(f"policy {policy!r}: {key} = {v!r} must be {allowed}")

    if isinstance(default, bool):
        if not isinstance(v, bool):
            raise bad("true or false")
        return v
    if isinstance(default, str):
        if not isinstance(v, str):
            raise bad("a string")
        if choices and v not in choices:
            raise bad(f"one of {', '.join(choices)}")
        return v
    if isinstance(default, (int, float)):
        integer = isinstance(default, int)
        allowed = takes(default, meta)
        if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)):
            raise bad(allowed)
        if (lo is not None and not v >= lo) or (hi is not None and not v <= hi):  # NaN is out of every range
            raise bad(allowed)
        return v if integer or isinstance(v, float) else float(v)
    return v


def takes(default, meta) -> str:
    """The values a knob with this default and field metadata takes, in words (its refusal and `tltsim policies`
    say them so)."""
    if meta.get("choices"):
        return "one of " + ", ".join(map(str, meta["choices"]))
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, tuple):  # the tuner's arms
        return "comma-separated depth_topk_verify strategies"
    if isinstance(default, (int, float)):
        return ("an integer" if isinstance(default, int) else "a number") + _range(meta.get("lo"), meta.get("hi"))
    return "a string"


def _range(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f" in [{lo}, {hi}]"
    if lo is not None:
        return f" >= {lo}"
    return f" <= {hi}" if hi is not None else ""
