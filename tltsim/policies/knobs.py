"""A simulator policy whose knobs are the fields of a knob dataclass (tltsim.control.knobs declares and checks
them, for these policies and for TLT's alike)."""
from __future__ import annotations

from dataclasses import asdict

from tltsim.control.knobs import build, knob_names
from tltsim.sim.hooks import Policy


class KnobbedPolicy(Policy):
    """A policy whose knobs are the fields of its `Knobs` dataclass, type- and range-checked by `build`."""

    Knobs: type

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.knob_names = knob_names(cls.Knobs)

    def __init__(self, **knobs):
        self.k = build(self.Knobs, self.name, knobs)
        self.knob_values = asdict(self.k)
