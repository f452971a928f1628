"""Strategy tuners: which draft-tree shape to use at the current batch size.

All tuners share one interface, driven the same way by the simulator and by
`real/`:

* ``choose(batch_size) -> Strategy`` before a run of verify iterations;
* ``update(strategy, batch_size, reward, n=1)`` after it, where `reward` is
  the mean over `n` iterations of the **accepted tokens per second of the
  batch**: (accepted length x batch size) / verify-iteration time, i.e. the
  rate at which the batch makes progress (TLT uses the median accepted length
  in the numerator). The caller computes it; the simulator's fast path calls
  `choose` once per chunk of iterations and `update` once with that chunk's n.

Stochastic tuners take their own ``rng`` (a numpy Generator or a seed).
"""
from __future__ import annotations

import bisect
import inspect
import math
from collections import deque
from typing import Callable, Sequence

import numpy as np

from tltsim.core.errors import TltsimError
from tltsim.control.knobs import check_known
from tltsim.control.strategy import DEFAULT_ARMS, Strategy, parse_arms


class Tuner:
    """Base: `arms` are the strategies a tuner may return from `choose`."""

    arms: tuple[Strategy, ...]

    def choose(self, batch_size: int) -> Strategy:
        raise NotImplementedError

    def update(self, strategy: Strategy, batch_size: int, reward: float, n: int = 1) -> None:
        """Record that `strategy` at `batch_size` earned `reward` on average over n iterations."""
        _check_update(self.arms, strategy, batch_size, reward, n)

    def state_dict(self) -> dict:
        """What the tuner has learned, and its generator's state, as plain data (none for a tuner that learns
        nothing)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned, on a tuner built with the same arms and knobs."""


def _check_update(arms, strategy, batch_size, reward, n) -> None:
    if strategy not in arms:
        raise ValueError(f"update: {strategy} is not one of the arms {[str(a) for a in arms]}")
    if batch_size < 1 or n < 1 or not math.isfinite(reward):
        raise ValueError(f"update: need batch_size >= 1, n >= 1, finite reward; "
                         f"got {batch_size}, {n}, {reward}")


class RewardWindow:
    """The last `size` reward samples of one arm; n equal samples are stored as one run."""

    def __init__(self, size: int):
        self.size = size
        self._runs: deque[list] = deque()  # [reward, count], oldest first
        self.count = 0                     # samples in the window, <= size
        self._median: float | None = None  # cached until the next add
        self._mean: float | None = None    # likewise

    def add(self, reward: float, n: int = 1) -> None:
        """Append n samples of `reward`, dropping the oldest beyond `size`."""
        if n >= self.size:
            self._runs.clear()
            self.count = 0
            n = self.size
        self._runs.append([reward, n])
        self.count += n
        while self.count > self.size:
            excess = self.count - self.size
            oldest = self._runs[0]
            if oldest[1] <= excess:
                self._runs.popleft()
                self.count -= oldest[1]
            else:
                oldest[1] -= excess
                self.count -= excess
        self._median = self._mean = None

    def state_dict(self) -> dict:
        return {"runs": [list(r) for r in self._runs], "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self._runs = deque([float(r), int(n)] for r, n in state["runs"])
        self.count = int(state["count"])
        self._median = self._mean = None

    @classmethod
    def restored(cls, size: int, state: dict) -> "RewardWindow":
        """A window of `size` holding what `state_dict` returned."""
        window = cls(size)
        window.load_state_dict(state)
        return window

    def median(self) -> float:
        """Median of the samples in the window (as np.median would give); +inf when empty."""
        if self.count == 0:
            return math.inf
        if self._median is None:  # plain Python: a window holds a few runs, and this runs every iteration
            lo_at, hi_at = (self.count - 1) // 2, self.count // 2  # sample indices, in sorted order
            lo, seen = None, 0
            for value, n in sorted(self._runs):
                seen += n  # samples up to and including this run
                if lo is None and lo_at < seen:
                    lo = value
                if hi_at < seen:
                    self._median = float((lo + value) / 2)
                    break
        return self._median

    def mean(self) -> float:
        """Mean of the samples in the window; +inf when empty."""
        if self.count == 0:
            return math.inf
        if self._mean is None:
            self._mean = float(sum(value * n for value, n in self._runs) / self.count)
        return self._mean


class BEGTuner(Tuner):
    """Bucketed epsilon-greedy (BEG-MAB), TLT (ASPLOS 2026) strategy tuner.

    Buckets. Arms are grouped by verify tokens; the groups, largest verify
    first, are assigned to batch-size buckets ``[t_0, t_1), [t_1, t_2), ...,
    [t_last, inf)`` given by `thresholds` (batch sizes below t_0 fall in the
    first bucket): large trees for small batches, where verification is
    memory-bound and extra verify tokens are nearly free. With m verify groups
    and B buckets, group j (0 = largest verify) goes to bucket floor(j*B/m):
    m == B gives one group per bucket (default arms, thresholds [1, 2, 5, 21]:
    bs 1 -> 48, 2-4 -> 32, 5-20 -> 16, >= 21 -> 8); m > B puts consecutive
    groups together; a bucket left empty (m < B) takes group floor(i*m/B).

    Guard. At batch size b, arms with verify x b > `max_verify_tokens` (2048)
    are left out; if no arm of the bucket is left, the arm(s) with the
    smallest verify of all arms are used instead.

    Choice. With probability `eps` a uniformly random candidate (explore);
    otherwise the candidate with the largest median reward over its last
    `window` samples in this bucket (exploit), an untried arm scoring +inf,
    ties to the earlier arm in `arms`.
    """

    def __init__(self, arms: Sequence = DEFAULT_ARMS, *, rng, eps: float = 0.1,
                 window: int = 300, thresholds: Sequence[int] = (1, 2, 5, 21),
                 max_verify_tokens: int | None = 2048):
        self.arms = parse_arms(arms)
        self.rng = np.random.default_rng(rng)
        if not 0.0 <= eps <= 1.0:
            raise TltsimError(f"tuner eps={eps!r}: must be in [0, 1] (exploration probability)")
        if not isinstance(window, int) or window < 1:
            raise TltsimError(f"tuner window={window!r}: must be an integer >= 1 (reward samples kept)")
        thresholds = tuple(thresholds)
        if (not thresholds or any(not isinstance(t, int) or t < 1 for t in thresholds)
                or list(thresholds) != sorted(set(thresholds))):
            raise TltsimError(f"tuner thresholds={list(thresholds)!r}: must be increasing "
                              "positive batch sizes like [1, 2, 5, 21]")
        if max_verify_tokens is not None and max_verify_tokens < 1:
            raise TltsimError(f"tuner max_verify_tokens={max_verify_tokens!r}: must be >= 1 or None")
        self.eps = eps
        self.window = window
        self.thresholds = thresholds
        self.max_verify_tokens = max_verify_tokens
        self.buckets = _assign_buckets(self.arms, len(thresholds))
        smallest = min(a.verify for a in self.arms)
        self._fallback = tuple(a for a in self.arms if a.verify == smallest)
        self._windows: dict[tuple[int, Strategy], RewardWindow] = {}

    def bucket_of(self, batch_size: int) -> int:
        """Index of the batch-size bucket `batch_size` falls in."""
        return max(bisect.bisect_right(self.thresholds, batch_size) - 1, 0)

    def candidates(self, batch_size: int) -> tuple[Strategy, ...]:
        """The arms `choose` picks among at this batch size (bucket, then guard)."""
        arms = self.buckets[self.bucket_of(batch_size)]
        if self.max_verify_tokens is not None:
            arms = tuple(a for a in arms if a.verify * batch_size <= self.max_verify_tokens)
        return arms or self._fallback

    def median_reward(self, strategy: Strategy, batch_size: int) -> float:
        """The windowed median reward of `strategy` in the bucket of `batch_size` (+inf untried)."""
        window = self._windows.get((self.bucket_of(batch_size), strategy))
        return math.inf if window is None else window.median()

    def choose(self, batch_size: int) -> Strategy:
        cands = self.candidates(batch_size)
        if self.rng.random() < self.eps:
            return cands[int(self.rng.integers(len(cands)))]
        # the largest windowed median (+inf untried), the earlier arm on a tie, as np.argmax picks (in plain Python:
        # this runs every speculative chunk)
        bucket = self.bucket_of(batch_size)
        best, best_score = None, None
        for arm in cands:
            window = self._windows.get((bucket, arm))
            score = math.inf if window is None else window.median()
            if best is None or score > best_score:
                best, best_score = arm, score
        return best

    def update(self, strategy: Strategy, batch_size: int, reward: float, n: int = 1) -> None:
        super().update(strategy, batch_size, reward, n)
        key = (self.bucket_of(batch_size), strategy)
        if key not in self._windows:
            self._windows[key] = RewardWindow(self.window)
        self._windows[key].add(float(reward), int(n))

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state,
                "windows": [[b, str(s), w.state_dict()] for (b, s), w in self._windows.items()]}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._windows = {}
        for b, s, w in state["windows"]:
            self._windows[(int(b), Strategy.parse(s))] = window = RewardWindow(self.window)
            window.load_state_dict(w)


def _assign_buckets(arms: tuple[Strategy, ...], num_buckets: int) -> list[tuple[Strategy, ...]]:
    verifies = sorted({a.verify for a in arms}, reverse=True)
    m = len(verifies)
    groups = [tuple(a for a in arms if a.verify == v) for v in verifies]
    buckets: list[tuple[Strategy, ...]] = [() for _ in range(num_buckets)]
    for j, group in enumerate(groups):
        buckets[j * num_buckets // m] += group
    return [b or groups[i * m // num_buckets] for i, b in enumerate(buckets)]


class EpsilonGreedyTuner(BEGTuner):
    """Plain epsilon-greedy: BEG's estimator (windowed median) with no buckets and no guard.

    One bucket for all batch sizes, so it learns one best arm for the whole
    rollout; comparing it with BEG isolates what the bucketing and guard buy.
    """

    def __init__(self, arms: Sequence = DEFAULT_ARMS, *, rng, eps: float = 0.1,
                 window: int = 300):
        super().__init__(arms, rng=rng, eps=eps, window=window, thresholds=(1,),
                         max_verify_tokens=None)


class UCB1Tuner(Tuner):
    """UCB1 (Auer et al., 2002) over all arms, ignoring the batch size.

    Every arm is tried once first (in `arms` order). Then it picks the arm
    maximising ``mean + c * scale * sqrt(2 ln N / n_arm)`` where N counts all
    samples, n_arm those of the arm (an update with n counts n samples) and
    `scale` is the largest |reward| seen, since rewards (tokens/s) are not in
    [0, 1]. Ties are broken by `rng`.
    """

    def __init__(self, arms: Sequence = DEFAULT_ARMS, *, rng, c: float = 1.0):
        self.arms = parse_arms(arms)
        self.rng = np.random.default_rng(rng)
        if not c >= 0:
            raise TltsimError(f"tuner c={c!r}: must be >= 0 (exploration weight)")
        self.c = c
        self._count = np.zeros(len(self.arms))
        self._sum = np.zeros(len(self.arms))
        self._scale = 0.0

    def choose(self, batch_size: int) -> Strategy:
        untried = np.flatnonzero(self._count == 0)
        if untried.size:
            return self.arms[int(untried[0])]
        mean = self._sum / self._count
        bonus = self.c * self._scale * np.sqrt(2 * np.log(self._count.sum()) / self._count)
        score = mean + bonus
        best = np.flatnonzero(score == score.max())
        return self.arms[int(self.rng.choice(best))]

    def update(self, strategy: Strategy, batch_size: int, reward: float, n: int = 1) -> None:
        super().update(strategy, batch_size, reward, n)
        i = self.arms.index(strategy)
        self._count[i] += n
        self._sum[i] += reward * n
        self._scale = max(self._scale, abs(reward))

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "count": self._count.tolist(), "sum": self._sum.tolist(),
                "scale": self._scale}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._count, self._sum = np.array(state["count"], dtype=float), np.array(state["sum"], dtype=float)
        self._scale = float(state["scale"])


class FixedTuner(Tuner):
    """Always the same strategy (no tuning); `update` only checks its arguments."""

    def __init__(self, strategy):
        self.strategy = Strategy.parse(strategy)
        self.arms = (self.strategy,)

    def choose(self, batch_size: int) -> Strategy:
        return self.strategy


class OracleTuner(Tuner):
    """Picks the arm with the largest `expected_reward(strategy, batch_size)`.

    Given the simulator's own cost and acceptance models it knows the true
    expected reward, so it bounds what any tuner can achieve on those models.
    Ties go to the earlier arm; `update` only checks its arguments.
    """

    def __init__(self, arms: Sequence = DEFAULT_ARMS, *,
                 expected_reward: Callable[[Strategy, int], float]):
        self.arms = parse_arms(arms)
        self.expected_reward = expected_reward

    def choose(self, batch_size: int) -> Strategy:
        return max(self.arms, key=lambda a: self.expected_reward(a, batch_size))


TUNERS = {"beg": BEGTuner, "egreedy": EpsilonGreedyTuner, "ucb": UCB1Tuner,
          "fixed": FixedTuner, "oracle": OracleTuner}


def make_tuner(name: str, arms: Sequence = DEFAULT_ARMS, seed=0, **knobs) -> Tuner:
    """Build the tuner registered as `name` over `arms`, seeded by `seed`.

    Knobs are the keyword arguments of its class (e.g. ``eps``, ``window`` for
    beg; ``strategy`` for fixed, default the first arm; ``expected_reward`` for
    oracle, required). Unknown names and knobs raise TltsimError.
    """
    if name not in TUNERS:
        raise TltsimError(f"tuner {name!r}: unknown; expected one of {', '.join(TUNERS)}")
    cls = TUNERS[name]
    params = inspect.signature(cls).parameters
    allowed = [p for p in params if p not in ("arms", "rng")]
    check_known(f"tuner {name!r}", knobs, allowed)
    arms = parse_arms(arms)
    if name == "fixed":
        return FixedTuner(knobs.get("strategy", arms[0]))
    if name == "oracle" and "expected_reward" not in knobs:
        raise TltsimError("tuner 'oracle': needs expected_reward(strategy, batch_size)")
    if "rng" in params:
        knobs["rng"] = seed
    return cls(arms, **knobs)
