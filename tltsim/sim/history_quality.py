"""History drafting's quality (DAS, SuffixDecoding: `real/suffix.py`) from what a trace holds, and its lookup cost.

A history drafter has no weights: it drafts from the text its index holds, so its quality q (the top-1
acceptance at the first drafted position, as tltsim.sim.acceptance defines it) grows with the history a
request can draft from. A trace says how much that is for each response:

* its finished siblings: the responses of its prompt in the same step that are shorter than it. Siblings
  start together, so the shorter ones finish first and are whole in the index while it is still decoding
  (aborted ones, of no tokens, add nothing);
* its siblings still in flight: the others (as long or longer), in the index only as far as they have got;
* its prompt's earlier responses: the responses of the same prompt_id finished in earlier steps.

The model (`HistoryQuality`):

    h = finished + IN_FLIGHT * in_flight + earlier          (siblings' worth of history)
    q(h) = Q_HISTORY - (Q_HISTORY - Q_PROMPT) * exp(-h / H_SCALE)

so a request with no history (group of 1, no repeat) drafts from its prompt alone at Q_PROMPT, and more history
never lowers q. The constants are fitted (`fit`) to `benchmarks/bench_drafters.py --parts acceptance --rows`,
which decodes groups of G samples of a real model's prompts with `real.suffix` (a chain of 4) three ways: one
after another (sibling j drafts from j finished siblings), all G in flight together (its finish rank among them
gives finished and in-flight siblings), and again in a later step (G earlier responses, then j finished). Each
row's tokens per call is turned into q by inverting the acceptance model (`invert_quality`), and the model is
fitted to those q by least squares, each row weighted by its target calls. The recorded rows are
benchmarks/results/bench_drafters_rows.jsonl; `benchmarks/fit_history.py` refits and prints them beside the
model (docs/design.md#history-drafting-in-the-simulator).

What a history draft accepts: `real.suffix` drafts a chain of the strategy's verify tokens, so its accepted
length is the acceptance model's for that chain at q (`ChainAcceptance`); the hybrid's rows take the better q
of the two drafters on the strategy's tree (`hybrid`).

The lookup: a history draft costs no forward pass, only the index's lookup and its catch-up on the accepted
tokens, on the host's CPU, in seconds that do not scale with the target: LOOKUP_S + LOOKUP_ROW_S x batch per
speculative iteration, fitted to the same benchmark's per-batch medians (`fit_lookup`).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tltsim.control.strategy import Strategy
from tltsim.errors import TltsimError
from tltsim.sim.acceptance import AcceptanceModel, invert_quality

# Fitted by `fit` to benchmarks/results/bench_drafters_rows.jsonl (tests/sim/test_history_quality.py refits them).
Q_PROMPT = 0.3   # no history but the prompt
Q_HISTORY = 0.6  # the limit with ever more history
H_SCALE = 4.0    # siblings' worth of history that closes 63% of the gap
IN_FLIGHT = 0.5  # what a sibling still in flight is worth against a finished one
# Fitted by `fit_lookup` to the same file's lookup rows: seconds per speculative iteration.
LOOKUP_S = 2.4e-4
LOOKUP_ROW_S = 5e-5

ROWS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "bench_drafters_rows.jsonl"


@dataclass(frozen=True)
class HistoryQuality:
    """q of a history drafter from a request's history (see the module docstring)."""

    q_prompt: float = Q_PROMPT
    q_history: float = Q_HISTORY
    h_scale: float = H_SCALE
    in_flight: float = IN_FLIGHT

    def history(self, finished, in_flight, earlier) -> np.ndarray:
        """Siblings' worth of history: finished + in_flight x IN_FLIGHT + earlier (arrays or numbers)."""
        return np.asarray(finished, float) + self.in_flight * np.asarray(in_flight, float) + np.asarray(earlier, float)

    def quality(self, h) -> np.ndarray:
        """q at `h` siblings' worth of history: Q_PROMPT at 0, rising to Q_HISTORY."""
        h = np.asarray(h, float)
        return self.q_history - (self.q_history - self.q_prompt) * np.exp(-h / self.h_scale)

    def of_step(self, group, response_len, earlier) -> np.ndarray:
        """Per row of one step, its q: `group` (the prompt group of each row), `response_len` (0: aborted) and
        `earlier` (responses of the row's prompt finished in earlier steps)."""
        finished, in_flight = siblings(group, response_len)
        return self.quality(self.history(finished, in_flight, earlier))


@dataclass(frozen=True)
class ChainAcceptance:
    """The accepted length of a history draft: `real.suffix` drafts a chain of the strategy's `verify` tokens
    (its tree's depth and top-k unused), so strategy d_k_v is the acceptance model's chain of v."""

    model: AcceptanceModel = AcceptanceModel()

    def mean(self, strategy: Strategy, q: float) -> float:
        return self.model.mean(Strategy.chain(strategy.verify), q)

    def sample(self, strategy: Strategy, q: float, rng: np.random.Generator, size: int | None = None):
        return self.model.sample(Strategy.chain(strategy.verify), q, rng, size)


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


@dataclass(frozen=True)
class Lookup:
    """Seconds of a history drafter's lookup and catch-up per speculative iteration: fixed + per_row x batch."""

    fixed: float = LOOKUP_S
    per_row: float = LOOKUP_ROW_S

    def seconds(self, batch: int) -> float:
        return self.fixed + self.per_row * batch


NO_LOOKUP = Lookup(0.0, 0.0)


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
    w = np.sqrt(np.array([r["calls"] for r in acc], float))

    def residual(x):
        m = HistoryQuality(*x)
        return w * (m.quality(m.history(*parts.T)) - q)

    res = least_squares(residual, [float(np.min(q)), float(np.max(q)), 4.0, 0.5],
                        bounds=([0.0, 0.0, 1e-3, 0.0], [1.0, 1.0, 1e3, 1.0]), xtol=1e-12, ftol=1e-12, gtol=1e-12)
    return HistoryQuality(*(float(v) for v in res.x))


def fit_lookup(rows: list[dict], task: str | None = None) -> Lookup:
    """Lookup fitted to the per-batch median lookup seconds (least squares, weighted by iterations)."""
    lk = [r for r in rows if r.get("kind") == "lookup" and (task is None or r["task"] == task)]
    if len({r["batch"] for r in lk}) < 2:
        raise TltsimError("history lookup fit: lookup rows at fewer than 2 batch sizes")
    b = np.array([r["batch"] for r in lk], float)
    s = np.array([r["draft_ms"] for r in lk]) / 1e3
    per_row, fixed = np.polyfit(b, s, 1, w=np.sqrt([r["iterations"] for r in lk]))
    return Lookup(float(fixed), float(per_row))


def hybrid(history_q, trained_q) -> np.ndarray:
    """q of the hybrid (`real/hybrid.py`: per row the history draft where its match is long and confident, else
    the trained drafter's): per row the better of the two (docs/design.md#history-drafting-in-the-simulator)."""
    return np.maximum(np.asarray(history_q, float), float(trained_q))


def weighted_mean(q, weights) -> float:
    """The tokens-weighted mean of per-row qualities (an engine's one q for its rollout); nan with no tokens."""
    weights = np.asarray(weights, float)
    total = weights.sum()
    return float(np.dot(np.asarray(q, float), weights) / total) if total > 0 else math.nan
