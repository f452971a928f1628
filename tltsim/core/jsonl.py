"""JSON Lines files as other tools write them: one JSON object a line, problems named by file and line."""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

from tltsim.core.errors import TltsimError, TltsimWarning

_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def read_objects(path, what: str, cut_last: bool = False, parse_float=None) -> list[tuple[int, dict]]:
    """(line number, object) of every non-blank line of `path`, a file of `what` (e.g. "a verl rollout dump");
    `parse_float` as json.loads's (Decimal reads a number exactly as written).

    Raises TltsimError naming the file and line for a missing file, a byte that is not UTF-8, a line that is
    not JSON, or JSON that is not an object. With `cut_last`, a last line that has no newline and is not JSON
    (its writer stopped in the middle of it) is left out with a TltsimWarning naming it."""
    path = Path(path)
    try:
        raw_lines = path.read_bytes().split(b"\n")
    except OSError as e:
        raise TltsimError(f"{path}: cannot read the file ({e.strerror or e}); give {what}") from None
    out = []
    for n, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TltsimError(f"{path}, line {n}: byte 0x{raw[e.start]:02x} at position {e.start + 1} is not UTF-8; "
                              f"{what} is UTF-8 text, so the file was changed or cut: fix the line or write it again") from None
        if not line.strip():
            continue
        try:
            obj = json.loads(line, parse_float=parse_float)
        except (ValueError, RecursionError) as e:  # RecursionError: nested too deeply
            if cut_last and n == len(raw_lines) and not isinstance(e, RecursionError):  # no newline after it
                warnings.warn(TltsimWarning(f"{path}, line {n}: cut short (no newline, not JSON: its writer stopped "
                                            f"while writing it); left out"))
                continue
            raise TltsimError(f"{path}, line {n}: not valid JSON ({e}); each line of {what} is one JSON object") from None
        if not isinstance(obj, dict):
            raise TltsimError(f"{path}, line {n}: a JSON {type(obj).__name__}, not an object; each line of {what} "
                              f"is one JSON object")
        if _ESCAPED_SURROGATE.search(line):  # \ud800-\udfff: text only in pairs; a lone one is no character
            try:
                json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")  # default: parse_float's numbers
            except UnicodeEncodeError:
                raise TltsimError(f"{path}, line {n}: a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff "
                                  f"without its pair), which is no character; {what} was changed or cut: fix the "
                                  f"line or write it again") from None
        out.append((n, obj))
    return out


def first_object(path) -> dict | None:
    """The first non-blank line of a .jsonl file as a JSON object, or None (another suffix, not a file, not JSON,
    not an object): for telling one kind of log from another by its first record."""
    path = Path(path)
    if path.suffix.lower() != ".jsonl" or not path.is_file():
        return None
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                try:
                    first = json.loads(raw)
                except (ValueError, RecursionError):
                    return None
                return first if isinstance(first, dict) else None
    return None
