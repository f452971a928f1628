"""An engine's share of a step's multi-turn trajectories, turn by turn: what both agentic executors play."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tltsim.trace.schema import flat_turns

EPS = 1e-9  # tokens: a turn with fewer left than this has ended (a speculative stretch's gains are fractional)

@dataclass
class Turns:
    """An engine's share of a step's trajectories, turn by turn (flat arrays, the rows' turns in order)."""

    prompt_len: np.ndarray  # per row
    first: np.ndarray  # per row: index of its first turn in the flat arrays; its turns are first[i]..first[i+1]-1
    gen: np.ndarray  # per turn: tokens generated
    tool_latency_s: np.ndarray  # per turn: the tool call after it (NaN: none)
    tool_tokens: np.ndarray  # per turn: tokens the tool's answer appends
    pending_s: np.ndarray | None = None  # per row: seconds its tool call in flight still takes when the rollout
    # starts (a trajectory partial rollout carried on while it waited on a tool); None: none waits
    kept: np.ndarray | None = None  # per turn: tokens it leaves in the context for the next turn (the trace's
    # turn_kept_len); None: every token it generated. A turn that keeps other than it generated was re-templated:
    # its tokens are not a prefix of what follows, so the next turn prefills its kept tokens anew after the cached
    # context before it

    @classmethod
    def of(cls, prompt_len, turn_response_len, tool_latency_s, tool_tokens, pending_s=None, kept=None) -> "Turns":
        """From per-row sequences (the trace's list columns)."""
        counts = np.fromiter((len(t) for t in turn_response_len), np.int64, len(turn_response_len))
        return cls(np.asarray(prompt_len, np.int64), np.concatenate([[0], np.cumsum(counts)]),
                   flat_turns(turn_response_len, float), flat_turns(tool_latency_s, float),
                   flat_turns(tool_tokens, float),
                   None if pending_s is None else np.asarray(pending_s, float),
                   None if kept is None else flat_turns(kept, float))

    @property
    def rows(self) -> int:
        return len(self.prompt_len)
