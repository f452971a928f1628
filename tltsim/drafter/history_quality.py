"""History drafting's quality (DAS, SuffixDecoding: `real/drafters/suffix.py`) from what a trace holds, and its lookup cost.

A history drafter has no weights: it drafts from the text its index holds, so its quality q (the top-1
acceptance at the first drafted position, as tltsim.drafter.acceptance defines it) grows with the history a
request can draft from. A trace says how much that is for each response:

* its finished siblings: the responses of its prompt in the same step that are shorter than it. Siblings
  start together, so the shorter ones finish first and are whole in the index while it is still decoding
  (aborted ones, of no tokens, add nothing);
* its siblings still in flight: the others (as long or longer), in the index only as far as they have got;
* its prompt's earlier responses: the responses of the same prompt_id finished in earlier steps (the policy
  counts them only when told that the trace's prompt_id names one prompt across steps: tltsim/policies/tlt.py,
  `history_repeats`).

The model (`HistoryQuality`):

    h = finished + IN_FLIGHT * in_flight + earlier          (siblings' worth of history)
    q(h) = Q_PROMPT + PER_SIBLING * min(h, H_MAX)

so a request with no history (group of 1, no repeat) drafts from its prompt alone at Q_PROMPT, and more history
never lowers q. H_MAX is the most history the fit saw: the model does not extrapolate past its data. Why a
line: over the history measured (up to 2G - 1 siblings' worth) the measured q rises with no sign of levelling
off, so a saturating curve's limit is not determined by the data (fitted, one runs to q = 1 with a scale
beyond the data); the cap keeps the line from promising more than was measured.

The constants come from two fits. Q_PROMPT and PER_SIBLING are fitted to published acceptance of suffix
drafting on RL rollouts of reasoning models on GPUs (`SEER_TAU`: Seer, arXiv 2511.14617v3, Figure 11, with Table 3's
workloads): Q_PROMPT to SuffixDecoding without group context, PER_SIBLING by least squares to Seer's grouped suffix
trees on three workloads, each figure the iteration's tokens a verify (`iteration_tau`) with every group in flight
together (`fit_published`; `docs/investigations/suffix_acceptance.py` prints each figure beside the model).
IN_FLIGHT, H_MAX and LOOKUP_FRACTION come from real/'s own rows (`fit`, `fit_lookup`), which the published figures
cannot separate: `benchmarks/bench_drafters.py --parts acceptance --rows` decodes groups of G samples of a real model's
prompts with `real.drafters.suffix` (a chain of 4) three ways: one after another (sibling j drafts from j finished
siblings), all G in flight together (its finish rank among them gives finished and in-flight siblings), and again
in a later step (G earlier responses, then j finished). Each row's tokens per call is turned into q by inverting the
acceptance model (`invert_quality`), and the model is fitted to those q by least squares, each row weighted by its
target calls (a row without a count weighs 1). Those rows, SmolLM2-135M's 32-token answers to one word problem,
give a lower line than the reasoning rollouts do (suffix_acceptance.md sets the two side by side). The rows ship
with tltsim as package data, tltsim/drafter/data/history_rows.jsonl (its provenance: tltsim/drafter/data/README.md);
`docs/investigations/history_model_fit.py` refits and prints them beside the model
(docs/design.md#history-drafting-in-the-simulator).

What a history draft accepts: `real.drafters.suffix` drafts a chain of the strategy's verify tokens, so its accepted
length is the acceptance model's for that chain at q (`ChainAcceptance`); the hybrid's rows take the better q
of the two drafters on the strategy's tree (`hybrid`).

The lookup: a history draft costs no forward pass, only the index's lookup and its catch-up on the accepted
tokens: LOOKUP_FRACTION of the verify forward's time a speculative iteration, the ratio measured side by side
with the target's forward by the same benchmark (`fit_lookup`; both ran on the same CPU, so the ratio, not the
milliseconds of a loaded machine, is what carries over).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tltsim.control.strategy import Strategy
from tltsim.core.errors import TltsimError
from tltsim.drafter.acceptance import AcceptanceModel, invert_quality

# Fitted by `fit_published` to SEER_TAU (tests/drafter/test_history_quality.py refits them).
Q_PROMPT = 0.43646     # no history but the prompt
PER_SIBLING = 0.01072   # q gained per sibling's worth of history
# Fitted by `fit` to data/history_rows.jsonl, ROWS (tests/drafter/test_history_quality.py refits them).
IN_FLIGHT = 0.71504     # what a sibling still in flight is worth against a finished one
H_MAX = 15.0            # the most history among the fitted rows (at the fitted IN_FLIGHT): q(H_MAX) beyond it
# Fitted by `fit_lookup` to the same file's lookup rows: the lookup's share of a target forward's time.
LOOKUP_FRACTION = 3.1068e-4

ROWS = Path(__file__).resolve().parent / "data" / "history_rows.jsonl"  # package data: tltsim/drafter/data/README.md


class SeerFigure(NamedTuple):
    """One of Seer's (arXiv 2511.14617v3) Figure 11 acceptance lengths, beside its Table 3 workload."""

    workload: str
    requests: int  # responses an iteration
    group: int  # responses a prompt
    cap: int  # the longest a response may run
    mean: int  # generated tokens a response, on average
    grouped: bool  # the group's responses in the drafter's index (Seer's grouped suffix trees) or not (SuffixDecoding)
    chain: int  # the most tokens drafted a verify
    tau: float  # tokens a verify (the bonus token included) of a rollout iteration on veRL


SEER_TAU = (
    SeerFigure("Moonlight", 3200, 8, 65536, 22386, False, 16, 1.67),
    SeerFigure("Moonlight", 3200, 8, 65536, 22386, True, 8, 1.89),
    SeerFigure("Qwen2-VL-72B", 9600, 16, 40960, 7615, True, 8, 2.15),
    SeerFigure("Kimi-K2", 6400, 8, 98304, 38959, True, 8, 1.77),
)


@dataclass(frozen=True)
class HistoryQuality:
    """q of a history drafter from a request's history (see the module docstring)."""

    q_prompt: float = Q_PROMPT
    per_sibling: float = PER_SIBLING
    in_flight: float = IN_FLIGHT
    h_max: float = H_MAX

    def history(self, finished, in_flight, earlier) -> np.ndarray:
        """Siblings' worth of history: finished + in_flight x IN_FLIGHT + earlier (arrays or numbers)."""
        return np.asarray(finished, float) + self.in_flight * np.asarray(in_flight, float) + np.asarray(earlier, float)

    def quality(self, h) -> np.ndarray:
        """q at `h` siblings' worth of history: q_prompt at 0, rising by per_sibling a sibling up to h_max, flat
        beyond (and never above 1)."""
        h = np.minimum(np.asarray(h, float), self.h_max)
        return np.minimum(1.0, self.q_prompt + self.per_sibling * h)

    def of_step(self, group, response_len, earlier) -> np.ndarray:
        """Per row of one step, its q: `group` (the prompt group of each row), `response_len` (0: aborted) and
        `earlier` (responses of the row's prompt finished in earlier steps)."""
        finished, in_flight = siblings(group, response_len)
        return self.quality(self.history(finished, in_flight, earlier))


@dataclass(frozen=True)
class ChainAcceptance:
    """The accepted length of a history draft: `real.drafters.suffix` drafts a chain of the strategy's `verify` tokens
    (its tree's depth and top-k unused), so strategy d_k_v is the acceptance model's chain of v."""

    model: AcceptanceModel = AcceptanceModel()

    def mean(self, strategy: Strategy, q: float) -> float:
        return self.model.mean(Strategy.chain(strategy.verify), q)

    def sample(self, strategy: Strategy, q, rng: np.random.Generator, size: int | None = None):
        return self.model.sample(Strategy.chain(strategy.verify), q, rng, size)


def iteration_tau(model: HistoryQuality, group, response_len, chain: int, grouped: bool = True) -> float:
    """A rollout iteration's tokens a verify (what Seer's tau is): every response of `group` in flight together at
    its own q (its siblings' history where `grouped`, its prompt's alone where not), drafting a chain of `chain`;
    its tokens over its verifies. A response's q is the one its history gives by its end, for all its tokens, as
    `of_step` has it."""
    n = np.asarray(response_len, float)
    q = model.of_step(group, response_len, np.zeros(len(n))) if grouped else np.full(len(n), model.q_prompt)
    acceptance, strategy = AcceptanceModel(), Strategy.chain(chain)
    per_row = np.array([acceptance.mean(strategy, float(x)) for x in q])
    return float(n.sum() / (n / per_row).sum())


def seer_trace(figure: SeerFigure, steps: int = 1):
    """A trace of a Seer figure's workload: `steps` iterations of its requests in its groups, their lengths drawn
    lognormal (the spread of math rollouts, tltsim.trace.synth.MATH_SIGMA; Table 3 gives no spread) to its mean
    under its cap, seed 0."""
    from tltsim.trace.synth import MATH_SIGMA, lognormal_median, synth

    median = lognormal_median(figure.mean, figure.cap, MATH_SIGMA)
    return synth("lognormal", steps, figure.requests // figure.group, figure.group, figure.cap, 0, median=median,
                 sigma=MATH_SIGMA)


def seer_tau(model: HistoryQuality, figure: SeerFigure) -> float:
    """The model's tokens a verify on a Seer figure's workload, its first iteration (`iteration_tau`)."""
    return iteration_tau(model, *_seer_iteration(figure), figure.chain, figure.grouped)


@lru_cache(maxsize=None)
def _seer_iteration(figure: SeerFigure) -> tuple[np.ndarray, np.ndarray]:
    """Each response's group and length in the first iteration of `seer_trace(figure)`, drawn once (a fit evaluates
    the same workloads many times), read-only."""
    df = seer_trace(figure).df
    group, lengths = df["prompt_id"].to_numpy(), df["response_len"].to_numpy()
    group.flags.writeable = lengths.flags.writeable = False
    return group, lengths


def fit_published(figures=SEER_TAU) -> HistoryQuality:
    """Q_PROMPT and PER_SIBLING fitted to published acceptance: Q_PROMPT the q whose chain accepts the ungrouped
    figures' tokens a verify (their mean), PER_SIBLING by least squares on the grouped ones; IN_FLIGHT and H_MAX as
    the rows fit them."""
    from scipy.optimize import minimize_scalar

    acceptance = AcceptanceModel()
    q_prompt = float(np.mean([invert_quality(acceptance, Strategy.chain(f.chain), f.tau)
                              for f in figures if not f.grouped]))
    grouped = [f for f in figures if f.grouped]
    loss = lambda s: sum((seer_tau(HistoryQuality(q_prompt, s), f) - f.tau) ** 2 for f in grouped)  # noqa: E731
    best = minimize_scalar(loss, bounds=(0.0, 0.1), method="bounded", options={"xatol": 1e-7})
    return HistoryQuality(round(q_prompt, 5), round(float(best.x), 6))


class HistoryDrafter:
    """A history drafter as the policy's drafter: no weights, nothing to train, no drift (its index holds the
    policy's own recent text); `quality` is its prompt-only q, what it has before any history is known (the
    per-request q is HistoryQuality's)."""

    model_free = True
    trainable = False

    def __init__(self, model: HistoryQuality = HistoryQuality()):
        self.model = model
        self.quality = model.q_prompt

    def policy_update(self) -> float:
        """No drift: returns the unchanged quality."""
        return self.quality


def siblings(group, response_len) -> tuple[np.ndarray, np.ndarray]:
    """Per row, (siblings that finished before it, siblings still in flight with it): within its group, the
    responses shorter than it and the others; aborted responses (response_len 0) are neither."""
    group = np.asarray(group)
    length = np.asarray(response_len, np.int64)
    finished = np.zeros(len(length), np.int64)
    in_flight = np.zeros(len(length), np.int64)
    if not len(length):
        return finished, in_flight
    order = np.lexsort((length, group))
    g, n = group[order], length[order]
    starts = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
    for a, b in zip(starts, [*starts[1:], len(n)]):
        live = n[a:b][n[a:b] > 0]
        below = np.searchsorted(live, n[a:b], side="left")  # live siblings strictly shorter
        finished[order[a:b]] = np.where(n[a:b] > 0, below, 0)
        in_flight[order[a:b]] = np.where(n[a:b] > 0, len(live) - 1 - below, 0)
    return finished, in_flight


def read_rows(path: str | Path = ROWS) -> list[dict]:
    """The JSON lines `bench_drafters.py --rows` wrote; TltsimError for a missing or malformed file."""
    path = Path(path)
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        raise TltsimError(f"{path}: cannot read the drafter benchmark's rows ({e}); write them with "
                          f"`python benchmarks/bench_drafters.py --parts acceptance --rows {path}`") from None


def history_of(row: dict) -> tuple[int, int, int]:
    """(finished, in_flight, earlier) siblings of one acceptance row, from its arrangement and pass."""
    g, rank = int(row["group"]), int(row["rank"])
    if row["arrangement"] == "in flight together":
        return rank, g - 1 - rank, 0
    return rank, 0, g if row["pass"].startswith("step 2") else 0


def measured_quality(row: dict, model: AcceptanceModel = AcceptanceModel()) -> float:
    """The q whose mean accepted length is the row's tokens per call, at its strategy."""
    return invert_quality(model, Strategy.parse(row["strategy"]), float(row["tokens_per_call"]))


def fit(rows: list[dict], task: str | None = None) -> HistoryQuality:
    """HistoryQuality fitted to the acceptance rows (of `task`, or all): least squares on q, weighted by calls."""
    from scipy.optimize import least_squares

    acc = [r for r in rows if r.get("kind") == "acceptance" and (task is None or r["task"] == task)]
    if len(acc) < 4:
        raise TltsimError(f"history fit: {len(acc)} acceptance rows{f' of task {task}' if task else ''}; need 4 "
                          f"or more (bench_drafters.py --parts acceptance --rows)")
    parts = np.array([history_of(r) for r in acc], float)
    q = np.array([measured_quality(r) for r in acc])
    w = np.sqrt(weights(acc))

    def residual(x):
        m = HistoryQuality(*x, h_max=math.inf)
        return w * (m.quality(m.history(*parts.T)) - q)

    res = least_squares(residual, [float(np.min(q)), 0.01, 0.5], bounds=([0.0, 0.0, 0.0], [1.0, 1.0, 1.0]),
                        xtol=1e-12, ftol=1e-12, gtol=1e-12)
    fitted = HistoryQuality(*(float(v) for v in res.x), h_max=math.inf)
    return HistoryQuality(*(float(v) for v in res.x), h_max=float(fitted.history(*parts.T).max()))


def weights(rows: list[dict]) -> np.ndarray:
    """Each acceptance row's weight in the fit: its target calls, 1 where it has no count."""
    return np.array([r.get("calls", 1) for r in rows], float)


def fit_lookup(rows: list[dict], task: str | None = None) -> float:
    """The lookup's share of a target forward: the per-batch medians of lookup / forward, averaged weighted by
    their iterations."""
    lk = [r for r in rows if r.get("kind") == "lookup" and (task is None or r["task"] == task)]
    if not lk:
        raise TltsimError("history lookup fit: no lookup rows (bench_drafters.py --parts acceptance --rows)")
    return float(np.average([r["lookup/forward"] for r in lk], weights=[r["iterations"] for r in lk]))


def hybrid(history_q, trained_q) -> np.ndarray:
    """q of the hybrid (`real/drafters/hybrid.py`: per row the history draft where its match is long and confident, else
    the trained drafter's): per row the better of the two (docs/design.md#history-drafting-in-the-simulator)."""
    return np.maximum(np.asarray(history_q, float), float(trained_q))


def weighted_mean(q, weights) -> float:
    """The tokens-weighted mean of per-row qualities (an engine's one q for its rollout); nan with no tokens."""
    weights = np.asarray(weights, float)
    total = weights.sum()
    return float(np.dot(np.asarray(q, float), weights) / total) if total > 0 else math.nan
