"""A switch point learned per batch bucket (`tlt-auto`): TLT's switch whose threshold comes from measurements.

TLT switches speculation on once the running batch stays at or below a fixed threshold (`SDSwitch`, 32).
Where speculation breaks even depends on the cluster, the model, the drafter and the batch
(docs/design.md#why-a-fixed-threshold-is-wrong-on-some-clusters), so `LearnedSwitch` measures it.

Buckets: batch b falls in bucket floor(log2 b): 1 | 2-3 | 4-7 | 8-15 | ... Per bucket the switch keeps two
rates *per running row* (a bucket mixes batch sizes; per row, the rates of its batches are close), over the
bucket's last `window` iterations:

* plain decoding: the median of 1 / seconds of a plain iteration;
* speculation: the mean of the tuner's reward (accepted tokens per second of the batch, catch-up left out) /
  batch; the mean, as `SpeculationGuard` takes it, because speculative gains come in bursts.

Where a bucket has no measurement an estimate stands in: the prior, when one was given (the rates the cost
model or a profile predicts per bucket, `prior_from`), and for plain decoding, where neither exists, the
nearest larger measured bucket's rate (decoding fewer rows is no slower an iteration, so per row it is at
least as fast: the bound `SpeculationGuard` uses). Speculation *pays* in a bucket whose speculative rate
beats its plain one.

At each rollout's start (`reset`) the switch sets its threshold:

* the top batch of the highest bucket where speculation pays; the `threshold` knob (TLT's 32) while no
  bucket has a speculative estimate; 0 (never on) when none pays;
* explore: when the bucket just above is known to exist (a batch seen there, or the prior covers it) and
  has no speculative measurement, or one older than `retry_after` rollouts (the drafter changes between
  rollouts), the threshold covers it too, so each rollout tries at most one bucket not known to pay;
* the switch then turns on as SDSwitch's does, after `patience` iterations at or below the threshold; when
  the threshold covers the largest batch known (the largest seen, else the prior's), it is on from the
  start (the drafter is built with the target's prefill, as sd-always's is: no re-prefill).

Once on, the same object is the engine's guard (the `SpeculationGuard` interface): at a batch whose bucket
measured speculation slower than plain decoding the engine decodes plainly, and a bucket without a fresh
speculative measurement is tried (one iteration on the fast path). `EngineControl(switch, tuner, switch)`
drives it. Plain Python; `state_dict()` holds everything it learned as plain data.
"""
from __future__ import annotations

import math
from collections import Counter

from tltsim.control.switch import SDSwitch
from tltsim.control.tuner import RewardWindow


def bucket_of(batch: int) -> int:
    """The bucket of batch size `batch` >= 1: floor(log2 batch)."""
    return int(batch).bit_length() - 1


def bucket_range(k: int) -> tuple[int, int]:
    """The batch sizes of bucket k, inclusive."""
    return 2**k, 2 ** (k + 1) - 1


def bucket_label(k: int) -> str:
    lo, hi = bucket_range(k)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def learned_summary(switches: list["LearnedSwitch"]) -> dict:
    """What the engines' switches learned (a tlt-auto run's summary): the threshold most of them hold, the
    smallest of a tie (`sd_threshold`), and the batch buckets where most of them speculate (`sd_buckets`)."""
    paying = [set(s.speculating_buckets()) for s in switches]
    top = max(len(s.buckets()) for s in switches)
    thresholds = Counter(s.learned_threshold() for s in switches)
    return {"sd_threshold": min(thresholds, key=lambda t: (-thresholds[t], t)),
            "sd_buckets": [bucket_label(k) for k in range(top) if 2 * sum(k in p for p in paying) > len(paying)]}


def prior_from(plain_rate, spec_rate, max_batch: int) -> dict:
    """The prior of buckets 0 .. bucket_of(max_batch), as `LearnedSwitch` takes it: each bucket's rates per row
    at its geometric middle batch (capped at max_batch), from `plain_rate(b)` and `spec_rate(b)` (tokens per
    second of a batch of b: a model's predictions, e.g. the cost model's)."""
    rates = []
    for k in range(bucket_of(max_batch) + 1):
        lo, hi = bucket_range(k)
        b = min(max_batch, hi, max(lo, round(math.sqrt(lo * hi))))
        rates.append([k, float(plain_rate(b)) / b, float(spec_rate(b)) / b])
    return {"max_batch": int(max_batch), "rates": rates}


class LearnedSwitch(SDSwitch):
    """SDSwitch (mode "adaptive") whose threshold is set at every `reset` from per-bucket rates, and the guard
    that decodes plainly in buckets where speculating measured slower; see the module docstring."""

    def __init__(self, threshold: int = 32, patience: int = 10, prior: dict | None = None, window: int = 8,
                 retry_after: int = 4):
        self.start_threshold = threshold  # while nothing is known about speculation
        self.window = window
        self.retry_after = retry_after
        self.prior = prior  # {"max_batch": b, "rates": [[bucket, plain per row, spec per row], ...]}
        self._prior = {int(k): (float(p), float(s)) for k, p, s in (prior or {}).get("rates", [])}
        self._plain: dict[int, RewardWindow] = {}  # bucket -> tokens per second per row of plain iterations
        self._spec: dict[int, tuple[RewardWindow, int]] = {}  # bucket -> (the same of speculation, rollout)
        self._largest = 0  # the largest batch observed
        self._rollout = 0  # rollouts begun
        super().__init__("adaptive", threshold, patience)  # checks the knobs, then resets

    # --- the guard's interface (EngineControl calls it as its guard) --------------------------------------
    def begin_rollout(self) -> None:
        """A rollout starts (EngineControl calls this, then `reset`)."""
        self._rollout += 1

    def observe_plain(self, batch: int, seconds: float, n: int = 1) -> None:
        """`n` plain iterations at `batch` took `seconds` each."""
        self._seen(batch)
        self._plain.setdefault(bucket_of(batch), RewardWindow(self.window)).add(1.0 / float(seconds), max(1, int(n)))

    def observe_spec(self, batch: int, reward: float, n: int = 1) -> None:
        """`n` speculative iterations at `batch` made `reward` tokens per second of the batch."""
        self._seen(batch)
        k = bucket_of(batch)
        if not self.tried(batch):  # first, or expired: a fresh window
            self._spec[k] = (RewardWindow(self.window), self._rollout)
        window, _ = self._spec[k]
        window.add(float(reward) / batch, max(1, int(n)))
        self._spec[k] = (window, self._rollout)

    def tried(self, batch: int) -> bool:
        """Whether speculation has an unexpired measurement in the bucket of `batch`."""
        return self._fresh(bucket_of(batch))

    def to_try(self, batch: int) -> int:
        """Speculative iterations before the bucket of `batch` is judged: one while it is untried."""
        return 0 if self.tried(batch) else 1

    def pays(self, batch: int) -> bool:
        """Whether to speculate at `batch` (once on): untried buckets are tried, measured ones compared."""
        k = bucket_of(batch)
        return not self._fresh(k) or self.estimated_to_pay(k)

    # --- the switch ------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Start a rollout: the threshold from what is known (see the module docstring), on from the start
        when it covers the largest batch known."""
        self.threshold = self.learned_threshold(explore=True)
        super().reset()
        self._on = 0 < self._largest_known() <= self.threshold

    def learned_threshold(self, explore: bool = False) -> int:
        """The largest batch at which speculation is estimated to pay (see the module docstring); with
        `explore`, raised to cover the bucket above when it is worth a try."""
        if all(self.spec_rate(k) is None for k in self.buckets()):
            return self.start_threshold
        paying = self.speculating_buckets()
        base = bucket_range(paying[-1])[1] if paying else 0
        above = bucket_of(base + 1)
        if explore and above <= self._top_bucket() and not self._fresh(above):
            return bucket_range(above)[1]
        return base

    def buckets(self) -> range:
        """The buckets known to exist: 0 up to the largest batch's (seen, else the prior's)."""
        return range(self._top_bucket() + 1)

    def speculating_buckets(self) -> list[int]:
        """The buckets where speculation is estimated to pay, smallest first."""
        return [k for k in self.buckets() if self.estimated_to_pay(k)]

    def estimated_to_pay(self, k: int) -> bool:
        """Whether bucket k's speculative rate (measured, else the prior's) beats its plain one; False without
        one."""
        spec = self.spec_rate(k)
        return spec is not None and spec > self.plain_rate(k)

    # --- estimates ---------------------------------------------------------------------------------------
    def spec_rate(self, k: int) -> float | None:
        """Speculation's tokens per second per row in bucket k: measured, else the prior's, else None."""
        if self._fresh(k):
            return self._spec[k][0].mean()
        return self._prior[k][1] if k in self._prior else None

    def plain_rate(self, k: int) -> float:
        """Plain decoding's tokens per second per row in bucket k: measured, else the prior's, else the
        nearest larger measured bucket's (a bound: fewer rows decode no slower), else 0."""
        if k in self._plain:
            return self._plain[k].median()
        if k in self._prior:
            return self._prior[k][0]
        larger = [j for j in self._plain if j > k]
        return self._plain[min(larger)].median() if larger else 0.0

    def _fresh(self, k: int) -> bool:
        return k in self._spec and self._rollout - self._spec[k][1] < self.retry_after

    def _largest_known(self) -> int:
        """The largest batch seen, else the prior's largest (0: none)."""
        return self._largest or (self.prior or {}).get("max_batch", 0)

    def _top_bucket(self) -> int:
        """The largest bucket known to exist (-1: none)."""
        largest = self._largest_known()
        return bucket_of(largest) if largest else -1

    def _seen(self, batch: int) -> None:
        self._largest = max(self._largest, int(batch))

    # --- state -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The rollout's progress and everything learned, as plain data."""
        return {**super().state_dict(), "threshold": self.threshold, "rollout": self._rollout,
                "largest": self._largest, "plain": [[k, w.state_dict()] for k, w in self._plain.items()],
                "spec": [[k, w.state_dict(), r] for k, (w, r) in self._spec.items()]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.threshold, self._rollout, self._largest = int(state["threshold"]), int(state["rollout"]), \
            int(state["largest"])
        self._plain = {int(k): RewardWindow.restored(self.window, w) for k, w in state["plain"]}
        self._spec = {int(k): (RewardWindow.restored(self.window, w), int(r)) for k, w, r in state["spec"]}
