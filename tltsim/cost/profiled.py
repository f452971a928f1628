"""A cost model fitted to measured step times (`tltsim real profile`), as Vidur fits operator profiles.

Each engine iteration is modelled as linear in what it processes, with non-negative coefficients
fitted by least squares on relative error (scipy.optimize.nnls) over the profile's rows:

    target forward   t(q, k, C) = c0 + c_q * q + c_kv * C + c_att * k * C
                     (q query tokens, k per request, C context tokens of the batch)
    drafter forward  d(b, topk) = d0 + d_q * b * topk
    spec iteration   depth * d(b, topk) + t(b * (verify + 1), verify + 1, C)
    drafter catch-up g(n, b, C) = g0 + g_q * n + g_kv * C + g_att * (n / b) * C
                     (the drafter ingesting n tokens it had not seen, n / b a row, into a batch holding C; at
                     the SD switch it ingests every token: n = C. Without catch-up rows: d(n, 1), and the
                     switch is charged as a prefill of the batch's tokens, as the roofline model does)
    prefill          p0 + p_t * tokens + p_sq * sum of squared prompt lengths (of the engine's padded rows: the
                     profile's prompts are as long as each other, a run's are not)
    train / logprob  a0 + (a_t * tokens + a_sq * sum of squared sequence lengths) / GPUs
    drafter training tokens per second: median of the measurements

Decode and speculative rows are fitted jointly (they share the target forward). Being linear in C,
the sum over a segment whose context grows by a fixed amount per iteration has a closed form, so the
fast path of the simulator runs on this model unchanged.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from tltsim.core.errors import TltsimError

KINDS = ("prefill", "decode", "spec", "catchup", "train", "logprob", "drafter_train")
REQUIRED = ["kind", "batch", "context", "tokens", "sq_tokens", "depth", "topk", "verify", "seconds"]


class Profiled:
    """Step times from a fitted profile. Same interface as `Roofline` (see tltsim.cost.CostModel)."""

    name = "profiled"
    # A profile times real/'s engine, which prefills the rows it admits or resumes in one forward padded to the
    # widest (real.engine.generate), so a prefill of ragged rows costs their padded tokens.
    padded_prefill = True

    def __init__(self, coef: dict, kv_capacity_tokens: int = 10**9, sync_s: float = 0.0):
        self.c = dict(coef)
        self.kv_capacity_tokens = kv_capacity_tokens
        self._sync_s = sync_s

    # --- fitting -------------------------------------------------------------------------------
    @classmethod
    def fit(cls, profile: pd.DataFrame | str | Path, **kw) -> "Profiled":
        df = read_profile(profile) if not isinstance(profile, pd.DataFrame) else profile
        missing = [k for k in ("decode", "prefill") if not (df["kind"] == k).any()]
        if missing:
            raise TltsimError(f"profile has no {', '.join(missing)} rows; rerun `tltsim real profile`")
        _check_separable(df, "profile" if isinstance(profile, pd.DataFrame) else str(profile))
        c = {}
        # decode + spec jointly: unknowns c0, c_q, c_kv, c_att, d0, d_q
        dec, spec = df[df.kind == "decode"], df[df.kind == "spec"]
        b, C = dec.batch.to_numpy(float), dec.context.to_numpy(float)
        rows = [np.column_stack([np.ones_like(b), b, C, C, 0 * b, 0 * b])]
        y = [dec.seconds.to_numpy(float)]
        if len(spec):
            b, C = spec.batch.to_numpy(float), spec.context.to_numpy(float)
            k = spec.verify.to_numpy(float) + 1
            depth, topk = spec.depth.to_numpy(float), spec.topk.to_numpy(float)
            rows.append(np.column_stack([np.ones_like(b), b * k, C, k * C, depth, depth * b * topk]))
            y.append(spec.seconds.to_numpy(float))
        x = _nnls(np.vstack(rows), np.concatenate(y))
        c.update(zip(["c0", "c_q", "c_kv", "c_att", "d0", "d_q"], x))
        up = df[df.kind == "catchup"]
        if len(up):
            n, b, C = (up[k].to_numpy(float) for k in ("tokens", "batch", "context"))
            x = _nnls(np.column_stack([np.ones_like(n), n, C, n / b * C]), up.seconds.to_numpy(float))
            c.update(zip(["g0", "g_q", "g_kv", "g_att"], x))
        pre = df[df.kind == "prefill"]
        x = _nnls(np.column_stack([np.ones(len(pre)), pre.tokens, pre.sq_tokens]).astype(float), pre.seconds.to_numpy(float))
        c.update(zip(["p0", "p_t", "p_sq"], x))
        for kind in ("train", "logprob"):
            part = df[df.kind == kind]
            if len(part):
                x = _nnls(np.column_stack([np.ones(len(part)), part.tokens, part.sq_tokens]).astype(float),
                          part.seconds.to_numpy(float))
                c.update({f"{kind}0": x[0], f"{kind}_t": x[1], f"{kind}_sq": x[2]})
        dt = df[df.kind == "drafter_train"]
        if len(dt):
            c["drafter_tokens_per_s"] = float(np.median(dt.tokens / dt.seconds))
        return cls(c, **kw)

    def residuals(self, profile: pd.DataFrame) -> pd.DataFrame:
        """Predicted vs measured seconds for every decode / spec / catchup / prefill row of a profile."""
        out = []
        for r in profile.itertuples(index=False):
            if r.kind == "decode":
                p = float(self.decode_time(r.batch, r.context))
            elif r.kind == "spec":
                p = r.depth * float(self.draft_time(r.batch, r.topk)) + float(self.verify_time(r.batch, r.verify + 1, r.context))
            elif r.kind == "prefill":
                p = float(self.prefill_time(r.tokens, r.sq_tokens))
            elif r.kind == "catchup":
                p = float(self.catchup_time(r.batch, r.tokens / r.batch, r.context))
            else:
                continue
            out.append({"kind": r.kind, "batch": r.batch, "context": r.context, "verify": r.verify,
                        "measured_s": r.seconds, "predicted_s": p})
        return pd.DataFrame(out)

    # --- the CostModel interface ---------------------------------------------------------------
    def _step(self, q, k, ctx):
        c = self.c
        q, k, ctx = (np.asarray(v, dtype=float) for v in (q, k, ctx))
        return c["c0"] + c["c_q"] * q + c["c_kv"] * ctx + c["c_att"] * k * ctx

    def decode_time(self, batch, ctx):
        return self._step(batch, 1, ctx)

    def verify_time(self, batch, tokens_per_request, ctx):
        return self._step(np.asarray(batch) * np.asarray(tokens_per_request), tokens_per_request, ctx)

    def draft_time(self, batch, topk=1, vocab=None):
        """`vocab` is ignored: the profile timed the drafter it has, its own vocabulary with it."""
        return self.c["d0"] + self.c["d_q"] * np.asarray(batch, dtype=float) * np.asarray(topk, dtype=float)

    def catchup_time(self, batch, tokens_per_row, ctx):
        batch, per_row, ctx = (np.asarray(v, dtype=float) for v in (batch, tokens_per_row, ctx))
        if "g0" not in self.c:  # a profile without catch-up rows
            return self.draft_time(batch * per_row, 1)
        c = self.c
        return c["g0"] + c["g_q"] * batch * per_row + c["g_kv"] * ctx + c["g_att"] * per_row * ctx

    def switch_time(self, batch, ctx, sq_tokens):
        if "g0" not in self.c:
            return self.prefill_time(ctx, sq_tokens)
        return self.catchup_time(batch, np.asarray(ctx, dtype=float) / np.maximum(batch, 1), ctx)

    def prefill_time(self, tokens, sq_tokens=None):
        tokens = np.asarray(tokens, dtype=float)
        sq = tokens**2 if sq_tokens is None else np.asarray(sq_tokens, dtype=float)
        t = self.c["p0"] + self.c["p_t"] * tokens + self.c["p_sq"] * sq
        return np.where(tokens > 0, t, 0.0)

    def segment_time(self, q, k, ctx0, growth, n):
        """Closed form of sum_{i<n} t(q, k, ctx0 + i * growth): the model is linear in the context."""
        c = self.c
        q, k, ctx0, growth, n = (np.asarray(v, dtype=float) for v in (q, k, ctx0, growth, n))
        per_ctx = c["c_kv"] + c["c_att"] * k
        return n * (c["c0"] + c["c_q"] * q) + per_ctx * (n * ctx0 + growth * n * (n - 1) / 2)

    def train_time(self, tokens, gpus, sq_tokens=0.0):
        return self._pass("train", tokens, gpus, sq_tokens)

    def logprob_time(self, tokens, gpus, sq_tokens=0.0):
        return self._pass("logprob", tokens, gpus, sq_tokens)

    def _pass(self, kind, tokens, gpus, sq_tokens):
        c = self.c
        return c.get(f"{kind}0", 0.0) + (c.get(f"{kind}_t", 0.0) * tokens + c.get(f"{kind}_sq", 0.0) * sq_tokens) / gpus

    def sync_time(self):
        return self._sync_s

    def drafter_train_tokens_per_s(self, gpus):
        return self.c.get("drafter_tokens_per_s", 0.0) * gpus


def read_profile(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise TltsimError(f"{path}: profile not found; write one with `tltsim real profile -o {path}`")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise TltsimError(f"{path}: not a profile CSV ({str(e).splitlines()[0]})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TltsimError(f"{path}: missing column(s) {', '.join(missing)}; a profile has {', '.join(REQUIRED)}")
    bad = ~df["kind"].isin(KINDS)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise TltsimError(f"{path}, row {i + 1}, column 'kind': {df['kind'].iloc[i]!r} is not one of {', '.join(KINDS)}")
    num = df[REQUIRED[1:]].apply(pd.to_numeric, errors="coerce")
    if num.isna().any().any() or (num < 0).any().any():
        i, col = next((i, c) for c in REQUIRED[1:] for i in range(len(df)) if not (num[c].iloc[i] >= 0))
        raise TltsimError(f"{path}, row {i + 1}, column {col!r}: {df[col].iloc[i]!r} is not a non-negative number")
    unbatched = (df["kind"].isin(["decode", "spec", "catchup"]) & (num["batch"] < 1)).to_numpy()
    if unbatched.any():
        i = int(np.flatnonzero(unbatched)[0])
        raise TltsimError(f"{path}, row {i + 1}, column 'batch': {df['batch'].iloc[i]} for a {df['kind'].iloc[i]} "
                          "row; an engine iteration has at least one row in its batch")
    return pd.concat([df[["kind"]], num], axis=1)


# kind -> the columns its time is linear in (the fit's unknowns, one each) and what they stand for. Decode alone
# separates three (c_kv and c_att multiply the same context for one token a row; speculative rows part them).
SEPARATE = {
    "decode": (lambda d: [np.ones(len(d)), d.batch, d.context], "a fixed cost, a cost a row, a cost a context token",
               "2 or more batch sizes and 2 or more contexts"),
    "prefill": (lambda d: [np.ones(len(d)), d.tokens, d.sq_tokens], "a fixed cost, a cost a token, a cost a squared "
                "prompt length", "3 or more prompt shapes (tokens and squared lengths not in proportion)"),
    "train": (lambda d: [np.ones(len(d)), d.tokens, d.sq_tokens], "a fixed cost, a cost a token, a cost a squared "
              "sequence length", "3 or more batch shapes"),
}
SEPARATE["logprob"] = SEPARATE["train"]


def _check_separable(df: pd.DataFrame, where: str) -> None:
    """That each kind of SEPARATE the profile holds has rows enough, and different enough, to fit its unknowns
    (a design matrix of full column rank); TltsimError naming the kind and what it needs."""
    for kind, (columns, unknowns, needs) in SEPARATE.items():
        part = df[df.kind == kind]
        if not len(part) and kind in ("train", "logprob"):
            continue
        x = np.column_stack(columns(part)).astype(float)
        scale = np.abs(x).max(axis=0)
        k = x.shape[1]
        if len(part) < k or np.linalg.matrix_rank(x / np.where(scale > 0, scale, 1.0)) < k:
            raise TltsimError(f"{where}: its {len(part)} {kind} row(s) cannot separate the {k} unknowns of a {kind}'s "
                              f"time ({unknowns}): that needs at least {k} rows over {needs}; rerun `tltsim real "
                              f"profile` with its default --batches and --contexts")


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on relative errors: each row weighted by 1 / measured seconds."""
    if len(y) == 0:
        return np.zeros(a.shape[1])
    w = 1.0 / np.maximum(y, 1e-12)
    a, y = a * w[:, None], y * w
    scale = np.maximum(np.abs(a).max(axis=0), 1e-30)  # column scaling keeps nnls well conditioned
    x, _ = nnls(a / scale, y)
    return x / scale
