"""The trace: one row per generated response, plus metadata.

Columns (docs/design.md#one-record-schema):

    step          int   RL step the response belongs to (0-based, need not be contiguous)
    prompt_id     int   prompt within the step; a prompt's `group_size` samples share it
    sample        int   index of the sample within its prompt's group, 0..group_size-1
    prompt_len    int   prompt tokens (>= 0)
    response_len  int   generated tokens (>= 1; 0 exactly where aborted; <= meta.max_response_len in a
                        single-turn trace)
    reward        float optional
    finished      bool  optional; False = truncated at the cap
    engine        int   optional; data-parallel rank that served the response
    aborted       bool  optional; True = the request was admitted and aborted (verl dumps it as an empty
                        output): it held a slot and left nothing to train on, so its response_len is 0

A multi-turn trace (an agent's trajectories: the model generates, calls a tool, reads the tool's answer,
generates again) carries each trajectory's turns as list columns, one entry per turn, all three together:

    turn_response_len  list[int]    tokens the model generated in each turn (>= 0; they sum to response_len)
    tool_latency_s     list[float]  seconds of the tool call that followed the turn (null: the turn called no
                                    tool; a trajectory's last turn may call one, whose answer ends it)
    tool_tokens        list[int]    tokens the tool's answer appended to the context (0 where no tool was called)
    turn_gen_s         list[float]  optional: seconds the turn's generation took where the source recorded them
    turn_kept_len      list[int]    optional: tokens the turn left in the context for the next turn, where the
                                    source re-templates a turn's text (a reasoning block dropped keeps fewer than
                                    it generated; a template's wrapping adds a few); without it, every token stays.
                                    The simulator's step executors grow a context by it (the next turn prefills
                                    it anew after the context cached before the turn); asynchronous RL's loop by
                                    what the turn generated

Such a row's response_len counts the tokens the model generated (what the engines decode); the tool's
tokens are part of its sequence (`sequence_tokens`). A multi-turn trace's max_response_len caps what the
trainer keeps of a trajectory after its prompt (its turns' kept tokens and the tools', cut there), so a
trajectory may generate more than the cap and response_len is not checked against it. `Trace.turns` gives
the same as one row per turn. Parquet and JSONL carry list columns; CSV does not.

Sim and real write the same schema, so every table and plot works on both.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from tltsim.core.errors import TltsimError, where
from tltsim.trace.values import as_bool, as_float, as_int, exact, fail, is_missing, row, whole_number

REQUIRED = ["step", "prompt_id", "sample", "prompt_len", "response_len"]
OPTIONAL = {"reward": "float64", "finished": "bool", "engine": "int64", "aborted": "bool"}
INT_COLUMNS = REQUIRED + ["engine"]
TURN_LISTS = ("turn_response_len", "tool_latency_s", "tool_tokens")  # a multi-turn trace has all three
TURN_OPTIONAL = ("turn_gen_s", "turn_kept_len")
# Trace.turns: one row per turn
TURN_COLUMNS = ["step", "prompt_id", "sample", "turn", "response_len", "tool_latency_s", "tool_tokens"]


@dataclass
class TraceMeta:
    """Sidecar metadata of a trace."""

    source: str = "unknown"  # where the lengths come from: "synth:<family>", "verl", "vidur", "real", ...
    model: str = "unknown"  # the policy model that generated them
    max_response_len: int | None = None  # the response cap (a multi-turn trace's: of what is kept); None = unknown
    group_size: int | None = None  # samples per prompt (GRPO n); None = inferred
    provenance: str = ""  # free text: how it was made, parameters, seed, what it was matched to
    left_out: str = ""  # what the source held that the trace leaves out (a cut step's groups, validation rollouts)

    def to_dict(self) -> dict:
        d = asdict(self)
        if not d["left_out"]:  # as traces saved before it was known
            del d["left_out"]
        return d

    @classmethod
    def from_dict(cls, d: dict, path=None) -> "TraceMeta":
        """Build from a dict as `to_dict` writes it; unknown keys are ignored.

        Raises TltsimError naming `path` when a field has the wrong type.
        """
        if not isinstance(d, dict):
            raise TltsimError(f"{where(path)}trace metadata must be a JSON object, got {type(d).__name__}")
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        for k in ("source", "model", "provenance", "left_out"):
            if k in known and not isinstance(known[k], str):
                raise TltsimError(f"{where(path)}metadata field {k!r} must be text, got {known[k]!r}")
        for k in ("max_response_len", "group_size"):
            v = known.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise TltsimError(f"{where(path)}metadata field {k!r} must be a positive integer or null, got {v!r}")
        return cls(**known)


@dataclass
class Trace:
    """A validated response-length trace. Build with `Trace.from_frame`."""

    df: pd.DataFrame
    meta: TraceMeta = field(default_factory=TraceMeta)

    @classmethod
    def from_frame(cls, df: pd.DataFrame, meta: TraceMeta | None = None, path=None) -> "Trace":
        """Validate `df` against the schema and return a Trace with canonical dtypes.

        `meta` is copied, not modified; a missing group_size is filled in from the data.
        Raises TltsimError naming `path`, the row and the column of the first problem.
        """
        meta = replace(meta) if meta is not None else TraceMeta()
        df = checked(df, meta, path=path)
        if meta.group_size is None:
            meta.group_size = int(df.groupby(["step", "prompt_id"]).size().iloc[0])
        return cls(df=df, meta=meta)

    @property
    def agentic(self) -> bool:
        """Whether the trace holds multi-turn trajectories (its turn list columns)."""
        return TURN_LISTS[0] in self.df.columns

    @property
    def turns(self) -> pd.DataFrame | None:
        """One row per turn (TURN_COLUMNS, and `gen_s`, `kept_len` where the trace records them), in the trace's
        row order; None for a single-turn trace."""
        if not self.agentic:
            return None
        return expand_turns(self.df)

    def sequence_tokens(self) -> np.ndarray:
        """Per row, the tokens of its whole sequence after the prompt: generated tokens and, in a multi-turn
        trace, the tools' answers between them (what the trainer's forward passes read)."""
        out = self.df["response_len"].to_numpy(dtype=np.int64)
        if self.agentic:
            out = out + np.fromiter((int(sum(t)) for t in self.df["tool_tokens"]), np.int64, len(out))
        return out

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


def checked(df: pd.DataFrame, meta: TraceMeta, path=None) -> pd.DataFrame:
    """The trace's frame, its schema checked: a copy with canonical dtypes, sorted by step, prompt, sample."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TltsimError(
            f"{where(path)}missing column(s) {', '.join(repr(c) for c in missing)}; "
            f"a trace needs {', '.join(REQUIRED)} (optional: {', '.join(OPTIONAL)})"
        )
    dup = sorted({str(c) for c in df.columns[df.columns.duplicated()]})
    if dup:
        raise TltsimError(f"{where(path)}column(s) {', '.join(map(repr, dup))} appear more than once; name each column once")
    if len(df) == 0:
        raise TltsimError(f"{where(path)}the trace has no rows; add at least one response")
    out = df.reset_index(drop=True)  # copy-on-write: assigning columns leaves `df` as it was
    for col in [c for c in INT_COLUMNS if c in out.columns]:
        out[col] = as_int(out[col], col, path)
    if "finished" in out.columns:
        out["finished"] = as_bool(out["finished"], path, "finished")
    aborted = np.zeros(len(out), dtype=bool)
    if "aborted" in out.columns:
        out["aborted"] = as_bool(out["aborted"], path, "aborted")
        aborted = out["aborted"].to_numpy()
    for col in ["prompt_len", "response_len"]:
        least = np.where(aborted, 0, 1) if col == "response_len" else 0
        bad = np.flatnonzero(out[col].to_numpy() < least)
        if len(bad):
            i = int(bad[0])
            raise TltsimError(
                f"{where(path, row(i), col)}{out[col].iloc[i]} is not a valid length; "
                f"lengths are whole token counts, {'>= 1 (0 only on a row marked aborted)' if col == 'response_len' else '>= 0'}"
            )
    kept = np.flatnonzero(aborted & (out["response_len"].to_numpy() != 0))
    if len(kept):
        i = int(kept[0])
        raise TltsimError(f"{where(path, row(i), 'response_len')}{out['response_len'].iloc[i]} tokens on a row marked "
                          f"aborted; an aborted request leaves no tokens (response_len 0), or set aborted false")
    for col in ["step", "prompt_id", "sample"] + (["engine"] if "engine" in out.columns else []):
        bad = np.flatnonzero(out[col].to_numpy() < 0)
        if len(bad):
            i = int(bad[0])
            raise TltsimError(f"{where(path, row(i), col)}{out[col].iloc[i]} is negative; ids are >= 0")
    cap = meta.max_response_len
    if cap is not None and TURN_LISTS[0] not in out.columns:  # a multi-turn cap bounds the kept tokens (above)
        over = np.flatnonzero(out["response_len"].to_numpy() > cap)
        if len(over):
            i = int(over[0])
            raise TltsimError(
                f"{where(path, row(i), 'response_len')}{out['response_len'].iloc[i]} exceeds the declared "
                f"max_response_len {cap}; fix the row or raise max_response_len in the metadata"
            )
    if "reward" in out.columns:
        out["reward"] = as_float(out["reward"], "reward", path)
    step, prompt, sample = (out[c].to_numpy() for c in ["step", "prompt_id", "sample"])
    order = _sort_order(step, prompt, sample)
    rows = np.arange(len(step)) if order is None else order  # the file row at each sorted position
    s_step, s_prompt, s_sample = step[rows], prompt[rows], sample[rows]
    same_prompt = (s_step[1:] == s_step[:-1]) & (s_prompt[1:] == s_prompt[:-1])
    repeat = same_prompt & (s_sample[1:] == s_sample[:-1])
    if repeat.any():
        i = int(rows[1:][repeat].min())  # the first row that repeats an earlier one
        raise TltsimError(
            f"{where(path, row(i), 'sample')}step {step[i]} prompt {prompt[i]} sample {sample[i]} "
            f"appears twice; each (step, prompt_id, sample) must be unique"
        )
    starts = np.flatnonzero(np.r_[True, ~same_prompt])  # first sorted row of each (step, prompt)
    sizes = np.diff(np.r_[starts, len(rows)])
    if meta.group_size is not None:
        expected = meta.group_size
    else:
        values, counts = np.unique(sizes, return_counts=True)
        expected = int(values[np.argmax(counts)])  # the most common size; the smallest on a tie
    bad = np.flatnonzero(sizes != expected)
    if len(bad):
        g = int(bad[0])
        i = int(rows[starts[g]:starts[g] + sizes[g]].min())
        raise TltsimError(
            f"{where(path, row(i), 'prompt_id')}step {step[i]} prompt {prompt[i]} has {sizes[g]} samples but the "
            f"group size is {expected}; every prompt needs the same number of samples (set group_size in the "
            f"metadata or complete the group)"
        )
    cols = REQUIRED + [c for c in OPTIONAL if c in out.columns]
    present = [c for c in (*TURN_LISTS, *TURN_OPTIONAL) if c in out.columns]
    if present:
        _check_turns(out, present, path)
        cols += present
    return out[cols] if order is None else out[cols].take(order).reset_index(drop=True)


def expand_turns(df: pd.DataFrame) -> pd.DataFrame:
    """A frame with the turn list columns as one row per turn (TURN_COLUMNS, and `gen_s`, `kept_len` where present)."""
    n = np.fromiter((len(t) for t in df["turn_response_len"]), np.int64, len(df))
    rows = np.repeat(np.arange(len(df)), n)
    out = {c: df[c].to_numpy()[rows] for c in ("step", "prompt_id", "sample")}
    out["turn"] = np.arange(len(rows)) - np.repeat(np.cumsum(n) - n, n)
    out["response_len"] = flat_turns(df["turn_response_len"], np.int64)
    out["tool_latency_s"] = flat_turns(df["tool_latency_s"], float)
    out["tool_tokens"] = flat_turns(df["tool_tokens"], np.int64)
    if "turn_gen_s" in df.columns:
        out["gen_s"] = flat_turns(df["turn_gen_s"], float)
    if "turn_kept_len" in df.columns:
        out["kept_len"] = flat_turns(df["turn_kept_len"], np.int64)
    return pd.DataFrame(out)


def tool_calls(latencies) -> int:
    """How many of the turns' tool latencies (one list a trajectory, null or NaN where a turn called no tool)
    are calls."""
    return sum(v is not None and v == v for cell in latencies for v in cell)


def flat_turns(col, dtype) -> np.ndarray:
    """A turn list column (one list a row) as one array of every row's turns in order, None as NaN."""
    return np.asarray([np.nan if v is None else v for cell in col for v in cell], dtype=dtype)


def _check_turns(out: pd.DataFrame, present: list[str], path) -> None:
    """The turn list columns: all three or none, a list per row of one length, whole token counts that sum to
    the row's response_len, finite non-negative latencies; each cell becomes a plain list (ints, floats with
    None where no tool was called)."""
    missing = [c for c in TURN_LISTS if c not in present]
    if missing:
        raise TltsimError(f"{where(path)}turn column(s) {', '.join(map(repr, present))} without "
                          f"{', '.join(map(repr, missing))}; a multi-turn trace has all of {', '.join(TURN_LISTS)}")
    for c in present:
        cells = []
        for i, v in enumerate(out[c].tolist()):
            if isinstance(v, np.ndarray):
                v = v.tolist()
            if not isinstance(v, (list, tuple)) or not v:
                raise fail(path, i, c, v, "is not a list with one entry per turn; a trajectory has at least one "
                                           "turn")
            cells.append(list(v))
        out[c] = pd.Series(cells, index=out.index, dtype=object)
    lens = {c: np.fromiter((len(v) for v in out[c]), np.int64, len(out)) for c in present}
    for c in present[1:]:
        bad = np.flatnonzero(lens[c] != lens[present[0]])
        if len(bad):
            i = int(bad[0])
            raise TltsimError(f"{where(path, row(i), c)}{lens[c][i]} entries but {present[0]} has "
                              f"{lens[present[0]][i]}; every turn column has one entry per turn")
    for c, kind in (("turn_response_len", "int"), ("tool_tokens", "int"), ("tool_latency_s", "float"),
                    ("turn_gen_s", "float"), ("turn_kept_len", "int")):
        if c not in out.columns:
            continue
        cells = []
        for i, cell in enumerate(out[c]):
            vals = []
            for v in cell:
                if kind == "int":
                    n = whole_number(v)
                    if n is None or n < 0:
                        raise fail(path, i, c, v, f"is not a whole token count >= 0; {c} lists them per turn")
                    vals.append(n)
                else:
                    d = None if is_missing(v) else exact(v)
                    if d is not None and not (d.is_finite() and d >= 0):
                        raise fail(path, i, c, v, f"is not a time in seconds (a finite number >= 0, or null where "
                                                   f"the turn called no tool); {c} lists them per turn")
                    if d is None and not is_missing(v):
                        raise fail(path, i, c, v, f"is not a number; {c} lists seconds per turn, null for none")
                    vals.append(None if d is None else float(d))
            cells.append(vals)
        out[c] = pd.Series(cells, index=out.index, dtype=object)
    for i, (gen, lat, tok, total) in enumerate(zip(out["turn_response_len"], out["tool_latency_s"], out["tool_tokens"],
                                                   out["response_len"])):
        if sum(gen) != total:
            raise fail(path, i, "turn_response_len", gen, f"sums to {sum(gen)} tokens but response_len is {total}; "
                                                           f"the turns' tokens are the response's")
        for t, (lt, tt) in enumerate(zip(lat, tok)):
            if lt is None and tt:
                raise fail(path, i, "tool_tokens", tok, f"has {tt} tokens after turn {t}, which called no tool "
                                                         f"(its tool_latency_s is null); give the call's latency")
            if lt is not None and t < len(gen) - 1:
                continue
            if lt is None and t < len(gen) - 1:
                raise fail(path, i, "tool_latency_s", lat, f"is null after turn {t}, which another turn follows; "
                                                            f"a trajectory goes on only after a tool call")


def _sort_order(step: np.ndarray, prompt: np.ndarray, sample: np.ndarray) -> np.ndarray | None:
    """A stable order by (step, prompt_id, sample) (equal keys keep file order), or None when the
    rows are already in strictly increasing order, as generated and saved traces are."""
    ps, ss = int(prompt.max()) + 1, int(sample.max()) + 1
    if (int(step.max()) + 1) * ps * ss >= 2**62:  # one int64 key would overflow
        return np.lexsort((sample, prompt, step))
    key = (step * ps + prompt) * ss + sample
    if np.all(key[1:] > key[:-1]):
        return None
    return np.argsort(key, kind="stable")
