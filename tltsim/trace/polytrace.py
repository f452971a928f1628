"""PolyTrace's multi-turn workload log as a multi-turn trace: `tltsim trace convert LOG out.parquet`.

PolyTrace (github.com/Zhou-jiecheng/PolyTrace, "RL in the Wild", arXiv 2509.25279) instruments verl's
multi-turn SGLang rollout (Search-R1: the model searches, reads the results, answers) and writes one JSON line
per trajectory to `multiturn_workload_step_<step>[_rank_<rank>].jsonl`. LOG is such a file or a directory of
them. A line:

    {"step": 0, "prompt_len": 317, "max_response_len": 3000, "prompt_group_id": 0, "sample_id": 3,
     "turns": [{"turn": 0, "completion_tokens": 40, "engine_latency_s": 93.7, "finish_reason": "tool_calls", ...}, ...],
     "tool_calls": [{"turn": 0, "latency_s": 0.074, "append_len": 1041, "status": "success", ...}, ...],
     "finish_reason": "stop", "final_response_len": 1216, ...}

One trace row per line:

    step, prompt_len         the line's
    prompt_id, sample        prompt_group_id, sample_id
    turn_response_len        each turn's completion_tokens (response_len is their sum: what the model generated)
    turn_kept_len            each turn's assistant_append_len where the log has it: the tokens the turn left in the
                             context (verl re-templates a turn: a turn that generated 2,127 tokens may keep 138);
                             a line without it keeps what it generated
    tool_latency_s           seconds of the tool call(s) that followed the turn (the calls whose `turn` names it),
                             summed where a turn made several; null where it made none
    tool_tokens              those calls' append_len: the tokens each call appended to the context (the tool's
                             answer with its chat-template wrapping), summed
    turn_gen_s               each turn's engine_latency_s: the engine's seconds for the turn's request, from
                             submission to its last token (queueing in the batch included)
    finished                 false where the trajectory was cut: finish_reason "length", or final_response_len
                             (its tokens after the prompt, tools' included) at max_response_len
    meta.max_response_len    the lines' max_response_len: the cap of what the trainer keeps of a trajectory after its
                             prompt (final_response_len: kept and tool tokens, cut there), not of what it generated

A run stopped mid-step leaves its last step file with some of the step's groups whole and the rest short: the
groups with fewer samples than the run's (the largest group's, or the largest sample_id + 1) are left out, with
one warning a step (tltsim.trace.incomplete). verl's finish reasons are stop, length and tool_calls: the log records no aborted request, so the trace has no
`aborted` column. Every problem is reported in the log's own terms: the file, the line, the key.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from tltsim.core.errors import TltsimError
from tltsim.core.jsonl import first_object, read_objects
from tltsim.trace.incomplete import whole_groups
from tltsim.trace.schema import Trace, TraceMeta
from tltsim.trace.values import show, whole_number

FILE = re.compile(r"multiturn_workload_step_(\d+)(?:_rank_(\d+))?\.jsonl")
WHAT = "a PolyTrace multi-turn workload log"
LINE_KEYS = ("step", "prompt_len", "prompt_group_id", "sample_id", "turns", "tool_calls")
TURN_KEYS = ("completion_tokens", "engine_latency_s")
KEPT = "assistant_append_len"  # a turn's tokens kept in the context, where the log has them
CALL_KEYS = ("turn", "latency_s", "append_len")
FINISH_REASONS = ("stop", "length", "tool_calls")


def is_multiturn_log(path) -> bool:
    """True for a directory holding `multiturn_workload_step_*.jsonl` files, or a .jsonl file whose first record has
    `turns` and `tool_calls` lists."""
    path = Path(path)
    if path.is_dir():
        return any(FILE.fullmatch(f.name) for f in path.glob("*.jsonl"))
    first = first_object(path)
    return first is not None and isinstance(first.get("turns"), list) and isinstance(first.get("tool_calls"), list)


def read_multiturn_log(path) -> Trace:
    """The multi-turn trace of a PolyTrace log file or directory (the module docstring). Raises TltsimError naming
    the file, line and key of the first problem."""
    path = Path(path)
    files = _log_files(path)
    rows, seen, cap = [], {}, None  # seen: (step, prompt, sample) -> where; cap: (max_response_len, where)
    for f in files:
        records = read_objects(f, WHAT)
        if not records:
            raise TltsimError(f"{f}: the file has no lines; {WHAT} has one JSON line per trajectory")
        for n, rec in records:
            row, line_cap = _row(f, n, rec)
            at = f"{f.name}, line {n}"
            key = (row["step"], row["prompt_id"], row["sample"])
            if key in seen:
                raise TltsimError(f"{f}, line {n}, key 'sample_id': step {key[0]} prompt_group_id {key[1]} sample_id "
                                  f"{key[2]} is also at {seen[key]}; each trajectory is logged once (remove the copy)")
            seen[key] = at
            if cap is None:
                cap = (line_cap, at)
            elif line_cap != cap[0]:
                raise TltsimError(f"{f}, line {n}, key 'max_response_len': {'missing' if line_cap is None else line_cap}, "
                                  f"but {cap[1]} has {'none' if cap[0] is None else cap[0]}; convert the steps of one "
                                  f"run (one response cap)")
            rows.append(row)
    max_len = cap[0]
    df = pd.DataFrame(rows)
    if "turn_kept_len" in df:  # a line without it keeps every token it generated
        df["turn_kept_len"] = [g if k is None or k != k else k for k, g in zip(df["turn_kept_len"],
                                                                            df["turn_response_len"])]
    group = _group_size(df)
    df, left_out = whole_groups(df, group, path)
    n_calls = int(sum(sum(x is not None for x in r) for r in df["tool_latency_s"]))
    meta = TraceMeta(source="polytrace", max_response_len=max_len, group_size=group, left_out=left_out,
                     provenance=(
        f"imported from the PolyTrace multi-turn workload log {path.name} ({', '.join(f.name for f in files)}): "
        f"{len(df)} trajectories, {sum(len(t) for t in df['turn_response_len'])} turns, {n_calls} turns followed "
        f"by tool calls; response_len sums the turns' completion_tokens, turn_kept_len is their assistant_append_len "
        f"(tokens kept in the context), tool_tokens the calls' append_len (tokens appended to the context), "
        f"tool_latency_s their latency_s (both summed over a turn's calls), turn_gen_s the turns' engine_latency_s"))
    return Trace.from_frame(df, meta, path=path)


def _group_size(df: pd.DataFrame) -> int:
    """The run's samples a prompt: its largest group's, or the largest sample_id + 1 where a log's groups are all
    cut short."""
    return max(int(df.groupby(["step", "prompt_id"]).size().max()), int(df["sample"].max()) + 1)


def _log_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise TltsimError(f"{path} does not exist; give a PolyTrace log directory or one "
                          f"multiturn_workload_step_<step>.jsonl in it")
    files = sorted(path.glob("*.jsonl"))
    if not files:
        raise TltsimError(f"{path}: no .jsonl files; PolyTrace writes multiturn_workload_step_<step>.jsonl here")
    bad = [f.name for f in files if not FILE.fullmatch(f.name)]
    if bad:
        raise TltsimError(f"{path}: {bad[0]} is not named as PolyTrace names its step files "
                          f"(multiturn_workload_step_<step>[_rank_<rank>].jsonl); move other files out of the directory")

    def order(f: Path):
        m = FILE.fullmatch(f.name)
        return int(m[1]), int(m[2] or -1)

    return sorted(files, key=order)


def _row(f: Path, n: int, rec: dict) -> tuple[dict, int | None]:
    """The line's trace row, and its max_response_len (None where it has none)."""
    at = f"{f}, line {n}"
    for key in LINE_KEYS:
        if key not in rec:
            raise TltsimError(f"{at}: no key {key!r}; a line of {WHAT} has {', '.join(LINE_KEYS)}")
    cap = _count(rec, "max_response_len", at) if "max_response_len" in rec else None
    if cap == 0:
        raise TltsimError(f"{at}, key 'max_response_len': 0 is not a response cap; it is a token count >= 1")
    out = {"step": _count(rec, "step", at), "prompt_id": _count(rec, "prompt_group_id", at),
           "sample": _count(rec, "sample_id", at), "prompt_len": _count(rec, "prompt_len", at)}
    turns, calls = rec["turns"], rec["tool_calls"]
    for key, v in (("turns", turns), ("tool_calls", calls)):
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            raise TltsimError(f"{at}, key {key!r}: expected a list of objects, got {show(v)}")
    if not turns:
        raise TltsimError(f"{at}, key 'turns': the list is empty; a trajectory has at least one turn")
    gen, gen_s, kept = [], [], []
    for i, t in enumerate(turns):
        t_at = f"{at}, key 'turns', item {i}"
        for key in TURN_KEYS:
            if key not in t:
                raise TltsimError(f"{t_at}: no key {key!r}; a turn has {', '.join(TURN_KEYS)}")
        if "turn" in t and whole_number(t["turn"]) != i:
            raise TltsimError(f"{t_at}, key 'turn': {show(t['turn'])}, but it is item {i} of the list; the log lists "
                              f"a trajectory's turns in order from 0")
        gen.append(_count(t, "completion_tokens", t_at))
        gen_s.append(_seconds(t, "engine_latency_s", t_at))
        if KEPT in t:
            kept.append(_count(t, KEPT, t_at))
    if kept and len(kept) < len(turns):
        raise TltsimError(f"{at}, key 'turns': {KEPT} on {len(kept)} of {len(turns)} turns; a trajectory's turns "
                          f"have it on every turn or none")
    latency: list[float | None] = [None] * len(turns)
    tokens = [0] * len(turns)
    for j, c in enumerate(calls):
        c_at = f"{at}, key 'tool_calls', item {j}"
        for key in CALL_KEYS:
            if key not in c:
                raise TltsimError(f"{c_at}: no key {key!r}; a tool call has {', '.join(CALL_KEYS)}")
        t = _count(c, "turn", c_at)
        if t >= len(turns):
            raise TltsimError(f"{c_at}, key 'turn': turn {t}, but the trajectory has {len(turns)} turn(s) "
                              f"(0..{len(turns) - 1}); a tool call follows one of its turns")
        latency[t] = (latency[t] or 0.0) + _seconds(c, "latency_s", c_at)
        tokens[t] += _count(c, "append_len", c_at)
    for t in range(len(turns) - 1):
        if latency[t] is None:
            raise TltsimError(f"{at}, key 'tool_calls': no call follows turn {t}, but turn {t + 1} does; a trajectory "
                              f"goes on only after a tool call")
    out.update(response_len=sum(gen), turn_response_len=gen, tool_latency_s=latency, tool_tokens=tokens,
               turn_gen_s=gen_s, finished=_finished(rec, cap, at), **({"turn_kept_len": kept} if kept else {}))
    if out["response_len"] < 1:
        raise TltsimError(f"{at}, key 'turns': the turns generated no tokens (completion_tokens sum to 0); a "
                          f"trajectory generates at least one")
    return out, cap


def _finished(rec: dict, cap: int | None, at: str) -> bool:
    reason = rec.get("finish_reason", "stop")
    if reason not in FINISH_REASONS:
        raise TltsimError(f"{at}, key 'finish_reason': {show(reason)} is not one of verl's finish reasons "
                          f"({', '.join(FINISH_REASONS)})")
    final = _count(rec, "final_response_len", at) if rec.get("final_response_len") is not None else None
    return reason != "length" and not (final is not None and cap is not None and final >= cap)


def _count(d: dict, key: str, at: str) -> int:
    x = whole_number(d[key])
    if x is None or x < 0:
        raise TltsimError(f"{at}, key {key!r}: {show(d[key])} is not a whole number >= 0")
    return x


def _seconds(d: dict, key: str, at: str) -> float:
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise TltsimError(f"{at}, key {key!r}: {show(v)} is not a time in seconds (a finite number >= 0)")
    return float(v)
