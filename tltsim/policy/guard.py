"""Whether speculating pays at the current batch: one rule for the simulator and for `real/`.

TLT turns speculation on below a batch threshold (`SDSwitch`); at batches where every draft tree
is slower than plain decoding (a drafter too weak, or drafting too dear for this device), a sane
engine decodes plainly instead. `SpeculationGuard` answers from what the engine observed in the
rollout, so the simulator (which observes modelled times) and a real engine (which observes wall
clocks) make the decision the same way:

* plain decoding's rate at batch b: b / (the median seconds of the last plain iterations at the
  nearest observed batch at or above b; decoding a smaller batch is no slower);
* an arm's rate: the tuner's windowed median reward at b (tokens per second of the batch, see
  tltsim.policy.tuner), +inf while untried, so every candidate arm is tried once;
* speculation pays when some candidate arm's rate beats plain decoding's (always, before any
  plain iteration was observed, and for tuners without `median_reward`: ucb, fixed, oracle).

Once every arm at a batch has measured slower than plain decoding, that batch decodes plainly
while those medians stand; the guard does not explore (an exploring speculative iteration between
plain ones would pay for the drafter to catch up each time).
"""
from __future__ import annotations

import bisect
import math

from tltsim.policy.tuner import RewardWindow


class SpeculationGuard:
    """Made per engine rollout; told every plain iteration's time, asked before every decode iteration."""

    def __init__(self, tuner, window: int = 8):
        self.tuner = tuner
        self.window = window  # plain iterations per batch size whose median time is its estimate
        self._plain: dict[int, RewardWindow] = {}  # batch -> seconds per plain iteration
        self._sizes: list[int] = []  # sorted keys of _plain

    def observe_plain(self, batch: int, seconds: float, n: int = 1) -> None:
        """`n` plain iterations at `batch` took `seconds` each (on average)."""
        if batch not in self._plain:
            self._plain[batch] = RewardWindow(self.window)
            bisect.insort(self._sizes, batch)
        self._plain[batch].add(float(seconds), max(1, int(n)))

    def plain_rate(self, batch: int) -> float:
        """Tokens per second of plain decoding at `batch`, estimated; 0 when nothing was observed."""
        if not self._sizes:
            return 0.0
        i = min(bisect.bisect_left(self._sizes, batch), len(self._sizes) - 1)
        return batch / self._plain[self._sizes[i]].median()

    def untried(self, strategy, batch: int) -> bool:
        """Whether `strategy` has no reward at `batch` yet (the simulator's fast path then tries it for one
        iteration, not a chunk, as an engine deciding every iteration would)."""
        return hasattr(self.tuner, "median_reward") and math.isinf(self.tuner.median_reward(strategy, batch))

    def pays(self, batch: int) -> bool:
        if not hasattr(self.tuner, "median_reward"):
            return True
        best = max(self.tuner.median_reward(a, batch) for a in self.tuner.candidates(batch))
        return best > self.plain_rate(batch)
