"""Synthetic multi-turn trajectories: the `agentic` family of `tltsim trace synth`, from Intern-S1's tool-calling fits.

The parameters ship in tltsim/trace/data/intern_s1_tool_calling.json (made by
scripts/derive_intern_s1_tool_calling.py from PolyTrace's published fits; its `provenance` names the source):

- `call_counts[k]`: of the Intern-S1 production tool-calling sessions, how many made k calls (k = 1..10), and a
  Gaussian (mean, covariance) over (input_1..k, output_1..k) of such a session.
- `tool_latency_s`: a lognormal (median, sigma) of a tool call's seconds, fitted to PolyTrace's Search-R1 log (the
  Intern-S1 fits have none).

A session with k calls is k model turns: turn i reads input_i new tokens (input_1 the prompt, input_i for i > 1
the tool's answer appended before turn i) and generates output_i tokens, so k - 1 tool calls lie between the
turns and the last turn ends the trajectory. Each trajectory (each sample of each prompt) is one session drawn
independently: its call count from the fitted shares, then its lengths from that count's Gaussian, rounded and
clipped to at least 1 token (the clip raises a length's mean where the fit's spread is wide against it), then each
tool call's seconds from the lognormal. The fits describe sessions, not GRPO groups, so the samples of one prompt
do not share a prompt length: each has its own input_1.

Trace columns: prompt_len = input_1; turn_response_len = output_1..k; tool_tokens = input_2..k (0 after the last
turn); tool_latency_s the calls' seconds (null after the last turn). A trajectory whose generated tokens exceed
the cap is cut there: the turn that crosses it keeps the tokens up to the cap, later turns are dropped, the kept
last turn calls no tool, and the row gets finished = False.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

DATA = "intern_s1_tool_calling.json"


@lru_cache(maxsize=1)
def fit() -> dict:
    """The shipped parameters (the module docstring), as stored."""
    return json.loads((resources.files("tltsim.trace") / "data" / DATA).read_text(encoding="utf-8"))


def call_count_shares() -> tuple[np.ndarray, np.ndarray]:
    """The call counts k and the share of sessions that made k calls."""
    counts = fit()["call_counts"]
    ks = np.array(sorted(int(k) for k in counts))
    sessions = np.array([counts[str(k)]["sessions"] for k in ks], dtype=float)
    return ks, sessions / sessions.sum()


def length_fit(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance over (input_1..k, output_1..k) of a session with k calls."""
    c = fit()["call_counts"][str(k)]
    return np.array(c["mean"]), np.array(c["covariance"])


def tool_latency_defaults() -> dict:
    """The family's parameters: the fitted lognormal's median (seconds) and sigma."""
    lat = fit()["tool_latency_s"]
    return {"tool_latency_median": float(lat["median"]), "tool_latency_sigma": float(lat["sigma"])}


def sessions(rng: np.random.Generator, n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """`n` sessions: their call counts, and per session its lengths (input_1..k, output_1..k) as whole tokens >= 1.

    Draws in a fixed order: all call counts, then each count's lengths, counts ascending."""
    ks, shares = call_count_shares()
    k = rng.choice(ks, size=n, p=shares)
    lengths: list[np.ndarray] = [np.zeros(0, np.int64)] * n
    for kk in ks:
        rows = np.flatnonzero(k == kk)
        if not len(rows):
            continue
        mean, cov = length_fit(int(kk))
        draws = np.maximum(1, np.rint(rng.multivariate_normal(mean, cov, size=len(rows), method="cholesky"))).astype(np.int64)
        for r, x in zip(rows, draws):
            lengths[r] = x
    return k, lengths


def frame(steps: int, prompts: int, group: int, max_len: int, seed: int, p: dict) -> pd.DataFrame:
    """A multi-turn trace's frame of steps x prompts x group trajectories (the module docstring), capped at max_len.

    `p` holds tool_latency_median and tool_latency_sigma."""
    rng = np.random.default_rng(seed)
    n = steps * prompts * group
    k, lengths = sessions(rng, n)
    latency = rng.lognormal(np.log(p["tool_latency_median"]), p["tool_latency_sigma"], int((k - 1).sum()))
    ends = np.cumsum(k - 1)
    prompt_len, gen, tools, lat, finished = [], [], [], [], []
    for i in range(n):
        kk = int(k[i])
        x = lengths[i]
        out = x[kk:].tolist()
        tok = x[1:kk].tolist() + [0]
        sec = latency[ends[i] - (kk - 1):ends[i]].tolist() + [None]
        cum = np.cumsum(out)
        cut = cum[-1] > max_len
        if cut:
            keep = int(np.searchsorted(cum, max_len, side="left")) + 1  # turns up to the one that reaches the cap
            out = out[:keep]
            out[-1] -= int(cum[keep - 1]) - max_len
            tok, sec = tok[:keep - 1] + [0], sec[:keep - 1] + [None]
        prompt_len.append(int(x[0]))
        gen.append(out)
        tools.append(tok)
        lat.append(sec)
        finished.append(not cut)
    step_i, prompt_i, sample_i = np.indices((steps, prompts, group)).reshape(3, -1)
    return pd.DataFrame({"step": step_i, "prompt_id": prompt_i, "sample": sample_i, "prompt_len": prompt_len,
                         "response_len": [sum(g) for g in gen], "finished": finished, "turn_response_len": gen,
                         "tool_latency_s": lat, "tool_tokens": tools})
