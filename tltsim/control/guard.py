"""Whether speculating pays at the current batch: one rule for the simulator and for `real/`.

TLT turns speculation on below a batch threshold (`SDSwitch`); at batches where speculating is
slower than plain decoding (a drafter too weak, or drafting too dear for this device), a sane
engine decodes plainly instead. `SpeculationGuard` answers from what the engine observed, so the
simulator (which observes modelled times) and a real engine (which observes wall clocks) decide
the same way. Like the tuner, one guard per engine lives across rollouts.

* plain decoding's rate at batch b: b / (the least, over the observed batches at or above b, of
  the median seconds of their last plain iterations: decoding a smaller batch is no slower, so each
  is a bound, and one stalled iteration at a batch seen once does not make speculation look good;
  above every observed batch, the largest one's, which overstates the rate);
* speculation's rate at b: the mean reward (tokens per second of the batch, as the tuner is
  fed, whichever arm the tuner chose) of the last speculative iterations at exactly b. The mean, not
  the median: an iteration's gain is bursty (a history drafter's rows gain one token or the whole
  draft, little between), and what speculation delivers over a stretch of iterations is their mean;
  a median of mostly one-token gains refuses a batch where speculation is the faster. A stalled
  iteration only lowers the mean (a reward cannot be large), so it errs towards plain decoding;
* speculation pays at b while it has not been tried at b (so each batch size is tried), while its
  measurement there is on trial, and then while its rate beats plain decoding's. One iteration's reward
  is mostly noise: a history drafter's gains come in bursts, the first iteration after plain ones pays
  the drafter's catch-up, and a shared machine stalls; judged on it, a retry is refused at a batch where
  speculation pays over a stretch, and each such refusal doubles the wait (docs/investigations/guard_refusals.py
  counts a recorded run's refusals by the iterations that decided them). So a fresh measurement is judged
  after `trial` speculative iterations, or as soon as it cannot pay: when even the best rate speculation
  has ever shown at b, over the rest of the trial, would leave its mean at or below plain decoding's. A
  drafter that steadily loses is refused after one iteration, as without a trial; one whose bursts paid
  at b before gets the whole trial;
* a batch's speculative measurement expires `retry_after` rollouts after it was last renewed (the
  drafter changes between rollouts: spot training, policy drift), so a refused batch is tried again
  then, once;
* within a rollout, a refused batch is tried again after `retry_plain` plain iterations at it, the wait
  doubling with each refusal in a row there and starting over once a retry pays. A drafter's acceptance
  is not steady within a rollout: a history drafter accepts in stretches, where a row repeats what a
  sibling wrote, and nothing between them, so a window of misses would otherwise keep speculation off at
  that batch for the rest of the rollout and the next ones, however well it paid before and after. Where
  speculation truly loses, the doubling wait keeps the retries' cost to a few iterations a rollout.
"""
from __future__ import annotations

import bisect

from tltsim.control.tuner import RewardWindow


class SpeculationGuard:
    """Told every plain and speculative iteration's outcome; asked before every decode iteration."""

    def __init__(self, window: int = 8, retry_after: int = 4, retry_plain: int = 16, trial: int = 4):
        self.window = window  # iterations per batch size behind its estimates (plain: median; speculation: mean)
        self.trial = min(trial, window)  # speculative iterations in a fresh measurement before it is judged
        self.retry_after = retry_after  # rollouts after which a speculative measurement expires
        self.retry_plain = retry_plain  # plain iterations at a refused batch before it is tried again (x2 per refusal)
        self._plain: dict[int, RewardWindow] = {}  # batch -> seconds per plain iteration
        self._sizes: list[int] = []  # sorted keys of _plain
        self._floors: list[float] | None = None  # per _sizes[j]: the least median at _sizes[j:]; None: stale
        self._spec: dict[int, tuple[RewardWindow, int]] = {}  # batch -> (tokens/s of spec iterations, rollout)
        self._rollout = 0  # rollouts begun
        self._waited: dict[int, int] = {}  # refused batch -> plain iterations at it since it was refused
        self._refusals: dict[int, int] = {}  # batch -> retries in a row that were refused there
        self._best: dict[int, float] = {}  # batch -> the highest speculative reward ever observed there

    def begin_rollout(self) -> None:
        """A rollout starts (the executor calls this before its first iteration)."""
        self._rollout += 1

    def observe_plain(self, batch: int, seconds: float, n: int = 1) -> None:
        """`n` plain iterations at `batch` took `seconds` each (on average)."""
        n = max(1, int(n))
        if batch not in self._plain:
            self._plain[batch] = RewardWindow(self.window)
            bisect.insort(self._sizes, batch)
        self._plain[batch].add(float(seconds), n)
        self._floors = None
        if self.tried(batch) and not self.pays(batch):
            self._waited[batch] = self._waited.get(batch, 0) + n
            if self._waited[batch] >= self._wait(batch):  # waited long enough: the next decision there tries again
                del self._spec[batch], self._waited[batch]
                self._refusals[batch] = self._refusals.get(batch, 0) + 1

    def observe_spec(self, batch: int, reward: float, n: int = 1) -> None:
        """`n` speculative iterations at `batch` made `reward` tokens per second (the tuner's reward)."""
        if not self.tried(batch):  # first, or expired: a fresh window
            self._spec[batch] = (RewardWindow(self.window), self._rollout)
        window, _ = self._spec[batch]
        window.add(float(reward), max(1, int(n)))
        self._spec[batch] = (window, self._rollout)
        self._best[batch] = max(self._best.get(batch, 0.0), float(reward))
        self._waited.pop(batch, None)
        if self.to_try(batch) == 0 and self.pays(batch):  # judged, and it pays: a later refusal waits retry_plain
            self._refusals.pop(batch, None)

    def state_dict(self) -> dict:
        """What the guard has observed, as plain data."""
        return {"rollout": self._rollout, "plain": [[b, w.state_dict()] for b, w in self._plain.items()],
                "spec": [[b, w.state_dict(), r] for b, (w, r) in self._spec.items()],
                "waited": sorted(self._waited.items()), "refusals": sorted(self._refusals.items()),
                "best": sorted(self._best.items())}

    def load_state_dict(self, state: dict) -> None:
        self._rollout = int(state["rollout"])
        self._plain = {int(b): RewardWindow.restored(self.window, w) for b, w in state["plain"]}
        self._spec = {int(b): (RewardWindow.restored(self.window, w), int(r)) for b, w, r in state["spec"]}
        self._sizes = sorted(self._plain)
        self._floors = None
        self._waited = {int(b): int(k) for b, k in state.get("waited", [])}  # a checkpoint from before retries: none
        self._refusals = {int(b): int(k) for b, k in state.get("refusals", [])}
        self._best = {int(b): float(r) for b, r in state.get("best", [])}  # from before the trial: none

    def plain_rate(self, batch: int) -> float:
        """Tokens per second of plain decoding at `batch`, estimated; 0 when nothing was observed."""
        if not self._sizes:
            return 0.0
        if self._floors is None:  # asked far more often than a plain iteration changes it: kept until then
            floors, least = [], float("inf")
            for size in reversed(self._sizes):
                least = min(least, self._plain[size].median())
                floors.append(least)
            self._floors = floors[::-1]
        i = min(bisect.bisect_left(self._sizes, batch), len(self._sizes) - 1)
        return batch / self._floors[i]

    def spec_rate(self, batch: int) -> float:
        """Tokens per second of speculation at `batch`, as measured (NaN when untried or expired)."""
        return self._spec[batch][0].mean() if self.tried(batch) else float("nan")

    def plain_left(self, batch: int) -> float:
        """Plain iterations at `batch` before speculation there is tried again: infinite unless it was refused."""
        if not self.tried(batch) or self.pays(batch):
            return float("inf")
        return self._wait(batch) - self._waited.get(batch, 0)

    def _wait(self, batch: int) -> int:
        """Plain iterations a refusal at `batch` waits out: retry_plain, doubled per refused retry in a row."""
        return self.retry_plain * 2 ** self._refusals.get(batch, 0)

    def to_try(self, batch: int) -> int:
        """Speculative iterations at `batch` at most before its measurement is judged (0 once it is): the rest
        of the trial, unless even the best rate ever seen at `batch` over that rest could not make it pay."""
        if not self.tried(batch):
            return self.trial
        window = self._spec[batch][0]
        left = self.trial - window.count
        best = self._best.get(batch, 0.0)  # none in a checkpoint from before the trial: judged at once
        if left <= 0 or window.mean() * window.count + left * best <= self.trial * self.plain_rate(batch):
            return 0
        return left

    def tried(self, batch: int) -> bool:
        """Whether speculation has an unexpired measurement at `batch`."""
        return batch in self._spec and self._rollout - self._spec[batch][1] < self.retry_after

    def pays(self, batch: int) -> bool:
        """Whether to speculate at `batch`: untried, on trial, or faster than plain decoding there."""
        return self.to_try(batch) > 0 or self.spec_rate(batch) > self.plain_rate(batch)
