"""Analytic roofline cost model of one rollout engine (a TP group of GPUs).

Every engine iteration costs

    t = overhead + allreduce(q) + max(bytes / (BW * eta_bw), flops / (FLOPS * eta_fl))

with q the query tokens of the iteration, bytes = weights / TP + KV bytes of the
context / TP, flops = (2 * params * q + attention) / TP. Of a mixture-of-experts model the
weights are those the iteration reads (attention, embeddings, and the experts its q tokens are
routed to: tltsim.cost.moe) and the params those one token computes with. Decode is q = batch;
verification of a speculative step is q = batch * verify_tokens; prefill is
q = the prompt tokens. Speculative decoding therefore wins while the verify
forward is still memory-bound and loses once batch * verify tokens passes the
ridge point: the break-even comes out of the hardware numbers, not a constant.

Both terms of the max are linear in the context C, and C grows by a fixed amount
per iteration between batch changes, so the time of n iterations is a sum of
the max of two arithmetic series: `segment_time` evaluates it in closed form,
vectorised over segments (docs/design.md#events-at-batch-changes).
"""
from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np

from tltsim.core.errors import TltsimError
from tltsim.cost.moe import expected_experts
from tltsim.hardware import BYTES_BF16, GPU, ModelSpec


@dataclass(frozen=True)
class CostParams:
    """Efficiency factors.

    Calibration (benchmarks/bench_calibration.py): eta_bw and iteration_overhead_s put Qwen2.5-7B bs-1 decode
    on H100 / A100 near the measured (docs/design.md#single-stream-decode) 165 / 93 tok/s; eta_flops, draft_overhead_s and overlap are fitted
    (least squares on log speedup) to the SD speedup grid (docs/design.md#sd-speedup-grid) (Qwen2.5-32B, TP 4, H100, depth 12, top-k 8,
    bs 1-32, verify 16-64) at an assumed 8k-token context per request. The fit prefers overlap = 0: measured
    verify steps behave as memory time plus compute time, not their max.
    """

    eta_bw: float = 0.75  # fraction of peak HBM bandwidth a decode step reaches
    eta_flops: float = 0.84  # fraction of bf16 peak a batched GEMM reaches (fitted)
    iteration_overhead_s: float = 8e-4  # scheduler, sampling and launch overhead per engine iteration
    allreduce_latency_s: float = 1e-5  # per TP all-reduce (two per layer)
    per_token_s: float = 0.0  # per query token: sampling, masks, small-GEMM inefficiency (smooths the roofline knee)
    overlap: float = 0.0  # how far memory and compute time overlap: 1 = pure roofline max, 0 = their sum (fitted)
    draft_overhead_s: float = 5.7e-4  # per drafter forward: launches dominate a one-layer model (fitted)
    mem_fraction: float = 0.9  # of GPU memory the engine may fill with weights and KV cache
    train_mfu: float = 0.35  # model FLOPs utilisation of the actor update and log-prob forwards
    drafter_train_mfu: float = 0.2  # a small model trains far below peak
    sync_fixed_s: float = 1.0  # weight sync: resharding and engine reload besides the bytes

    def checked(self) -> "CostParams":
        """These parameters, checked (TltsimError for a bad value)."""
        for name in ("eta_bw", "eta_flops", "mem_fraction", "train_mfu", "drafter_train_mfu", "overlap"):
            v = getattr(self, name)
            if not 0 < v <= 1 and not (name == "overlap" and v == 0):
                raise TltsimError(f"cost.{name} = {v} must be in (0, 1]")
        for name in ("iteration_overhead_s", "allreduce_latency_s", "per_token_s", "draft_overhead_s", "sync_fixed_s"):
            if getattr(self, name) < 0:
                raise TltsimError(f"cost.{name} = {getattr(self, name)} must be >= 0")
        return self


class Roofline:
    """Step times of one engine of `tp` GPUs serving `model`. All methods take numpy arrays or scalars."""

    name = "roofline"
    padded_prefill = False  # a serving engine (vLLM, SGLang) prefills ragged rows as they are

    def __init__(self, model: ModelSpec, gpu: GPU, tp: int = 1, params: CostParams | None = None):
        self.model, self.gpu, self.tp = model, gpu, tp
        self.p = (params or CostParams()).checked()
        if tp < 1:
            raise TltsimError(f"tp = {tp} must be >= 1")
        m, g, p = model, gpu, self.p
        bw, fl = g.bandwidth * p.eta_bw, g.flops * p.eta_flops
        kv_shards = min(tp, m.kv_heads)  # KV heads are split over TP ranks, replicated past kv_heads
        # iteration time = overhead + allreduce(q) + max(weights(q) + mem1*C, fl_q*q + fl_c*k*C)
        experts = m.layers * m.experts * m.expert_bytes
        self._mem0 = (m.weight_bytes - experts) / tp / bw  # s: read the weights every iteration reads once
        self._mem_expert = m.layers * m.expert_bytes / tp / bw  # s: read one expert of every layer (MoE)
        self._mem1 = m.kv_bytes_per_token / kv_shards / bw  # s per context token read
        self._fl_q = 2 * m.active_params / tp / fl  # s per query token (dense matmuls, the routed experts)
        self._fl_c = m.attn_flops_per_ctx_token / tp / fl  # s per (query token x context token)
        self._d_mem, self._d_fl = self._drafter_terms(m.vocab)
        self.kv_capacity_tokens = int((p.mem_fraction * g.memory_bytes - m.weight_bytes / tp) * kv_shards / m.kv_bytes_per_token)
        if self.kv_capacity_tokens <= 0:
            need = m.weight_bytes / tp / 1e9
            raise TltsimError(
                f"{m.name} does not fit on {g.name} at TP {tp}: {need:.1f} GB of weights per GPU, "
                f"{p.mem_fraction * g.memory_gb:.1f} GB usable; raise --tp or pick a GPU with more memory"
            )

    # --- one iteration -------------------------------------------------------------------------
    def _allreduce(self, q):
        if self.tp == 1:
            return np.zeros_like(np.asarray(q, dtype=float))
        bytes_ = np.asarray(q, dtype=float) * self.model.hidden * BYTES_BF16
        link = self.gpu.interconnect_gbs * 1e9
        per = self.p.allreduce_latency_s + 2 * (self.tp - 1) / self.tp * bytes_ / link
        return 2 * self.model.layers * per

    def weights_time(self, q):
        """Seconds to read the weights an iteration of `q` query tokens needs: all of a dense model's; of an MoE
        model the attention and embeddings and, per layer, the experts its tokens are expected to hit (a dense
        model's is one number, which broadcasts)."""
        if not self.model.experts:
            return self._mem0
        return self._mem0 + self._mem_expert * expected_experts(q, self.model.experts, self.model.experts_per_token)

    def _step(self, q, k, ctx):
        q, k, ctx = (np.asarray(x, dtype=float) for x in (q, k, ctx))
        mem = self.weights_time(q) + self._mem1 * ctx
        comp = self._fl_q * q + self._fl_c * k * ctx
        return self.p.iteration_overhead_s + self.p.per_token_s * q + self._allreduce(q) + self._combine(mem, comp)

    def _combine(self, mem, comp):
        """overlap * max(mem, comp) + (1 - overlap) * (mem + comp)."""
        o = self.p.overlap
        return o * np.maximum(mem, comp) + (1 - o) * (mem + comp)

    def decode_time(self, batch, ctx):
        """One decode iteration: `batch` running requests holding `ctx` context tokens in all."""
        return self._step(batch, 1, ctx)

    def verify_time(self, batch, tokens_per_request, ctx):
        """One target forward verifying `tokens_per_request` draft tokens for each of `batch` requests."""
        return self._step(np.asarray(batch) * np.asarray(tokens_per_request), tokens_per_request, ctx)

    def draft_time(self, batch, topk=1, vocab=None):
        """One drafter forward for `batch` requests expanding `topk` tree nodes each; `vocab`: the entries of the
        drafter's output head where it has its own (EAGLE-3's draft vocabulary), None: it reads the target's."""
        q = np.asarray(batch, dtype=float) * np.asarray(topk, dtype=float)
        d_mem, d_fl = (self._d_mem, self._d_fl) if vocab in (None, self.model.vocab) else self._drafter_terms(vocab)
        return self.p.draft_overhead_s + self._combine(d_mem, d_fl * q)

    def _drafter_terms(self, vocab: int) -> tuple[float, float]:
        """A drafter forward's seconds of weight reads, and of compute per query token: the EAGLE-style drafter's
        one layer and an output head of `vocab` entries, sharded like the target."""
        m, g, p = self.model, self.gpu, self.p
        d_params = m.drafter_params + vocab * m.hidden
        reads = d_params * BYTES_BF16 / self.tp / (g.bandwidth * p.eta_bw)
        return reads, 2 * d_params / self.tp / (g.flops * p.eta_flops)

    def catchup_time(self, batch, tokens_per_row, ctx):
        """The drafter feeding on `tokens_per_row` tokens per row it has not seen (plain iterations emitted them):
        one drafter forward over them."""
        return self.draft_time(np.asarray(batch, dtype=float) * np.asarray(tokens_per_row, dtype=float), 1)

    def switch_time(self, batch, ctx, sq_tokens):
        """Building the drafter's state for every running request when speculation switches on: a target
        prefill of their `ctx` tokens (an engine that keeps no target features must recompute them)."""
        return self.prefill_time(ctx, sq_tokens)

    def prefill_time(self, tokens, sq_tokens=None):
        """Prefill of prompts totalling `tokens` tokens; `sq_tokens` = sum of squared prompt lengths (causal attention)."""
        tokens = np.asarray(tokens, dtype=float)
        sq = tokens**2 if sq_tokens is None else np.asarray(sq_tokens, dtype=float)
        comp = self._fl_q * tokens + self._fl_c * sq / 2
        t = (self.p.iteration_overhead_s + self.p.per_token_s * tokens + self._allreduce(tokens)
             + self._combine(self.weights_time(tokens) + self._mem1 * tokens, comp))
        return np.where(tokens > 0, t, 0.0)

    # --- many iterations in closed form -------------------------------------------------------
    def segment_time(self, q, k, ctx0, growth, n):
        """Sum of n iterations with q query tokens (k per request) whose context starts at ctx0 and grows by
        `growth` tokens per iteration. Exact for integer n; n may be fractional (mean-acceptance fast path).
        Plain numbers (an event-driven executor's one stretch at a time) take a scalar path of the same sums."""
        if not self.model.experts and all(isinstance(x, (int, float, np.integer, np.floating))
                                          for x in (q, k, ctx0, growth, n)):
            return self._segment_scalar(float(q), float(k), float(ctx0), float(growth), float(n))
        q, k, ctx0, growth, n = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (q, k, ctx0, growth, n)))
        # mem_i = a0 + a1 * i, comp_i = b0 + b1 * i, i = 0..n-1
        a0 = self.weights_time(q) + self._mem1 * ctx0
        a1 = self._mem1 * growth
        b0 = self._fl_q * q + self._fl_c * k * ctx0
        b1 = self._fl_c * k * growth
        fixed = n * (self.p.iteration_overhead_s + self.p.per_token_s * q + self._allreduce(q))
        # d_i = comp_i - mem_i is linear: comp wins for i past (or before) the crossover i*.
        d0, d1 = b0 - a0, b1 - a1
        with np.errstate(divide="ignore", invalid="ignore"):
            cross = np.where(d1 != 0, -d0 / d1, -1.0)
        # the sign of d holds from i = 0 up to the crossover (when it lies ahead), then flips
        m = np.where(cross > 0, np.clip(np.ceil(cross), 0, n), n)
        first_is_comp = (d0 > 0) | ((d0 == 0) & (d1 > 0))
        first = np.where(first_is_comp, _series(b0, b1, 0, m), _series(a0, a1, 0, m))
        rest = np.where(first_is_comp, _series(a0, a1, m, n), _series(b0, b1, m, n))
        o = self.p.overlap
        return fixed + o * (first + rest) + (1 - o) * (_series(a0, a1, 0, n) + _series(b0, b1, 0, n))

    def _segment_scalar(self, q: float, k: float, ctx0: float, growth: float, n: float) -> float:
        """`segment_time` of one dense-model stretch in plain floats (numpy's per-call cost dominates there)."""
        p = self.p
        allreduce = 0.0 if self.tp == 1 else 2 * self.model.layers * (
            p.allreduce_latency_s + 2 * (self.tp - 1) / self.tp * q * self.model.hidden * BYTES_BF16
            / (self.gpu.interconnect_gbs * 1e9))
        a0, a1 = self._mem0 + self._mem1 * ctx0, self._mem1 * growth
        b0, b1 = self._fl_q * q + self._fl_c * k * ctx0, self._fl_c * k * growth
        fixed = n * (p.iteration_overhead_s + p.per_token_s * q + allreduce)
        o = p.overlap
        return fixed + o * _larger_sum(a0, a1, b0, b1, n) + (1 - o) * (_series1(a0, a1, 0, n) + _series1(b0, b1, 0, n))

    def scalar_times(self):
        """(stretch(b, c, k), prefill(tokens, sq)) in plain floats, for an executor that times one event at a time:
        `segment_time(b, 1, c, b, k)` (k plain iterations at batch b holding c tokens) and `prefill_time(tokens,
        sq)`, the same numbers to the last bit without numpy's per-call cost; None for an MoE model (or a subclass,
        which may time them otherwise)."""
        if self.model.experts or type(self) is not Roofline:
            return None
        p, tp, m = self.p, self.tp, self.model
        mem0, mem1, fl_q, fl_c, o = self._mem0, self._mem1, self._fl_q, self._fl_c, p.overlap
        link = self.gpu.interconnect_gbs * 1e9
        per_batch: dict = {}  # b -> (fixed seconds per iteration, a1, fl_q * b, b1)

        def stretch(b, c: float, k) -> float:
            got = per_batch.get(b)
            if got is None:
                q = float(b)
                allreduce = 0.0 if tp == 1 else 2 * m.layers * (
                    p.allreduce_latency_s + 2 * (tp - 1) / tp * q * m.hidden * BYTES_BF16 / link)
                got = per_batch[b] = (p.iteration_overhead_s + p.per_token_s * q + allreduce, mem1 * q, fl_q * q,
                                      fl_c * 1.0 * q)
            fixed1, a1, b0q, b1 = got
            n = float(k)
            a0, b0 = mem0 + mem1 * c, b0q + fl_c * 1.0 * c
            tri = n * (0.0 + n - 1) / 2  # _series1(., ., 0, n)'s sum of i
            both = (n * a0 + a1 * tri) + (n * b0 + b1 * tri)
            if o == 0:  # fixed + 0 * (first + rest) + 1 * both: the same bits
                return n * fixed1 + both
            return n * fixed1 + o * _larger_sum(a0, a1, b0, b1, n) + (1 - o) * both

        def prefill(tokens: float, sq: float) -> float:
            if not tokens > 0:
                return 0.0
            comp = fl_q * tokens + fl_c * sq / 2
            allreduce = 0.0 if tp == 1 else 2 * m.layers * (
                p.allreduce_latency_s + 2 * (tp - 1) / tp * (tokens * m.hidden * BYTES_BF16) / link)
            mem = mem0 + mem1 * tokens
            return (p.iteration_overhead_s + p.per_token_s * tokens + allreduce
                    + (o * max(mem, comp) + (1 - o) * (mem + comp)))

        return stretch, prefill

    # --- RL stage costs (whole cluster) ---------------------------------------------------------
    def train_time(self, tokens, gpus, sq_tokens=0.0):
        """Actor update: 6 x params x tokens over the cluster at train_mfu (attention's FLOPs, which grow with
        `sq_tokens`, the sum of squared sequence lengths, are left out as they are at decode; of an MoE model the
        params one token computes with)."""
        return 6 * self.model.active_params * tokens / (gpus * self.gpu.flops * self.p.train_mfu)

    def logprob_time(self, tokens, gpus, sq_tokens=0.0):
        """Old-policy and reference log-prob forwards: 2 x (2 x params x tokens)."""
        return 4 * self.model.active_params * tokens / (gpus * self.gpu.flops * self.p.train_mfu)

    def sync_time(self):
        """Weight sync from the trainer to the rollout engines."""
        return self.p.sync_fixed_s + self.model.weight_bytes / self.tp / (self.gpu.interconnect_gbs * 1e9)

    def drafter_train_tokens_per_s(self, gpus):
        """Drafter training throughput on `gpus` GPUs: fwd+bwd of the trainable layer, fwd+input-grad of lm_head."""
        m = self.model
        flops_per_token = 6 * m.drafter_params + 4 * m.vocab * m.hidden
        return gpus * self.gpu.flops * self.p.drafter_train_mfu / flops_per_token


def _larger_sum(a0, a1, b0, b1, n):
    """Sum over i < n of max(a0 + a1 i, b0 + b1 i) (memory and compute time of iteration i; two lines cross at most
    once): the larger line up to the crossing, the other after it."""
    d0, d1 = b0 - a0, b1 - a1
    cross = -d0 / d1 if d1 != 0 else -1.0
    m = min(max(math.ceil(cross), 0), n) if cross > 0 else n
    comp_first = d0 > 0 or (d0 == 0 and d1 > 0)
    first = _series1(b0, b1, 0, m) if comp_first else _series1(a0, a1, 0, m)
    rest = _series1(a0, a1, m, n) if comp_first else _series1(b0, b1, m, n)
    return first + rest


def _series1(c0: float, c1: float, lo: float, hi: float) -> float:
    """`_series` of plain floats."""
    n = max(hi - lo, 0.0)
    return n * c0 + c1 * (n * (lo + hi - 1) / 2)


def _series(c0, c1, lo, hi):
    """sum_{i=lo}^{hi-1} (c0 + c1 * i) for real lo <= hi."""
    n = np.maximum(hi - lo, 0)
    return n * c0 + c1 * (n * (lo + hi - 1) / 2)
