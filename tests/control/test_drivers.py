"""The three executors drive one EngineControl the same way: the simulator's fast path (a segment at a time),
its exact path and `real/`'s rollout loop (an iteration at a time), given the same world, decide the same.

The world is scripted so that every executor sees the same thing: each speculative iteration accepts no
draft (one bonus token a row, as plain decoding gains), so the batch shrinks alike whatever is decided; every
time is a dyadic fraction, so sums and differences are exact; the fast path re-decides every iteration
(chunk_iters 1). The real loop runs on a scripted engine with the same times in place of a model."""
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import simpy

from real.engine.adaptive import rollout
from tltsim.control import EngineControl, Strategy
from tltsim.control.decisions import DecisionKnobs
from tltsim.sim.engine import exact_rollout, fast_rollout
from tltsim.sim.speculation import Speculation

PROMPT, LENGTHS, MAX_RUNNING = 4, [3, 6, 12, 20, 4], 3
KNOBS = DecisionKnobs(threshold=3, patience=2, tuner="egreedy", arms=("2_1_2", "3_1_3"), eps=0.3)
LEARNED = replace(KNOBS, sd="learned")  # tlt-auto's switch (no prior: a real run has none)
ROLLOUTS = 3


class Cost:
    """Plain iteration 1 s; a verify 0.25 s a row + 0.125 s a token per row; a drafter forward 0.0625 s a row
    and top-k; a prefill (and the drafter's build at the switch) 0.5 s. Speculating pays at batch 1 only."""

    kv_capacity_tokens = 10**9
    padded_prefill = False

    def decode_time(self, batch, ctx):
        return np.full(np.shape(batch), 1.0)

    def verify_time(self, batch, tokens_per_request, ctx):
        return 0.25 * np.asarray(batch, dtype=float) + 0.125 * np.asarray(tokens_per_request, dtype=float)

    def draft_time(self, batch, topk=1):
        return 0.0625 * np.asarray(batch, dtype=float) * topk

    def catchup_time(self, batch, tokens_per_row, ctx):
        return self.draft_time(np.asarray(batch, dtype=float) * np.asarray(tokens_per_row, dtype=float))

    def prefill_time(self, tokens, sq_tokens=None):
        return np.where(np.asarray(tokens, dtype=float) > 0, 0.5, 0.0)

    def switch_time(self, batch, ctx, sq_tokens):
        return self.prefill_time(ctx)

    def segment_time(self, q, k, ctx0, growth, n):
        k = np.asarray(k, dtype=float)
        return np.asarray(n, dtype=float) * np.where(k > 1, self.verify_time(np.asarray(q) / k, k, ctx0), 1.0)


class BonusOnly:
    """Acceptance: every verify accepts no draft, only the bonus token."""

    def mean(self, strategy, q):
        return 1.0

    def sample(self, strategy, q, rng, size):
        return np.ones(size, dtype=int)


class Recording(EngineControl):
    """An EngineControl that logs, per iteration, the batch and what ran (a strategy, or "" for plain)."""

    def __init__(self, knobs=KNOBS):
        base = knobs.control(0, seed=7)
        super().__init__(base.switch, base.tuner, base.guard)
        self.log = []

    def observe_plain(self, batch, seconds, n=1):
        self.log += [(batch, "")] * n
        super().observe_plain(batch, seconds, n)

    def observe_spec(self, strategy, batch, tokens, seconds, catchup_s=0.0, iters=1):
        self.log += [(batch, str(strategy))] * int(round(iters))
        super().observe_spec(strategy, batch, tokens, seconds, catchup_s, iters)


class ScriptedEngine:
    """Stands in for real.engine.generate.Engine: rows of LENGTHS tokens, each iteration one token a row, timed by Cost
    as the simulator times it (the drafter's build or catch-up reported as the iteration's catchup_s)."""

    def __init__(self, drafter="scripted"):
        self.cost, self.left, self.finished, self.iterations = Cost(), {}, {}, []
        self.lengths, self.drafted, self.behind, self.drafter = list(LENGTHS), False, 0, drafter

    paused = 0  # rows waiting on a tool call: these rows call none

    @property
    def running(self):
        return len(self.left)

    def add(self, prompts, answers=None, budgets=None):  # real.engine.generate.Engine's signature; these rows' lengths are scripted
        ids = list(range(len(self.finished) + len(self.left), len(self.finished) + len(self.left) + len(prompts)))
        self.left.update((i, self.lengths[i]) for i in ids)
        self.iterations.append(SimpleNamespace(batch_size=len(prompts), tokens=0, wall_s=0.5))
        return ids

    def step(self, mode, strategy=None):
        b, cost = self.running, self.cost
        catchup = 0.0
        if mode == "spec_decode":
            s = Strategy.parse(strategy)
            steady = s.depth * float(cost.draft_time(b, s.topk)) + float(cost.verify_time(b, s.verify + 1, 0))
            catchup = float(cost.catchup_time(b, self.behind, 0)) if self.drafted else float(cost.switch_time(b, 0, 0))
            wall, self.drafted, self.behind = steady + catchup, True, 0
        else:
            wall = 1.0
            self.behind += 1 if self.drafted else 0
        for i in list(self.left):
            self.left[i] -= 1
            if self.left[i] == 0:
                self.finished[i] = self.left.pop(i)
        return SimpleNamespace(accepted=[0] * b, wall_s=wall, catchup_s=catchup, reprefill=catchup > 0, tokens=b)


def speculation(control, drafter=True):
    """The simulator's Speculation for `control`, or None for an engine without a drafter (plain decoding)."""
    return Speculation(control=control, acceptance=BonusOnly(), quality=0.9, chunk_iters=1,
                       rng=np.random.default_rng(0)) if drafter else None


# Each driver begins the control's rollout first, as the owner of the step does (the simulator's policy at the
# step's start, real/'s worker); the executors never do.
def drive_fast(control, drafter=True):
    control.begin_rollout()
    return fast_rollout([PROMPT] * len(LENGTHS), LENGTHS, Cost(), MAX_RUNNING, speculation(control, drafter))


def drive_exact(control, drafter=True):
    control.begin_rollout()
    env, out = simpy.Environment(), {}
    env.process(exact_rollout(env, [PROMPT] * len(LENGTHS), LENGTHS, Cost(), MAX_RUNNING,
                              speculation(control, drafter), out))
    env.run()
    return out["rollout"]


def drive_real(control, drafter=True):
    control.begin_rollout()
    return rollout(ScriptedEngine("scripted" if drafter else None), [[1] * PROMPT] * len(LENGTHS), lambda: 0.0,
                   control, max_running=MAX_RUNNING)


def drive_all(knobs=KNOBS, drafter=True):
    """Each executor drives a fresh control through ROLLOUTS rollouts: (logs per executor, per rollout), controls."""
    logs, controls = [], []
    for drive in (drive_fast, drive_exact, drive_real):
        control = Recording(knobs)
        per_rollout = []
        for _ in range(ROLLOUTS):
            start = len(control.log)
            drive(control, drafter)
            per_rollout.append(control.log[start:])
        logs.append(per_rollout)
        controls.append(control)
    return logs, controls


def test_fast_exact_and_real_drivers_decide_alike():
    logs, controls = drive_all()
    fast, exact, real = logs
    assert fast == exact == real
    # they learned the very same: the tuner's windows and generator, the guard's measures (the fast path stores a
    # segment's plain iterations as one run of the window)
    tuner, guard = [[c.state_dict()[k] for c in controls] for k in ("tuner", "guard")]
    assert tuner[0] == tuner[1] == tuner[2] and guard[0]["spec"] == guard[1]["spec"] == guard[2]["spec"]
    assert len({tuple(c.guard.plain_rate(b) for b in (1, 2, 3)) for c in controls}) == 1
    # the scenario exercises every rule: the switch's patience, a batch tried once and refused, the tuner exploring
    tried = lambda log, batch: [s for b, s in log if b == batch and s]  # noqa: E731
    first = fast[0]
    assert first[:3] == [(3, ""), (3, ""), (3, "3_1_3")]  # patience 2 at batch <= 3, then the switch
    assert len(tried(first, 3)) == len(tried(first, 2)) == 1  # speculation lost there: tried once, then plain
    assert all(s for b, s in first if b == 1) and set(tried(first, 1)) == {"2_1_2", "3_1_3"}
    # the guard remembers across rollouts: a refused batch is tried again only after retry_plain (16) plain
    # iterations at it, then after twice as many
    at3 = [s for log in fast for b, s in log if b == 3]
    assert [i for i, s in enumerate(at3) if s] == [2, 2 + 16 + 1] and len(at3) > 2 + 16 + 1 + 1
    assert not tried(fast[1], 2) and not tried(fast[2], 2)


def test_a_switch_that_never_fires_tells_the_guard_alike():
    # threshold 1, patience 50: the batch reaches 1 for fewer iterations than that, so every rollout is plain
    never = DecisionKnobs(threshold=1, patience=50, tuner="egreedy", arms=KNOBS.arms, eps=0.3)
    logs, controls = drive_all(never)
    fast, exact, real = logs
    assert fast == exact == real
    assert fast[0] and all(s == "" for log in fast for _, s in log)
    assert not any(c.on for c in controls)
    # the guard measured plain decoding at every batch the rollouts ran, alike (the fast path told it too)
    rates = [tuple(c.guard.plain_rate(b) for b in (1, 2, 3)) for c in controls]
    assert len(set(rates)) == 1 and all(r > 0 for r in rates[0])
    assert len({c.state_dict()["guard"]["rollout"] for c in controls}) == 1


def test_without_a_drafter_every_executor_decodes_plainly_and_leaves_the_control_alone():
    logs, controls = drive_all(drafter=False)
    assert logs == [[[]] * ROLLOUTS] * 3  # no executor asked or told the control anything
    fresh = Recording()
    for _ in range(ROLLOUTS):
        fresh.begin_rollout()
    assert all(c.state_dict() == fresh.state_dict() for c in controls)
    fast, exact, real = Recording(), Recording(), Recording()
    a, b = drive_fast(fast, drafter=False), drive_exact(exact, drafter=False)
    assert a.duration == b.duration and a.finished_at.tolist() == b.finished_at.tolist()
    calls = drive_real(real, drafter=False).calls
    assert {c.mode for c in calls} == {"prefill", "decode"}
    assert sum(c.mode == "decode" for c in calls) == sum(r["mode"] == "decode" for r in b.iterations)


def test_drivers_decide_alike_with_the_learned_switch():
    """tlt-auto's switch: the three drivers decide alike and learn the same, and what it learns is this world's
    answer (speculating pays at batch 1 only)."""
    logs, controls = drive_all(LEARNED)
    fast, exact, real = logs
    assert fast == exact == real
    # the same learned: all but the plain windows (the fast path stores a segment's plain iterations as one run),
    # and those give the same rates
    states = [{k: v for k, v in c.state_dict()["switch"].items() if k != "plain"} for c in controls]
    assert states[0] == states[1] == states[2]
    assert len({tuple(c.switch.plain_rate(k) for k in range(3)) for c in controls}) == 1
    tried = lambda log, batch: [s for b, s in log if b == batch and s]  # noqa: E731
    first, later = fast[0], fast[1:]
    assert first[:3] == [(3, ""), (3, ""), (3, "3_1_3")]  # no prior: it starts from threshold 3, patience 2
    assert len(tried(first, 3) + tried(first, 2)) == 1  # bucket 2-3 tried once, lost, then plain
    assert tried(first, 1) and all(s for b, s in first if b == 1)
    switch = controls[0].switch
    assert switch.learned_threshold() == 1 and switch.speculating_buckets() == [0]
    for log in later:  # it learned: nothing above batch 1 speculates (bucket 2-3's measure is fresh); at batch 1,
        # after the switch's patience of 2 plain iterations, every iteration does
        at_one = [s for b, s in log if b == 1]
        assert not tried(log, 3) and not tried(log, 2) and at_one[:2] == ["", ""] and all(at_one[2:])


@pytest.mark.parametrize("knobs", [KNOBS, LEARNED], ids=["tlt", "tlt-auto"])
def test_a_checkpointed_control_decides_as_the_one_it_was_saved_from(knobs):
    """state_dict between rollouts, loaded into a fresh control: the next rollouts decide the same."""
    saved = Recording(knobs)
    drive_fast(saved)
    restored = Recording(knobs)
    restored.load_state_dict(saved.state_dict())
    for control in (saved, restored):
        control.log.clear()
        drive_fast(control)
        drive_fast(control)
    assert saved.log == restored.log and saved.state_dict() == restored.state_dict()
