"""Continuous-batching admission on the token clock.

Every running request gains one token per decode iteration (several per
speculative iteration, but the same number for the whole batch in the fast
path), so admission and completion can be scheduled on a clock that counts
tokens per request, `tau`, independently of how long iterations take. A request
admitted at tau_a finishes at tau_a + response_len. Wall time is attached
afterwards, segment by segment (`engine.py`).

Admission is FIFO, as SGLang/vLLM schedule a rollout batch: the head request is
admitted when a slot is free (running < max_running) and the KV cache can hold
its final footprint (prompt + response tokens). Reserving the final footprint
means the cache never overflows, so no preemption is modelled; engines that
preempt and recompute would be somewhat slower under memory pressure.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from tltsim.core.errors import TltsimError


def admits(running: int, used: int, footprint: int, max_running: int, kv_capacity: int) -> bool:
    """The FIFO rule: the head request, of final KV footprint `footprint` tokens, is admitted when a slot is free
    (`running` < `max_running`) and the KV cache, `used` tokens of `kv_capacity` reserved, holds it."""
    return running < max_running and used + footprint <= kv_capacity


def admit_fifo(prompt_len: np.ndarray, response_len: np.ndarray, max_running: int, kv_capacity: int) -> np.ndarray:
    """Return tau_a (token-clock admission time) of each request, in the given order."""
    n = len(prompt_len)
    footprint = check_footprints(prompt_len, response_len, kv_capacity)
    tau_a = np.empty(n, dtype=np.int64)
    # fast path: everything fits at once
    if n <= max_running and footprint.sum() <= kv_capacity:
        tau_a[:] = 0
        return tau_a
    running: list[tuple[int, int]] = []  # heap of (finish tau, index)
    used = 0
    nxt = 0
    now = 0
    resp = response_len.astype(np.int64)
    while nxt < n:
        while nxt < n and admits(len(running), used, int(footprint[nxt]), max_running, kv_capacity):
            tau_a[nxt] = now
            heapq.heappush(running, (now + int(resp[nxt]), nxt))
            used += int(footprint[nxt])
            nxt += 1
        if nxt == n:
            break
        # advance to the next completion(s)
        now, i = heapq.heappop(running)
        used -= int(footprint[i])
        while running and running[0][0] == now:
            _, j = heapq.heappop(running)
            used -= int(footprint[j])
    return tau_a


def check_footprints(prompt_len: np.ndarray, response_len: np.ndarray, kv_capacity: int) -> np.ndarray:
    """Final KV footprint of each request; raises when one alone exceeds the cache."""
    footprint = (np.asarray(prompt_len) + np.asarray(response_len)).astype(np.int64)
    too_big = np.flatnonzero(footprint > kv_capacity)
    if len(too_big):
        i = int(too_big[0])
        raise TltsimError(
            f"a request of {footprint[i]} tokens (prompt {prompt_len[i]} + response {response_len[i]}) exceeds the "
            f"engine's KV cache of {kv_capacity} tokens; raise --tp, use a GPU with more memory, or cap the trace"
        )
    return footprint


@dataclass
class Segments:
    """Intervals of constant running batch on the token clock.

    Segment j spans tau in [start[j], start[j] + length[j]); at its start `admitted_tokens[j]`
    prompt tokens (sum of squares `admitted_sq[j]`) are prefilled, then `batch[j]` requests decode with
    `ctx[j]` context tokens in all, growing by batch[j] per token of tau. With `padded`, the prefill's tokens are
    the segment's admitted rows each as long as the longest (tltsim.core.padding.prefill_load).
    """

    start: np.ndarray
    length: np.ndarray
    batch: np.ndarray
    ctx: np.ndarray
    admitted_tokens: np.ndarray
    admitted_sq: np.ndarray


def segments(tau_a: np.ndarray, prompt_len: np.ndarray, response_len: np.ndarray, padded: bool = False) -> Segments:
    tau_f = tau_a + response_len
    events = np.unique(np.concatenate([tau_a, tau_f]))
    starts = events[:-1]
    lengths = np.diff(events)
    if tau_a.max() >= events[-1]:  # requests of no tokens (aborted) admitted last: a segment of length 0 prefills them
        starts, lengths = events, np.append(lengths, 0)
    # requests admitted at or before tau, minus those finished at or before tau
    order_a = np.argsort(tau_a, kind="stable")
    order_f = np.argsort(tau_f, kind="stable")
    na = np.searchsorted(tau_a[order_a], starts, side="right")
    nf = np.searchsorted(tau_f[order_f], starts, side="right")
    base = (prompt_len - tau_a).astype(np.float64)  # context of a running request at tau = base + tau
    cum_a = np.concatenate([[0.0], np.cumsum(base[order_a])])
    cum_f = np.concatenate([[0.0], np.cumsum(base[order_f])])
    batch = na - nf
    ctx = cum_a[na] - cum_f[nf] + batch * starts
    # prompt tokens admitted exactly at each segment start
    p = prompt_len.astype(np.float64)
    idx = np.searchsorted(starts, tau_a)  # every tau_a is an event and a start (< its tau_f, or the last segment's)
    if padded:
        rows, width = np.bincount(idx, minlength=len(starts)), np.zeros(len(starts))
        np.maximum.at(width, idx, p)
        adm, adm_sq = rows * width, rows * width * width
    else:
        adm = np.bincount(idx, weights=p, minlength=len(starts))
        adm_sq = np.bincount(idx, weights=p * p, minlength=len(starts))
    return Segments(starts, lengths, batch, ctx, adm, adm_sq)
