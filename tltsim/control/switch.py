"""When a rollout engine turns speculative decoding on.

TLT (ASPLOS 2026), adaptive rollout engine: SD is off while the running batch
is large, where verifying drafted tokens for every request makes each decode
iteration compute-bound and SD loses; once the batch has stayed at or below a
threshold (default 32) for `patience` consecutive decode iterations (default
10), SD switches on and stays on for the rest of the rollout. Switching costs
the caller a one-off re-prefill of every running request (prompt + generated
tokens), so the drafter has its KV cache and features; this object only
decides *when*.

Two executors drive one object: the simulator calls ``advance(bs, n)`` once per
segment of `n` iterations at a constant batch, the real engine calls
``advance(bs, 1)`` every iteration; both give the same switch iteration.
"""
from __future__ import annotations

from tltsim.core.errors import TltsimError

# the `sd` knob (tltsim.control.decisions): when an engine speculates. "adaptive": this switch (TLT's rule);
# "always": from the first token; "never"; "learned": the switch point learned per batch bucket
# (tltsim.control.learned.LearnedSwitch, this switch in mode "adaptive" with a threshold it learns)
SD_MODES = ("adaptive", "always", "never", "learned")
SWITCH_MODES = tuple(m for m in SD_MODES if m != "learned")  # the modes SDSwitch itself runs


class SDSwitch:
    """The SD on/off rule of one rollout engine; call `reset()` at each rollout start."""

    def __init__(self, mode: str = "adaptive", threshold: int = 32, patience: int = 10):
        if mode not in SWITCH_MODES:
            raise TltsimError(f"sd switch mode {mode!r}: expected one of {', '.join(SWITCH_MODES)}")
        if not isinstance(threshold, int) or threshold < 1:
            raise TltsimError(f"sd switch threshold={threshold!r}: expected an integer >= 1 "
                              "(the largest running batch at which SD may run)")
        if not isinstance(patience, int) or patience < 0:
            raise TltsimError(f"sd switch patience={patience!r}: expected an integer >= 0 "
                              "(consecutive small-batch iterations before SD turns on)")
        self.mode = mode
        self.threshold = threshold
        self.patience = patience
        self.reset()

    def reset(self) -> None:
        """Start a rollout: SD is on at once in mode "always", off otherwise."""
        self._on = self.mode == "always"
        self._small_run = 0  # consecutive decode iterations so far with batch <= threshold

    def state_dict(self) -> dict:
        """The rollout's progress (plain data)."""
        return {"on": self._on, "small_run": self._small_run}

    def load_state_dict(self, state: dict) -> None:
        self._on, self._small_run = bool(state["on"]), int(state["small_run"])

    @property
    def on(self) -> bool:
        """True once SD has switched on in this rollout (it then stays on until `reset`)."""
        return self._on

    def advance(self, batch_size: int, n: int = 1) -> int:
        """Account for `n` decode iterations at `batch_size`, run with SD off.

        Returns k, how many of the `n` iterations run before SD turns on: the
        caller runs k iterations without SD and the remaining n - k with it.
        k == n while SD stays off; SD may also turn on right after the n-th
        iteration (k == n and `on` is now True). Once on, returns 0; n == 0
        changes nothing.
        In mode "adaptive" SD turns on right after the `patience`-th
        consecutive iteration at batch <= threshold (or before the first such
        iteration when patience is 0); a larger batch restarts the count.
        """
        if n < 0 or batch_size < 0:
            raise ValueError(f"advance(batch_size={batch_size}, n={n}): both must be >= 0")
        if self._on or n == 0:
            return 0
        if self.mode == "never":
            return n
        if batch_size > self.threshold:
            self._small_run = 0
            return n
        k = min(n, self.patience - self._small_run)
        self._small_run += k
        if self._small_run >= self.patience:
            self._on = True
        return k
