"""The marks tltsim leaves in the files it writes, by which it knows a file of its own (one an output may replace
without --force), and the sha256 that seals a file."""
from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from pathlib import Path

from tltsim.core.config_files import MAX_CONFIG_BYTES


MARK_BYTES = 1 << 16  # how much of a file's head holds its mark (HTML, PNG)


def written_by_tltsim(path: str | os.PathLike) -> bool:
    """Whether file `path`'s content carries the mark tltsim writes in each of its single-file formats:

        Parquet      a schema metadata key starting `tltsim` (a trace's `tltsim.meta`)
        JSON         a top-level "format" starting `tltsim` (a calibration, a manifest), or Perfetto's
                     `otherData` one (a timeline export); a trace's sidecar NAME.meta.json: its `data_sha256`
        CSV, JSONL   a sidecar NAME.meta.json naming the file's sha256 (a trace tltsim saved)
        HTML         <meta name="generator" content="tltsim"> (a report)
        PNG          a tEXt chunk Software = tltsim (a report's figures)
        torch (zip)  a pickle naming a `tltsim-` format (a drafter checkpoint, a drafter's collected answers)

    Reading it never fails: a file that cannot be read, or reads as none of these, is not tltsim's."""
    path = Path(path)
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            head = f.read(MARK_BYTES)
        if head.startswith(b"PAR1"):
            import pyarrow.parquet as pq

            return any(k.startswith(b"tltsim") for k in (pq.read_schema(path).metadata or {}))
        if head.startswith(b"\x89PNG"):
            return b"tEXtSoftware\x00tltsim" in head
        if head.startswith(b"PK"):
            with zipfile.ZipFile(path) as z:
                return any(n.endswith("/data.pkl") and b"tltsim-" in z.read(n) for n in z.namelist())
        if path.suffix.lower() in (".html", ".htm"):
            return b'<meta name="generator" content="tltsim' in head
        if path.suffix.lower() == ".json":
            return _json_mark(path, head)
        side = path.with_name(path.name + ".meta.json")
        if side.is_file():
            d = json.loads(side.read_text(encoding="utf-8"))
            previous = d.get("previous") if isinstance(d.get("previous"), dict) else {}
            return sha256_file(path) in (d.get("data_sha256"), previous.get("data_sha256"))
    except (OSError, ValueError, KeyError, AttributeError, TypeError, RecursionError, EOFError, NotImplementedError,
            zipfile.BadZipFile):  # damaged or unreadable (pyarrow's errors are ValueErrors and OSErrors)
        return False
    return False


def _json_mark(path: Path, head: bytes) -> bool:
    """The JSON marks of `written_by_tltsim`; a file over MAX_CONFIG_BYTES by its head (the Perfetto export
    writes its `otherData` first)."""
    if path.stat().st_size > MAX_CONFIG_BYTES:
        return re.search(rb'^\{"otherData": \{"format": "tltsim', head) is not None
    d = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(d, dict):
        return False
    other = d.get("otherData") if isinstance(d.get("otherData"), dict) else {}
    if any(isinstance(f, str) and f.startswith("tltsim") for f in (d.get("format"), other.get("format"))):
        return True
    return path.name.endswith(".meta.json") and isinstance(d.get("data_sha256"), str)


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 of file `path`'s bytes, in hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
