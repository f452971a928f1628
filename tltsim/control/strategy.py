"""A speculative-decoding strategy: the shape of the draft tree one verify checks.

EAGLE-2 (Li et al., 2024) drafts a tree `depth` levels deep, expanding the
`topk` most likely children of the best nodes at each level, then reranks all
drafted nodes by path confidence and sends the best `verify` of them to the
target model in one forward pass. TLT (ASPLOS 2026) names such a strategy
``depth_topk_verify``; its tuner picks among a few of them per batch size.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tltsim.core.errors import TltsimError

_PATTERN = re.compile(r"^\s*(\d+)_(\d+)_(\d+)\s*$")


@dataclass(frozen=True, order=True)
class Strategy:
    """A draft-tree shape; ``str()`` gives the ``depth_topk_verify`` name back."""

    depth: int   # draft steps per verify: the most tokens one verify can accept (+1 bonus)
    topk: int    # children expanded per node: the most alternatives at one position
    verify: int  # drafted tokens the target checks in one forward pass (the tree budget)

    def __post_init__(self) -> None:
        for name in ("depth", "topk", "verify"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TltsimError(
                    f"strategy {name}={value!r}: must be a positive integer "
                    "(a strategy is depth_topk_verify like 8_4_48)")

    @classmethod
    def parse(cls, text: str | Strategy) -> Strategy:
        """Read ``"8_4_48"``; a Strategy is returned as is; anything else raises TltsimError."""
        if isinstance(text, Strategy):
            return text
        match = _PATTERN.match(text) if isinstance(text, str) else None
        if match is None:
            raise TltsimError(
                f"strategy {text!r}: expected depth_topk_verify like 8_4_48")
        return cls(*(int(g) for g in match.groups()))

    @classmethod
    def chain(cls, depth: int) -> Strategy:
        """A chain (no tree) of `depth` drafted tokens: ``d_1_d``."""
        return cls(depth, 1, depth)

    def __str__(self) -> str:
        return f"{self.depth}_{self.topk}_{self.verify}"


# The strategy an engine speculates with when no tuner picks one: a chain of 4 drafts. A real run probes its
# drafter with it (the per-step accepted length the validation reads), and a real engine's speed and warm-up
# measurements, and `real generate` without --strategy, use it.
DEFAULT_STRATEGY: Strategy = Strategy.chain(4)

# TLT's default arms (FastRL): one per batch-size bucket of the BEG tuner.
DEFAULT_ARMS: tuple[Strategy, ...] = tuple(
    Strategy.parse(s) for s in ("8_4_48", "8_4_32", "8_4_16", "8_4_8"))


def parse_arms(arms) -> tuple[Strategy, ...]:
    """Strategies from names or Strategy objects, or a comma-separated string.

    Raises TltsimError if the list is empty or names one strategy twice.
    """
    if isinstance(arms, str):
        arms = [a for a in arms.split(",") if a.strip()]
    parsed = tuple(Strategy.parse(a) for a in arms)
    if not parsed:
        raise TltsimError("arms: empty; give at least one strategy like 8_4_48")
    seen = set()
    for arm in parsed:
        if arm in seen:
            raise TltsimError(f"arms: {arm} is listed twice; list each strategy once")
        seen.add(arm)
    return parsed
