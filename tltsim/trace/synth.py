"""Synthetic response-length traces from named, documented families.

Every family shares one generative structure; only the marginal length distribution
differs (see FAMILIES). For each step and prompt:

1. Difficulty. A prompt gets a latent difficulty z_p ~ N(0, 1). A step's prompts are a
   stratified draw: prompt i of P takes its quantile from the i-th slice (i + U)/P of
   (0, 1), slices shuffled, as one batch of a shuffled pass over a large dataset covers
   its difficulty range. This keeps step-to-step variation at the level the public logs
   show (e.g. DAPO's per-step median stays within 436-496) while the samples of a
   prompt stay correlated.
2. Samples. Sample j of the prompt has z = sqrt(rho) z_p + sqrt(1 - rho) e_j, e_j ~ N(0, 1),
   so z is N(0, 1) and two samples of one prompt have latent correlation `rho` (a
   Gaussian copula: the marginal is the family's, whatever rho).
3. Length. x = Q(z) * (1 + drift) ** k, where Q maps the standard normal to the family's
   length distribution and k is the step's index (0, 1, ...): with drift > 0 lengths
   grow geometrically across steps, as reasoning RL lengthens responses.
4. Cap. L = max(1, round(x)); responses with L > max_len are cut to max_len and get
   finished = False (the pile-up at the cap); the rest finished = True.
5. Prompt length: one per prompt, lognormal with mean `prompt_mean` and log-sd
   `prompt_sigma` (defaults from the Intern-S1 fit: prompt mean 141 tokens), >= 1.

The family `agentic` stands apart: it draws whole multi-turn trajectories (turns, tool calls, tool
latencies) from Intern-S1's tool-calling fits (tltsim/trace/agentic.py); its parameters are the tool
latency's, none of the above.

Common parameters (every single-turn family): rho, drift, prompt_mean, prompt_sigma. Everything is
drawn from one numpy Generator seeded with `seed`, in a fixed order, so a (family,
sizes, parameters, seed) tuple always gives the same trace.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np
import pandas as pd
from scipy.special import ndtr, ndtri

from tltsim.core.errors import TltsimError
from tltsim.trace import agentic
from tltsim.trace.schema import Trace, TraceMeta


def _lognormal(z: np.ndarray, p: dict) -> np.ndarray:
    """Family "lognormal": length = median * exp(sigma z).

    Models a generic heavy-ish tail with two knobs: `median` (tokens, default 1000) and
    `sigma` (log-sd, default 0.8: p90 = 2.8 x median, p99 = 6.4 x median). Not fitted to
    published figures: a clean baseline, and with `drift` a lengthening run.
    """
    return p["median"] * np.exp(p["sigma"] * z)


# The lognormal spread of math rollouts' lengths: RollPacker (NSDI '26, section 2.2) puts a step's 75th percentile at
# 755-1.1k tokens and its longest at 25-32x the median, which sigma 1.08 gives (benchmarks/bench_fidelity.py).
MATH_SIGMA = 1.08


def lognormal_median(mean: float, cap: int, sigma: float) -> int:
    """The "lognormal" family's `median` whose draws, capped at `cap`, have `mean` tokens on average (a source that
    gives a mean length and a cap, not a median); TltsimError where no median does (a mean at or past the cap)."""
    from scipy.optimize import brentq

    z = ndtri((0.5 + np.arange(20000)) / 20000)  # the standard normal's quantiles

    def capped_mean(median: float) -> float:
        return float(np.minimum(median * np.exp(sigma * z), cap).mean())

    hi = cap * math.exp(4 * sigma)
    if not 0 < mean < capped_mean(hi):
        raise TltsimError(f"lognormal_median: no median gives a mean of {mean} tokens under a cap of {cap} at sigma "
                          f"{sigma}; the mean must lie between 0 and the cap")
    return round(brentq(lambda m: capped_mean(m) - mean, 1e-6 * mean, hi))


def _dapo(z: np.ndarray, p: dict) -> np.ndarray:
    """Family "dapo": length = median * exp(sigma z + h max(z, 0)^q).

    Models DAPO text GRPO rollouts (96 prompts x 8 samples): per step median 436-496,
    p90 956-1129, p99 1.9k-3.0k, max 3.7k-10.1k tokens (docs/design.md#response-length-shapes). Parameters: `median`
    466, `sigma` 0.5903, `h` 0.02295, `q` 3: with q fixed, the other three solve median
    466, p90 1042 and p99 2450, the midpoints of the published ranges; the max then lands
    in its range without being fitted. rho 0.4 (within-group correlation) is an assumption.
    """
    # A lognormal whose log-length gains h z^q above the median: the far tail (p99, the
    # per-step max) sits further out than a lognormal with the same median and p90 allows.
    return p["median"] * np.exp(p["sigma"] * z + p["h"] * np.maximum(z, 0.0) ** p["q"])


# Intern-S1 fit (docs/design.md#response-length-shapes): 385,024 production math rollouts, output lengths a
# 4-component Gaussian mixture. The weights as published sum to 0.99; they are normalised.
INTERN_S1_WEIGHTS = np.array([0.36, 0.37, 0.07, 0.19])
INTERN_S1_MEANS = np.array([4959.0, 9175.0, 12720.0, 17655.0])
INTERN_S1_STDS = np.array([2192.0, 3416.0, 6067.0, 5267.0])


def intern_s1_cdf(x: np.ndarray) -> np.ndarray:
    """CDF of the Intern-S1 mixture conditioned on x > 0.5 (a response has at least 1 token)."""
    w = INTERN_S1_WEIGHTS / INTERN_S1_WEIGHTS.sum()

    def raw(v):
        return (w * ndtr((np.asarray(v, dtype=float)[..., None] - INTERN_S1_MEANS) / INTERN_S1_STDS)).sum(-1)

    lo = raw(0.5)
    return (raw(x) - lo) / (1 - lo)


@lru_cache(maxsize=1)
def _mixture_table() -> tuple[np.ndarray, np.ndarray]:
    """Integer lengths 1..K and F(k + 0.5): rounding any x in (k - 0.5, k + 0.5] gives k."""
    grid = np.arange(1, int((INTERN_S1_MEANS + 12 * INTERN_S1_STDS).max()) + 1)
    return grid, intern_s1_cdf(grid + 0.5)


def _mixture(z: np.ndarray, p: dict) -> np.ndarray:
    """Family "mixture": the Intern-S1 4-component Gaussian mixture (docs/design.md#response-length-shapes).

    Models long math reasoning rollouts: fitted to 385,024 production rollouts, weights
    .36/.37/.07/.19, means 4959/9175/12720/17655, std 2192/3416/6067/5267 tokens
    (conditioned on length >= 1); prompt mean 141 tokens. No family parameters of its own
    (the fit is fixed); 0.04% of lengths exceed a 32768 cap.
    """
    # Generalised inverse F^-1(u) = min{k : F(k + 0.5) >= u}, on integer lengths.
    grid, cdf = _mixture_table()
    idx = np.searchsorted(cdf, ndtr(z), side="left")
    return grid[np.minimum(idx, len(grid) - 1)].astype(float)


@dataclass(frozen=True)
class Family:
    """A named marginal length distribution Q(z) and its default parameters, or a family that draws whole
    trajectories itself (`frame`)."""

    name: str
    length: Callable[[np.ndarray, dict], np.ndarray] | None  # z ~ N(0,1) (any shape) -> lengths (float), before drift and cap
    defaults: dict  # family parameters and the common ones, with their default values
    matches: str  # what it models and the published figures it was matched to
    frame: Callable[..., pd.DataFrame] | None = None  # (steps, prompts, group, max_len, seed, params) -> the trace's frame


COMMON = {"rho": 0.5, "drift": 0.0, "prompt_mean": 141.0, "prompt_sigma": 0.5}

FAMILIES = {
    f.name: f
    for f in [
        Family(
            "lognormal",
            _lognormal,
            {"median": 1000.0, "sigma": 0.8, **COMMON},
            "a plain lognormal: length = median * exp(sigma z); no published fit, a clean baseline "
            "whose median and spread are set directly",
        ),
        Family(
            "dapo",
            _dapo,
            {"median": 466.0, "sigma": 0.5903, "h": 0.02295, "q": 3.0, **COMMON, "rho": 0.4},
            "DAPO-text-like: length = median * exp(sigma z + h max(z,0)^q); matched to the public "
            "DAPO text GRPO logs, 96 prompts x 8: per step median 436-496, p90 956-1129, "
            "p99 1.9k-3.0k, max 3.7k-10.1k tokens. With q = 3, median, sigma and h solve "
            "median 466, p90 1042 (x2.24) and p99 2450 (x5.26), the midpoints of those ranges; "
            "rho 0.4 is assumed, not fitted. Use a cap of 8192",
        ),
        Family(
            "mixture",
            _mixture,
            dict(COMMON),
            "Intern-S1: the 4-component Gaussian mixture fitted to 385,024 production math rollouts "
            "(weights .36/.37/.07/.19, means 4959/9175/12720/17655, std 2192/3416/6067/5267 tokens, "
            "conditioned on length >= 1); prompt mean 141 tokens; use a cap such as 32768",
        ),
        Family(
            "agentic",
            None,
            agentic.tool_latency_defaults(),
            "multi-turn tool-calling trajectories: call counts and per-turn input and output lengths from the "
            "Gaussian fits to Intern-S1's production tool-calling sessions, tool latency a lognormal fitted to "
            "PolyTrace's Search-R1 log (tltsim/trace/data/intern_s1_tool_calling.json names the sources); a "
            "session of k calls is k turns with k - 1 tool calls between them",
            agentic.frame,
        ),
    ]
}

# Valid range of each parameter: (low, high, low inclusive).
_RANGES = {
    "rho": (0.0, 1.0, True),
    "drift": (-1.0, np.inf, False),
    "median": (0.0, np.inf, False),
    "sigma": (0.0, np.inf, True),
    "h": (0.0, np.inf, True),
    "q": (1.0, np.inf, True),
    "prompt_mean": (1.0, np.inf, True),
    "prompt_sigma": (0.0, np.inf, True),
    "tool_latency_median": (0.0, np.inf, False),
    "tool_latency_sigma": (0.0, np.inf, True),
}


MAX_RESPONSES = 50_000_000  # responses of one synthetic trace: about 4 GB of intermediate arrays


def synth(family: str, steps: int, prompts: int, group: int, max_len: int, seed: int, **params) -> Trace:
    """Generate a trace of `steps` x `prompts` x `group` responses capped at `max_len`.

    `params` override the family's defaults (FAMILIES[family].defaults). Raises
    TltsimError for an unknown family or parameter, or a value out of range.
    """
    fam = _family(family)
    p = _params(fam, params)
    for name, v in [("steps", steps), ("prompts", prompts), ("group", group), ("max_len", max_len)]:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise TltsimError(f"synth: {name} is {v!r}; it must be a whole number >= 1")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TltsimError(f"synth: seed is {seed!r}; it must be a whole number >= 0")
    if steps * prompts * group > MAX_RESPONSES:
        raise TltsimError(f"synth: steps x prompts x group = {steps * prompts * group:,} responses, more than the "
                          f"{MAX_RESPONSES:,} a trace may hold; make it smaller")

    meta = TraceMeta(
        source=f"synth:{family}",
        model="synthetic",
        max_response_len=int(max_len),
        group_size=int(group),
        provenance=_provenance(fam, p, params, steps, prompts, group, max_len, seed),
    )
    if fam.frame is not None:
        return Trace.from_frame(fam.frame(steps, prompts, group, max_len, seed, p), meta)
    rng = np.random.default_rng(seed)
    slices = rng.permuted(np.tile(np.arange(prompts), (steps, 1)), axis=1)  # (steps, prompts)
    z_prompt = ndtri((slices + rng.random((steps, prompts))) / prompts)  # (steps, prompts)
    noise = rng.standard_normal((steps, prompts, group))  # (steps, prompts, group)
    z = np.sqrt(p["rho"]) * z_prompt[..., None] + np.sqrt(1 - p["rho"]) * noise
    growth = (1 + p["drift"]) ** np.arange(steps, dtype=float)  # (steps,)
    raw = np.maximum(1, np.rint(fam.length(z, p) * growth[:, None, None]))
    finished = raw <= max_len
    lengths = np.minimum(raw, max_len).astype("int64")
    s2 = p["prompt_sigma"] ** 2
    prompt_len = rng.lognormal(np.log(p["prompt_mean"]) - s2 / 2, p["prompt_sigma"], (steps, prompts))
    prompt_len = np.maximum(1, np.rint(prompt_len)).astype("int64")

    step_i, prompt_i, sample_i = np.indices((steps, prompts, group)).reshape(3, -1)
    df = pd.DataFrame(
        {
            "step": step_i,
            "prompt_id": prompt_i,
            "sample": sample_i,
            "prompt_len": prompt_len[step_i, prompt_i],
            "response_len": lengths.reshape(-1),
            "finished": finished.reshape(-1),
        }
    )
    return Trace.from_frame(df, meta)


def command(family: str, steps: int, prompts: int, group: int, max_len: int, seed: int, **params) -> str:
    """The `tltsim trace synth` command line that regenerates these arguments (without -o)."""
    parts = [f"tltsim trace synth {family} --steps {steps} --prompts {prompts} --group {group} --max-len {max_len} --seed {seed}"]
    if "drift" in params:
        parts.append(f"--drift {_num(params['drift'])}")
    parts += [f"--param {k}={_num(v)}" for k, v in sorted(params.items()) if k != "drift"]
    return " ".join(parts)


def _num(v) -> str:
    """Shortest exact text of a float, without a trailing ".0" (2000, 0.05)."""
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text


def _provenance(fam: Family, p: dict, given: dict, steps, prompts, group, max_len, seed) -> str:
    values = ", ".join(f"{k}={v!r}" for k, v in p.items())
    return (
        f"synthetic, family {fam.name!r}: {fam.matches}. Parameters: {values}. "
        f"{steps} steps x {prompts} prompts x {group} samples, cap {max_len}, seed {seed}. "
        f"Regenerate: {command(fam.name, steps, prompts, group, max_len, seed, **given)} -o FILE"
    )


def _family(name: str) -> Family:
    if name not in FAMILIES:
        raise TltsimError(f"unknown synthetic family {name!r}; choose one of {', '.join(FAMILIES)}")
    return FAMILIES[name]


def _params(fam: Family, given: dict) -> dict:
    unknown = sorted(set(given) - set(fam.defaults))
    if unknown:
        raise TltsimError(
            f"family {fam.name!r} has no parameter {', '.join(map(repr, unknown))}; "
            f"its parameters are {', '.join(fam.defaults)}"
        )
    p = dict(fam.defaults)
    for k, v in given.items():
        lo, hi, lo_ok = _RANGES[k]
        x = float(v) if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) else np.nan
        if not np.isfinite(x) or not (x >= lo if lo_ok else x > lo) or x > hi:
            raise TltsimError(
                f"parameter {k}={v!r} is out of range; it must be {'>=' if lo_ok else '>'} {lo:g}"
                + (f" and <= {hi:g}" if np.isfinite(hi) else "")
            )
        p[k] = x
    return p
