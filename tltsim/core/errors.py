"""User-facing errors.

Anything a user can cause (a bad file, an unknown preset, an out-of-range knob)
raises `TltsimError` with a message that says what is wrong, where, and what to
do. The CLI prints that one line and exits 2; a traceback means a bug in tltsim.
"""
from __future__ import annotations


class TltsimError(Exception):
    """An error the user can fix; its message is complete and printable as is."""


def where(path=None, row=None, column=None) -> str:
    """Format a location prefix such as ``trace.csv, row 7, column 'response_len': ``."""
    parts = []
    if path is not None:
        parts.append(str(path))
    if row is not None:
        parts.append(f"row {row}")
    if column is not None:
        parts.append(f"column {column!r}")
    return (", ".join(parts) + ": ") if parts else ""


class TltsimWarning(UserWarning):
    """Something a user asked for that tltsim does differently (a clipped step range, an ignored knob); the
    CLI prints it as one line, `tltsim: warning: ...`, and goes on."""


class TltsimNote(TltsimWarning):
    """Something tltsim read as the name it has now (an older knob or value); the CLI prints it as one line,
    `tltsim: note: ...`, and goes on."""
