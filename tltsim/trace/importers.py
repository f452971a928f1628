"""Importers for the length logs users already have: verl-style JSONL and Vidur request CSV.

Each turns the foreign records into a frame with our columns plus a TraceMeta; the
caller validates it with `Trace.from_frame`. Problems are reported in the foreign
file's own terms (its line numbers, its key and column names).
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from tltsim.core.errors import TltsimError, where
from tltsim.trace.schema import TraceMeta
from tltsim.trace.values import show, whole_number

VIDUR_COLUMNS = ["arrived_at", "num_prefill_tokens", "num_decode_tokens"]


def frame_from_verl(records: list[tuple[int, dict]], path) -> tuple[pd.DataFrame, TraceMeta]:
    """Expand verl-style per-prompt records into one row per response.

    Each record (with its 1-based line number) is one prompt of one step:
    `{"step": 0, "dp_rank": 0, "input": 112, "output": [450, 453, ...], "n_sampling": 8, ...}`.
    `input` is the prompt length, `output` the group's response lengths (sample i is
    `output[i]`), `dp_rank` becomes `engine`; other keys are ignored. A step's prompts
    get prompt_id 0, 1, ... in the order their lines appear. Every record needs the same
    number of responses; `n_sampling`, when present, must equal len(output). `dp_rank` is
    on every record or on none.
    """
    rows = {"step": [], "prompt_id": [], "sample": [], "prompt_len": [], "response_len": [], "engine": []}
    next_prompt: dict[int, int] = {}
    group = None
    has_rank = "dp_rank" in records[0][1]
    for n, rec in records:
        at = f"{path}, line {n}"
        step = _whole_key(rec, "step", 0, at)
        prompt_len = _whole_key(rec, "input", 0, at)
        out = rec.get("output")
        if not isinstance(out, list):
            raise TltsimError(f"{at}, key 'output': expected a list of response lengths, got {show(out)}")
        if not out:
            raise TltsimError(f"{at}, key 'output': the list is empty; every prompt needs at least one response")
        lengths = []
        for j, v in enumerate(out):
            x = whole_number(v)
            if x is None or x < 1:
                raise TltsimError(f"{at}, key 'output', item {j}: {show(v)} is not a response length; lengths are whole numbers >= 1")
            lengths.append(x)
        if "n_sampling" in rec and whole_number(rec["n_sampling"]) != len(lengths):
            raise TltsimError(
                f"{at}: 'n_sampling' is {show(rec['n_sampling'])} but 'output' has {len(lengths)} lengths; "
                f"make them agree (one length per sample)"
            )
        if group is None:
            group = len(lengths)
        elif len(lengths) != group:
            raise TltsimError(
                f"{at}, key 'output': {len(lengths)} responses but the group size is {group} "
                f"(line {records[0][0]}); every prompt needs the same number of samples"
            )
        if ("dp_rank" in rec) != has_rank:
            raise TltsimError(f"{at}: 'dp_rank' is on some lines and not others; give it on every line or none")
        engine = _whole_key(rec, "dp_rank", 0, at) if has_rank else -1
        prompt = next_prompt.get(step, 0)
        next_prompt[step] = prompt + 1
        for j, x in enumerate(lengths):
            for col, v in zip(rows, (step, prompt, j, prompt_len, x, engine)):
                rows[col].append(v)
    if not has_rank:
        del rows["engine"]
    meta = TraceMeta(
        source="verl",
        group_size=group,
        provenance=f"imported from the verl-style length log {Path(path).name}: {len(records)} prompts",
    )
    return pd.DataFrame(rows), meta


def frame_from_vidur(df: pd.DataFrame, path, requests_per_step: int | None) -> tuple[pd.DataFrame, TraceMeta]:
    """Turn a Vidur request trace (`arrived_at, num_prefill_tokens, num_decode_tokens`) into rows.

    Requests are ordered by arrival (ties keep file order). Each request is a prompt with a
    group of one: prompt_len = num_prefill_tokens, response_len = num_decode_tokens. With
    `requests_per_step` None all requests form step 0; with k, the first k arrivals form
    step 0, the next k step 1, and so on (the last step may be shorter). Other columns are ignored.
    """
    if requests_per_step is not None and requests_per_step < 1:
        raise TltsimError(f"requests_per_step is {requests_per_step}; it must be at least 1")
    arrived = [_vidur_time(v, i, path) for i, v in enumerate(df["arrived_at"].tolist())]
    prefill = [_vidur_count(v, i, "num_prefill_tokens", 0, path) for i, v in enumerate(df["num_prefill_tokens"].tolist())]
    decode = [_vidur_count(v, i, "num_decode_tokens", 1, path) for i, v in enumerate(df["num_decode_tokens"].tolist())]
    order = sorted(range(len(arrived)), key=lambda i: arrived[i])
    k = requests_per_step or max(len(order), 1)
    out = pd.DataFrame(
        {
            "step": [r // k for r in range(len(order))],
            "prompt_id": [r % k for r in range(len(order))],
            "sample": [0] * len(order),
            "prompt_len": [prefill[i] for i in order],
            "response_len": [decode[i] for i in order],
        }
    )
    per_step = f"{k} per step" if requests_per_step else "all in step 0"
    meta = TraceMeta(
        source="vidur",
        group_size=1,
        provenance=f"imported from the Vidur request trace {Path(path).name}: {len(order)} requests in arrival order, {per_step}",
    )
    return out, meta


def _whole_key(rec: dict, key: str, lo: int, at: str) -> int:
    if key not in rec:
        raise TltsimError(f"{at}: missing key {key!r}; a verl-style record needs 'step', 'input' and 'output'")
    x = whole_number(rec[key])
    if x is None or x < lo:
        raise TltsimError(f"{at}, key {key!r}: {show(rec[key])} is not a whole number >= {lo}")
    return x


def _vidur_count(v, i: int, col: str, lo: int, path) -> int:
    x = whole_number(v)
    if x is None or x < lo:
        raise TltsimError(f"{where(path, i + 1, col)}{show(v)} is not a token count; it must be a whole number >= {lo}")
    return x


def _vidur_time(v, i: int, path) -> float:
    try:
        t = float(str(v).strip())
    except ValueError:
        t = math.nan
    if not math.isfinite(t):
        raise TltsimError(f"{where(path, i + 1, 'arrived_at')}{show(v)} is not a time; arrived_at must be a finite number of seconds")
    return t
