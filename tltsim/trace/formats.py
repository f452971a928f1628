"""Reading and writing traces: Parquet (primary), CSV and JSONL, and every format tltsim reads, in one registry.

`FORMATS` lists the formats in the order a path is tried against them, each with how it is recognised and read;
`detect(path)` is the first that recognises it, `load(path)` reads it. A format recognised by its content comes
before the plain ones that share its suffix or its folder:

    PolyTrace's multi-turn workload log   a directory of multiturn_workload_step_<step>.jsonl files, or one such
                                          file: a first record with "turns" and "tool_calls" lists
                                          (tltsim.trace.polytrace)
    a length log                          a directory of packed_lengths_step_<step>.jsonl files (PolyTrace's), or a
                                          .jsonl whose first record has an "output" list (one prompt group a line)
                                          (tltsim.trace.lengths)
    a verl rollout dump                   a directory of <step>.jsonl files, or one: a first record with a response
                                          text in "output"; read with a token counter (`trace convert --tokenizer`)
                                          (tltsim.trace.verl)
    a Vidur request trace                 .csv whose header has arrived_at, num_prefill_tokens, num_decode_tokens
                                          and no response_len (tltsim.trace.importers)
    a Parquet trace                       our schema; TraceMeta in the Parquet schema metadata (b"tltsim.meta")
    a CSV trace, a JSONL trace            our schema (one response per line)

Adding a format: its recogniser and reader (a module of its own for anything longer than a few lines), and its
place in FORMATS.

CSV and JSONL keep the metadata in a sidecar `<file>.meta.json` (e.g. `t.csv.meta.json`) that
names the sha256 of the data it describes; without one the trace gets default metadata, and one
whose sha256 is not the data's (the file was edited since) is an error. `save` writes atomically:
readers see the old file or the new one, never half of one, and its metadata with it: the sidecar
first describes both (the old data's sha256 under "previous"), then the data is renamed into place,
then the sidecar describes the new data only, so a kill at any moment leaves data and metadata that
belong together.

Every failure a file can cause (missing, unreadable, corrupt, bad values) raises
TltsimError naming the file, and the line, row or column where it applies.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Callable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tltsim.core.errors import TltsimError
from tltsim.core.jsonl import read_objects
from tltsim.core.io import atomic_path, sha256_file, write_json
from tltsim.trace.importers import VIDUR_COLUMNS, frame_from_vidur
from tltsim.trace.lengths import is_length_log, read_length_log
from tltsim.trace.polytrace import is_multiturn_log, read_multiturn_log
from tltsim.trace.verl import is_rollout_dump, read_rollout_dump
from tltsim.trace.schema import REQUIRED, Trace, TraceMeta

SUFFIXES = (".parquet", ".csv", ".jsonl")  # what `save` writes
META_KEY = b"tltsim.meta"


@dataclass(frozen=True)
class Format:
    """A trace format: its name in messages, whether a path is one, and its reader."""

    name: str
    recognises: Callable[[Path], bool]
    read: Callable[..., Trace]  # read(path, **options): the Trace, or TltsimError naming the file and line
    options: tuple[str, ...] = ()  # the keyword options `read` takes


def load(path, requests_per_step: int | None = None, count_tokens=None, tokenizer: str = "") -> Trace:
    """Read and validate the trace at `path`, in whichever of FORMATS it is (the module docstring).

    `requests_per_step` applies to Vidur traces only (see `frame_from_vidur`); `count_tokens` (texts -> token
    counts, tltsim.trace.tokens.token_counter) and `tokenizer` (its name, for the provenance) to verl rollout dumps,
    which need them. Raises TltsimError for a missing or unreadable file, an unknown format or bad content."""
    path = Path(path)
    fmt = detect(path)
    given = {"requests_per_step": requests_per_step, "count_tokens": count_tokens, "tokenizer": tokenizer or None}
    given = {k: v for k, v in given.items() if v is not None}
    for key in given:
        if key not in fmt.options:
            takes = next(f.name for f in FORMATS if key in f.options)
            raise TltsimError(f"{path}: {key} applies to {takes}s only; drop it")
    return fmt.read(path, **given)


def detect(path) -> Format:
    """The first of FORMATS that recognises `path`; TltsimError for a path none does (missing, a directory of
    neither log, an unknown suffix)."""
    path = Path(path)
    for fmt in FORMATS:
        if fmt.recognises(path):
            return fmt
    _suffix(path)
    what = "is a directory" if path.is_dir() else "does not exist"
    raise TltsimError(f"{path} {what}; give the path of a trace file ({', '.join(SUFFIXES)})")


def save(trace: Trace, path) -> Path:
    """Write `trace` to `path` in the format its suffix names, atomically; return the path.

    Parquet carries the metadata inside the file; CSV and JSONL get `<file>.meta.json`
    beside them, written so that a kill leaves the old pair or the new one (the module docstring).
    """
    path = Path(path)
    suffix = _suffix(path)
    if suffix == ".csv" and trace.agentic:
        raise TltsimError(f"{path}: a multi-turn trace's turns are lists, which CSV cannot hold; save it as .parquet "
                          f"or .jsonl")
    with atomic_path(path) as tmp:
        if suffix == ".parquet":
            table = pa.Table.from_pandas(trace.df, preserve_index=False)
            meta = dict(table.schema.metadata or {})
            meta[META_KEY] = json.dumps(trace.meta.to_dict(), sort_keys=True).encode()
            pq.write_table(table.replace_schema_metadata(meta), tmp, compression="zstd")
            return path
        if suffix == ".csv":
            trace.df.to_csv(tmp, index=False)
        else:
            tmp.write_text(_jsonl_text(trace.df), encoding="utf-8")
        new = {**trace.meta.to_dict(), "data_sha256": sha256_file(tmp)}
        if path.is_file():  # until the rename, the sidecar also describes the data there now
            try:
                old = _read_sidecar(path).to_dict()
            except TltsimError:  # its sidecar did not match it already: it reads as it did, an error
                old = {}
            write_json(sidecar(path), {**new, "previous": {**old, "data_sha256": sha256_file(path)}} if old else new)
        else:
            write_json(sidecar(path), new)
    write_json(sidecar(path), new)
    return path


def sidecar(path) -> Path:
    """The metadata file that accompanies a CSV or JSONL trace."""
    path = Path(path)
    return path.with_name(path.name + ".meta.json")


def _jsonl_text(df: pd.DataFrame) -> str:
    """One JSON object per row; floats written exactly (repr), a missing reward as null."""
    lines = []
    for rec in df.to_dict("records"):
        clean = {k: (None if isinstance(v, float) and v != v else v) for k, v in rec.items()}
        lines.append(json.dumps(clean) + "\n")
    return "".join(lines)


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise TltsimError(
            f"{path}: unknown trace format {suffix or '(no suffix)'!r}; use one of {', '.join(SUFFIXES)}"
        )
    return suffix


def _load_parquet(path: Path) -> Trace:
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise TltsimError(f"{path}: not a readable Parquet file ({_first_line(e)}); re-create it with `tltsim trace convert`")
    raw = (table.schema.metadata or {}).get(META_KEY)
    meta = TraceMeta()
    if raw is not None:
        try:
            meta = TraceMeta.from_dict(json.loads(raw), path=f"{path} (metadata)")
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise TltsimError(f"{path}: the tltsim metadata is not valid JSON ({e}); re-save the trace")
    try:
        df = table.to_pandas()
    except (pa.ArrowException, ValueError, TypeError) as e:
        raise TltsimError(f"{path}: cannot convert the Parquet columns ({_first_line(e)}); use plain numeric columns")
    return Trace.from_frame(df, meta, path=path)


def _load_csv(path: Path) -> Trace:
    df = _read_csv(path)
    if "response_len" not in df.columns:
        raise TltsimError(
            f"{path}: missing column 'response_len'; a CSV trace needs {', '.join(REQUIRED)}, "
            f"or the Vidur columns {', '.join(VIDUR_COLUMNS)}"
        )
    return Trace.from_frame(df, _read_sidecar(path), path=path)


def _is_vidur(path: Path) -> bool:
    """A .csv file whose header has Vidur's request columns and no response_len."""
    if path.suffix.lower() != ".csv" or not path.is_file():
        return False
    try:
        with open(path, newline="", encoding="utf-8") as f:
            header = [c.strip() for c in next(csv.reader(f), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return False  # the CSV reader names what is wrong
    return "response_len" not in header and all(c in header for c in VIDUR_COLUMNS)


def _load_vidur(path: Path, requests_per_step: int | None = None) -> Trace:
    df, meta = frame_from_vidur(_read_csv(path), path, requests_per_step)
    return Trace.from_frame(df, meta, path=path)


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    records = read_objects(path, "a JSONL trace", parse_float=Decimal)  # exact: 3.0000000001 is not 3
    if not records:
        raise TltsimError(f"{path}: the file has no records; a JSONL trace needs one JSON object per line")
    return records


def _load_jsonl(path: Path) -> Trace:
    df = pd.DataFrame([r for _, r in _read_jsonl(path)])
    return Trace.from_frame(df, _read_sidecar(path), path=path)


def _read_dump(path: Path, count_tokens=None, tokenizer: str | None = None) -> Trace:
    if count_tokens is None:
        raise TltsimError(f"{path}: a verl rollout dump (response texts, not lengths); convert it with "
                          f"`tltsim trace convert {path} out.parquet --tokenizer MODEL_DIR` (the run's tokenizer counts "
                          f"the tokens)")
    return read_rollout_dump(path, count_tokens, tokenizer=tokenizer or "")


def _suffixed(suffix: str) -> Callable[[Path], bool]:
    """Recognises a file of `suffix`."""
    return lambda path: path.suffix.lower() == suffix and path.is_file()


# in the order a path is tried (the module docstring)
FORMATS = (
    Format("PolyTrace's multi-turn workload log", is_multiturn_log, read_multiturn_log),
    Format("length log", is_length_log, read_length_log),
    Format("verl rollout dump", is_rollout_dump, _read_dump, ("count_tokens", "tokenizer")),
    Format("Vidur CSV trace", _is_vidur, _load_vidur, ("requests_per_step",)),
    Format("Parquet trace", _suffixed(".parquet"), _load_parquet),
    Format("CSV trace", _suffixed(".csv"), _load_csv),
    Format("JSONL trace", _suffixed(".jsonl"), _load_jsonl),
)


def _read_csv(path: Path) -> pd.DataFrame:
    """All cells as text (the schema converts them, so "3.5" or "x" in a length is reported, not
    coerced). Blank lines are skipped; a row with more or fewer fields than the header raises."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f, skipinitialspace=True, strict=True)
            header = next(reader, None)
            rows = []
            for row in reader:
                if row and len(row) != len(header):
                    raise TltsimError(
                        f"{path}, line {reader.line_num}: {len(row)} fields but the header has {len(header)}; "
                        f"every row needs one value per column"
                    )
                if row:
                    rows.append(row)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise TltsimError(f"{path}: not a readable CSV file ({_first_line(e)}); check the encoding (UTF-8) and quoting")
    if header is None:
        raise TltsimError(f"{path}: the file is empty; a CSV trace needs a header row and data rows")
    names = [c.strip() for c in header]
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise TltsimError(f"{path}: column(s) {', '.join(map(repr, dup))} appear more than once in the header; name each column once")
    return pd.DataFrame(rows, columns=names, dtype=object)


def _read_sidecar(path: Path) -> TraceMeta:
    """The metadata of the data in `path`: its sidecar's (or the sidecar's "previous", during a save); default
    metadata without a sidecar; a TltsimError for a sidecar that describes other data."""
    side = sidecar(path)
    if not side.exists():
        return TraceMeta()
    try:
        d = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TltsimError(f"{side}: not valid JSON ({_first_line(e)}); fix it or delete it to use default metadata")
    if isinstance(d, dict) and "data_sha256" in d:
        digest = sha256_file(path)
        previous = d.get("previous") if isinstance(d.get("previous"), dict) else {}
        if d["data_sha256"] != digest and previous.get("data_sha256") != digest:
            raise TltsimError(f"{side}: describes another version of {path.name} (the data changed since the "
                              f"sidecar was written); delete the sidecar to use default metadata, or save the "
                              f"trace again")
        d = d if d["data_sha256"] == digest else previous
    return TraceMeta.from_dict(d, path=side)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
