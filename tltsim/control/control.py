"""One rollout engine's speculation decisions: the sequence every executor drives.

An `EngineControl` owns an engine's `SDSwitch`, strategy tuner and (optional) `SpeculationGuard`, and is
the only caller of them. The simulator's fast path (a segment of constant batch at a time), its exact
path and `real/` (an iteration at a time) all drive it the same way:

    begin_rollout()                      at the start of each RL step's rollout on the engine, by the step's
                                         owner (the simulator's policy, real/'s worker), never an executor
    advance(batch, n) -> k               fast path, while the switch is off: k of n plain iterations run
                                         before it turns on
    decide(batch) -> Strategy | None     before each iteration (or chunk of iterations): the strategy to
                                         speculate with, or None to decode plainly
    trial_chunk(batch)                   fast path: speculative iterations to run as one before the guard
                                         judges speculation at this batch (0 once it has; while its trial
                                         goes on, 1, then the trial's rest once the first paid)
    plain_left(batch)                    fast path, after decide said plain: iterations before the guard tries
                                         speculation at this batch again
    observe_plain(batch, seconds, n)     n plain iterations took `seconds` each
    observe_spec(strategy, batch, tokens, seconds, catchup_s, iters)
                                         speculative iterations; the reward is computed here, once

The reward of a speculative iteration (fed to the tuner, and to the guard as its measure of
speculation) is the tokens the batch gained per second of the iteration *without* the drafter's
catch-up, `catchup_s`: the drafter building or catching up its state on tokens that plain
iterations emitted (the switch's cost, not the strategy's). An executor reports the iteration's
whole time and the catch-up share of it, and the rule lives here alone.

A switch may be its own guard (`tltsim.control.learned.LearnedSwitch`, tlt-auto's: it learns per batch
bucket where speculation pays and sets its threshold from that): pass it as both.

Plain Python: no simpy, no torch. `state_dict()` / `load_state_dict()` hold the tuner's and the
guard's state as plain data (a checkpoint between rollouts).
"""
from __future__ import annotations

from tltsim.control.guard import SpeculationGuard
from tltsim.control.strategy import Strategy
from tltsim.control.switch import SDSwitch


class EngineControl:
    """Speculation decisions of one engine across rollouts; see the module docstring."""

    def __init__(self, switch: SDSwitch, tuner, guard: SpeculationGuard | None = None):
        self.switch = switch
        self.tuner = tuner  # a tltsim.control.tuner.Tuner: choose(batch), update(strategy, batch, reward, n)
        self.guard = guard

    def begin_rollout(self) -> None:
        """A rollout starts: the guard counts a rollout; the switch starts over (off, or on in mode "always")."""
        if self.guard is not None:
            self.guard.begin_rollout()
        self.switch.reset()

    @property
    def on(self) -> bool:
        """Whether the switch is on in this rollout (speculation may run from now on)."""
        return self.switch.on

    def advance(self, batch: int, n: int = 1) -> int:
        """`n` iterations at `batch` with the switch off: how many run plainly before it turns on
        (SDSwitch.advance; 0 once it is on)."""
        return self.switch.advance(batch, n)

    def decide(self, batch: int) -> Strategy | None:
        """Before an iteration at `batch`: the tuner's strategy, or None (decode plainly) while the switch
        is off (this counts the iteration towards it) or where the guard says speculating does not pay."""
        if self.switch.advance(batch, 1):
            return None
        if self.guard is not None and not self.guard.pays(batch):
            return None
        return self.tuner.choose(batch)

    def trial_chunk(self, batch: int) -> int:
        """Fast path: speculative iterations at `batch` to run as one before the guard judges (0 once it has, or
        without a guard): one while its trial has not yet shown speculation paying, then the trial's rest. A
        fast-path chunk's iterations make one modelled reward, and a trial whose reward stays above plain
        decoding's never ends early, so its rest at once is judged as one iteration at a time would be."""
        left = 0 if self.guard is None else self.guard.to_try(batch)
        if left and self.guard.tried(batch) and self.guard.spec_rate(batch) > self.guard.plain_rate(batch):
            return left
        return min(left, 1)

    def plain_left(self, batch: int) -> float:
        """Fast path, after `decide` said plain: iterations at `batch` before the guard tries speculation again
        (infinite without a guard, or where it has not refused)."""
        return float("inf") if self._no_own_guard() else self.guard.plain_left(batch)

    def observe_plain(self, batch: int, seconds: float, n: int = 1) -> None:
        """`n` plain iterations at `batch` took `seconds` each."""
        if self.guard is not None:
            self.guard.observe_plain(batch, seconds, n)

    def observe_spec(self, strategy: Strategy, batch: int, tokens: float, seconds: float, catchup_s: float = 0.0,
                     iters: float = 1) -> None:
        """`iters` speculative iterations of `strategy` at `batch` gained `tokens` in all (accepted drafts and
        bonus tokens, over the rows) in `seconds`, of which `catchup_s` fed the drafter what it had not seen.
        Reward: tokens / (seconds - catchup_s), to the tuner and the guard."""
        reward = tokens / (seconds - catchup_s) if catchup_s else tokens / seconds
        n = max(1, int(round(iters)))
        self.tuner.update(strategy, batch, reward, n)
        if self.guard is not None:
            self.guard.observe_spec(batch, reward, n)

    def state_dict(self) -> dict:
        """The switch's, tuner's and guard's state as plain data (a switch that is its own guard, as
        tltsim.control.learned.LearnedSwitch is, once)."""
        return {"switch": self.switch.state_dict(), "tuner": self.tuner.state_dict(),
                "guard": None if self._no_own_guard() else self.guard.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned (on a control built with the same knobs)."""
        self.switch.load_state_dict(state["switch"])
        self.tuner.load_state_dict(state["tuner"])
        if not self._no_own_guard():
            self.guard.load_state_dict(state["guard"])

    def _no_own_guard(self) -> bool:
        """No guard of its own: none, or the switch is its own."""
        return self.guard is None or self.guard is self.switch
