"""verl's rollout dumps as a trace: `tltsim trace convert DIR out.parquet --tokenizer MODEL_DIR`.

With `trainer.rollout_data_dir=DIR`, verl's trainer (`RayPPOTrainer._dump_generations`) writes one
`DIR/{global_step}.jsonl` per step (steps count from 1), one line per sample:

    {"input": prompt text, "output": response text, "gts": ..., "score": 1.0, "step": 3, ...reward extras}

The texts are decoded with `skip_special_tokens=True`, so the lengths here are the tokenizer's count of
each text: a response's end-of-sequence token and a chat template's special tokens are not counted
(verl's `response_length/*` metrics count the EOS token, so they read about one token more).

Groups: verl repeats each prompt `rollout.n` times on consecutive rows, but `trainer.balance_batch`
(on by default) reorders the batch across data-parallel ranks before the dump. So the samples of one
prompt are the lines of a step with the same input text, wherever they sit; prompt_id numbers the
distinct inputs in order of first appearance, sample numbers a prompt's lines in file order. A prompt
drawn k times in one batch (datasets repeat prompts) has k * n lines: it becomes k groups of n. A prompt's lines
past its last whole group (a dump that lost lines) are a group cut short: left out, with a warning
(tltsim.trace.incomplete).
`score` becomes `reward`; the step is the line's `step` (or, without one, the number in the file name).
An empty `output` is an aborted request (verl writes aborted requests so, and logs their share as
`response/aborted_ratio`): its row is kept, with response_len 0 and `aborted` true, so its group stays whole.
The dump has no engine column: which rollout engine served a sample is not recorded.

Every problem is reported in the dump's own terms: the file, the line, the key.
"""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Callable

import pandas as pd

from tltsim.core.errors import TltsimError
from tltsim.core.jsonl import first_object, read_objects
from tltsim.trace.incomplete import whole_groups
from tltsim.trace.schema import Trace, TraceMeta
from tltsim.trace.values import show, whole_number

KEYS = ("input", "output")  # what every line needs; "score" and "step" are used when present


def is_rollout_dump(path) -> bool:
    """True for a directory holding .jsonl files, or a .jsonl file whose first record has a response text in "output"."""
    path = Path(path)
    if path.is_dir():
        return any(path.glob("*.jsonl"))
    first = first_object(path)
    return first is not None and isinstance(first.get("output"), str)


def read_rollout_dump(path, count_tokens: Callable[[list[str]], list[int]], tokenizer: str = "") -> Trace:
    """The trace of a rollout dump directory (every `<step>.jsonl` in it) or of one dump file.

    `count_tokens` maps texts to token counts (tltsim.trace.tokens.token_counter); `tokenizer` names it
    in the provenance. Raises TltsimError naming the file, line and key of the first problem."""
    path = Path(path)
    files = _dump_files(path)
    frames, seen = [], {}
    lines, group = 0, None  # group: (size, the file that set it)
    for f in files:
        step, records = _read_file(f)
        if step in seen:
            raise TltsimError(f"{f}: step {step} is also in {seen[step]}; a rollout dump has one file per step "
                              f"(remove the copy)")
        seen[step] = f
        frame, size = _step_frame(f, step, records, count_tokens)
        if group is not None and size != group[0]:
            raise TltsimError(f"{f}: groups of {size} samples, but {group[1]} has groups of {group[0]}; every step "
                              f"of a run samples rollout.n responses per prompt (convert the steps of one run)")
        group = group or (size, f)
        frames.append(frame)
        lines += len(records)
    df, left_out = whole_groups(pd.concat(frames, ignore_index=True), group[0], path)
    if "aborted" in df:  # a step without an aborted request has no such column: its rows are not aborted
        df["aborted"] = df["aborted"].astype("boolean").fillna(False).astype(bool)
    by = f" with the tokenizer {tokenizer}" if tokenizer else ""
    meta = TraceMeta(source="verl-dump", group_size=group[0], left_out=left_out, provenance=(
        f"imported from the verl rollout dump {path.name}: {len(files)} step(s), {lines} samples; "
        f"lengths are token counts of the decoded texts{by} (special tokens, EOS included, not counted)"))
    return Trace.from_frame(df, meta, path=path)


def _dump_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise TltsimError(f"{path} does not exist; give verl's trainer.rollout_data_dir or one <step>.jsonl in it")
    files = sorted(path.glob("*.jsonl"))
    if not files:
        raise TltsimError(f"{path}: no .jsonl files; verl writes <global_step>.jsonl here when the run sets "
                          f"trainer.rollout_data_dir={path}")
    bad = [f.name for f in files if whole_number(f.stem) is None]
    if bad:
        raise TltsimError(f"{path}: {bad[0]} is not named by a step number as verl names its dumps "
                          f"(<global_step>.jsonl); move other files out of the directory")
    return sorted(files, key=lambda f: int(f.stem))


def _read_file(f: Path) -> tuple[int, list[tuple[int, dict]]]:
    """(step, [(line number, record)]) of one dump file; the step from the lines or else the file name."""
    records = []
    step_at: tuple[int, int] | None = None  # (step, line) of the first line that names one
    for n, rec in read_objects(f, "a verl rollout dump"):
        for key in KEYS:
            if key not in rec:
                raise TltsimError(f"{f}, line {n}: no key {key!r}; a line of verl's rollout dump has 'input' "
                                  f"(prompt text), 'output' (response text), 'score' and 'step'")
            if not isinstance(rec[key], str):
                raise TltsimError(f"{f}, line {n}, key {key!r}: expected the {'prompt' if key == 'input' else 'response'} "
                                  f"text, got {show(rec[key])}")
        if "step" in rec:
            s = whole_number(rec["step"])
            if s is None or s < 0:
                raise TltsimError(f"{f}, line {n}, key 'step': {show(rec['step'])} is not a step number")
            if step_at is None:
                step_at = (s, n)
            elif s != step_at[0]:
                raise TltsimError(f"{f}, line {n}, key 'step': step {s}, but line {step_at[1]} is step {step_at[0]}; "
                                  f"verl writes one file per step: split the file by step")
        records.append((n, rec))
    if not records:
        raise TltsimError(f"{f}: the file has no lines; a rollout dump has one JSON line per sample")
    if step_at is not None:
        return step_at[0], records
    s = whole_number(f.stem)
    if s is None:
        raise TltsimError(f"{f}: no 'step' on its lines and the file name is not a step number; name it "
                          f"<global_step>.jsonl as verl does")
    return s, records


def _step_frame(f: Path, step: int, records: list[tuple[int, dict]], count_tokens) -> tuple[pd.DataFrame, int]:
    """One step's rows and its group size n: lines by input text, split into groups of n (the most common size)."""
    scored = ["score" in r for _, r in records]
    if any(scored) and not all(scored):
        n = records[scored.index(False) if scored[0] else scored.index(True)][0]
        raise TltsimError(f"{f}, line {n}: 'score' is on some lines and not on others; a rollout dump scores every sample")
    members: dict[str, list[int]] = {}  # input text -> indices into records, in file order
    for i, (_, rec) in enumerate(records):
        members.setdefault(rec["input"], []).append(i)
    sizes = Counter(len(v) for v in members.values())
    group = max(sizes, key=lambda s: (sizes[s], s))  # the most common size; the largest on a tie (lines get lost)
    prompt_of, sample_of = {}, {}
    prompt = 0
    for text, idx in members.items():  # a prompt's lines past its last whole group: a group cut short, left out
        for j, i in enumerate(idx):
            prompt_of[i], sample_of[i] = prompt + j // group, j % group
        prompt += -(-len(idx) // group)
    aborted = [not rec["output"] for _, rec in records]  # verl dumps an aborted request as an empty output
    texts = [rec["input"] for _, rec in records] + [rec["output"] for (_, rec), a in zip(records, aborted) if not a]
    k = len(records)
    counts = list(count_tokens(texts))
    answers = iter(counts[k:])
    lengths = [0 if a else next(answers) for a in aborted]
    out = pd.DataFrame({
        "step": step,
        "prompt_id": [prompt_of[i] for i in range(k)],
        "sample": [sample_of[i] for i in range(k)],
        "prompt_len": counts[:k],
        "response_len": lengths,
    })
    if any(aborted):
        out["aborted"] = aborted
    zero = [i for i in range(k) if lengths[i] < 1 and not aborted[i]]
    if zero:
        raise TltsimError(f"{f}, line {records[zero[0]][0]}, key 'output': the tokenizer makes no tokens of this "
                          f"response text; check --tokenizer is the run's model")
    if all(scored):
        out["reward"] = [_score(f, n, rec["score"]) for n, rec in records]
    return out, group


def _score(f: Path, n: int, v) -> float:
    if v is None:
        return math.nan
    if isinstance(v, float) and math.isnan(v):  # verl dumps a reward function's NaN as NaN
        raise TltsimError(f"{f}, line {n}, key 'score': NaN is not a finite number; a reward is one (the run's "
                          f"reward function gave NaN for this sample)")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isinf(v):
        raise TltsimError(f"{f}, line {n}, key 'score': {show(v)} is not a finite number")
    return float(v)
