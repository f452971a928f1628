"""The trace: one row per generated response, plus metadata.

Columns (DESIGN.md "one record schema"):

    step          int   RL step the response belongs to (0-based, need not be contiguous)
    prompt_id     int   prompt within the step; a prompt's `group_size` samples share it
    sample        int   index of the sample within its prompt's group, 0..group_size-1
    prompt_len    int   prompt tokens (>= 1)
    response_len  int   generated tokens (>= 1, <= meta.max_response_len)
    reward        float optional
    finished      bool  optional; False = truncated at the cap
    engine        int   optional; data-parallel rank that served the response

Sim and real write the same schema, so every table and plot works on both.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from tltsim.errors import TltsimError, where

REQUIRED = ["step", "prompt_id", "sample", "prompt_len", "response_len"]
OPTIONAL = {"reward": "float64", "finished": "bool", "engine": "int64"}
INT_COLUMNS = REQUIRED + ["engine"]


@dataclass
class TraceMeta:
    """Sidecar metadata of a trace."""

    source: str = "unknown"  # where the lengths come from: "synth:<family>", "verl", "vidur", "real", ...
    model: str = "unknown"  # the policy model that generated them
    max_response_len: int | None = None  # the generation cap; None = unknown (no truncation stats)
    group_size: int | None = None  # samples per prompt (GRPO n); None = inferred
    provenance: str = ""  # free text: how it was made, parameters, seed, what it was matched to

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TraceMeta":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


@dataclass
class Trace:
    """A validated response-length trace. Build with `Trace.from_frame`."""

    df: pd.DataFrame
    meta: TraceMeta = field(default_factory=TraceMeta)

    @classmethod
    def from_frame(cls, df: pd.DataFrame, meta: TraceMeta | None = None, path=None) -> "Trace":
        """Validate `df` against the schema and return a Trace with canonical dtypes.

        Raises TltsimError naming `path`, the row and the column of the first problem.
        """
        meta = meta or TraceMeta()
        df = validate(df, meta, path=path)
        if meta.group_size is None:
            meta.group_size = int(df.groupby(["step", "prompt_id"]).size().iloc[0])
        return cls(df=df, meta=meta)

    @property
    def steps(self) -> list[int]:
        return sorted(self.df["step"].unique().tolist())

    def step(self, s: int) -> pd.DataFrame:
        return self.df[self.df["step"] == s]

    def select_steps(self, steps) -> "Trace":
        keep = self.df[self.df["step"].isin(list(steps))].reset_index(drop=True)
        if keep.empty:
            raise TltsimError(f"no steps of the trace fall in {steps!r}; the trace has steps {self.steps[0]}..{self.steps[-1]}")
        return Trace(keep, TraceMeta(**self.meta.to_dict()))


def validate(df: pd.DataFrame, meta: TraceMeta, path=None) -> pd.DataFrame:
    """Check the schema; return a copy with canonical dtypes, sorted by step, prompt, sample."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TltsimError(
            f"{where(path)}missing column(s) {', '.join(repr(c) for c in missing)}; "
            f"a trace needs {', '.join(REQUIRED)} (optional: {', '.join(OPTIONAL)})"
        )
    if len(df) == 0:
        raise TltsimError(f"{where(path)}the trace has no rows; add at least one response")
    out = df.reset_index(drop=True).copy()
    for col in [c for c in INT_COLUMNS if c in out.columns]:
        out[col] = _as_int(out[col], col, path)
    for col in ["prompt_len", "response_len"]:
        bad = np.flatnonzero(out[col].to_numpy() < (1 if col == "response_len" else 0))
        if len(bad):
            i = int(bad[0])
            raise TltsimError(
                f"{where(path, _row(i), col)}{out[col].iloc[i]} is not a valid length; "
                f"lengths are whole token counts, {'>= 1' if col == 'response_len' else '>= 0'}"
            )
    for col in ["step", "prompt_id", "sample"] + (["engine"] if "engine" in out.columns else []):
        bad = np.flatnonzero(out[col].to_numpy() < 0)
        if len(bad):
            i = int(bad[0])
            raise TltsimError(f"{where(path, _row(i), col)}{out[col].iloc[i]} is negative; ids are >= 0")
    cap = meta.max_response_len
    if cap is not None:
        over = np.flatnonzero(out["response_len"].to_numpy() > cap)
        if len(over):
            i = int(over[0])
            raise TltsimError(
                f"{where(path, _row(i), 'response_len')}{out['response_len'].iloc[i]} exceeds the declared "
                f"max_response_len {cap}; fix the row or raise max_response_len in the metadata"
            )
    if "reward" in out.columns:
        out["reward"] = _as_float(out["reward"], "reward", path)
    if "finished" in out.columns:
        out["finished"] = _as_bool(out["finished"], path)
    dup = out.duplicated(["step", "prompt_id", "sample"])
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        r = out.iloc[i]
        raise TltsimError(
            f"{where(path, _row(i), 'sample')}step {r['step']} prompt {r['prompt_id']} sample {r['sample']} "
            f"appears twice; each (step, prompt_id, sample) must be unique"
        )
    sizes = out.groupby(["step", "prompt_id"], sort=True).size()
    expected = meta.group_size if meta.group_size is not None else int(sizes.mode().iloc[0])
    bad = sizes[sizes != expected]
    if len(bad):
        (s, p), n = bad.index[0], int(bad.iloc[0])
        i = int(np.flatnonzero(((out["step"] == s) & (out["prompt_id"] == p)).to_numpy())[0])
        raise TltsimError(
            f"{where(path, _row(i), 'prompt_id')}step {s} prompt {p} has {n} samples but the group size is "
            f"{expected}; every prompt needs the same number of samples (set group_size in the metadata "
            f"or complete the group)"
        )
    cols = REQUIRED + [c for c in OPTIONAL if c in out.columns]
    return out[cols].sort_values(["step", "prompt_id", "sample"], kind="stable").reset_index(drop=True)


def _row(i: int) -> int:
    """Rows are reported 1-based, as a person counts data rows in a file."""
    return i + 1


def _as_int(s: pd.Series, col: str, path) -> pd.Series:
    num = pd.to_numeric(s, errors="coerce")
    bad = num.isna() | ~np.isfinite(num.astype("float64")) | (num.astype("float64") % 1 != 0)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise TltsimError(
            f"{where(path, _row(i), col)}{s.iloc[i]!r} is not a whole number; {col} must be an integer"
        )
    return num.astype("int64")


def _as_float(s: pd.Series, col: str, path) -> pd.Series:
    num = pd.to_numeric(s, errors="coerce")
    bad = num.isna() & s.notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise TltsimError(f"{where(path, _row(i), col)}{s.iloc[i]!r} is not a number")
    return num.astype("float64")


_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n"}


def _as_bool(s: pd.Series, path) -> pd.Series:
    if s.dtype == bool:
        return s
    out = []
    for i, v in enumerate(s.tolist()):
        t = str(v).strip().lower()
        if isinstance(v, (bool, np.bool_)):
            out.append(bool(v))
        elif t in _TRUE:
            out.append(True)
        elif t in _FALSE:
            out.append(False)
        else:
            raise TltsimError(f"{where(path, _row(i), 'finished')}{v!r} is not a boolean; use true/false")
    return pd.Series(out, index=s.index, dtype=bool)
