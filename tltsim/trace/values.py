"""A cell of a trace read as what its column holds: a whole number, a finite real or a boolean, exactly (a float
that is not whole, a bool or text is refused, not rounded), with an error naming the file, the row (1-based) and
the column. Used by the schema check and by every reader of a source format."""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

import numpy as np
import pandas as pd

from tltsim.core.errors import TltsimError, where


def row(i: int) -> int:
    """Rows are reported 1-based, as a person counts data rows in a file."""
    return i + 1


# Whole numbers must stay below this: above it a float64 cannot tell n from n + 1 (or n + 0.4).
MAX_INT = 2**53


def show(v) -> str:
    """A cell as an error message shows it: repr of the plain Python value, exact decimals as written (4.5)."""
    if isinstance(v, np.generic):
        v = v.item()
    if is_missing(v):
        return "an empty value"
    return str(v) if isinstance(v, Decimal) else repr(v)


def fail(path, i: int, col: str, value, what: str) -> TltsimError:
    return TltsimError(f"{where(path, row(i), col)}{show(value)} {what}")


def is_missing(v) -> bool:
    return (v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))
            or (isinstance(v, str) and not v.strip()))


def exact(v) -> Decimal | None:
    """The exact value of an int, float, Decimal or numeric string; None for anything else
    (bools, empty cells, text, containers). NaN and infinities come back as Decimal NaN / Infinity."""
    if isinstance(v, (bool, np.bool_)) or is_missing(v):
        return None
    if isinstance(v, (int, np.integer)):
        return Decimal(int(v))
    if isinstance(v, (float, np.floating, Decimal)):
        return Decimal(v)
    if isinstance(v, str):
        try:
            return Decimal(v.strip())
        except InvalidOperation:
            return None
    return None


def whole_number(v) -> int | None:
    """`v` as an int when it is exactly a whole number below 2**53 in magnitude: an int, a whole
    float (3.0) or Decimal, or a numeric string ("3", "3.0", "3e2"); None for anything else,
    bools and text such as "3.0000001" included."""
    d = exact(v)
    if d is None or not d.is_finite() or d.copy_abs() >= MAX_INT or d != d.to_integral_value():
        return None
    return int(d)


def as_int(s: pd.Series, col: str, path) -> pd.Series:
    """Whole numbers (see `whole_number`) as int64; anything else raises TltsimError naming the row."""
    if pd.api.types.is_integer_dtype(s.dtype) and not s.isna().any():
        num = s.to_numpy(dtype="int64")
        bad = np.abs(num) >= MAX_INT
    elif pd.api.types.is_float_dtype(s.dtype):
        num = s.to_numpy(dtype="float64", na_value=np.nan)
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(num) | (num % 1 != 0) | (np.abs(num) >= MAX_INT)
    else:  # text, objects, bools: one value at a time, exactly
        vals = [whole_number(v) for v in s.tolist()]
        bad = np.array([v is None for v in vals], dtype=bool)
        num = np.array([0 if v is None else v for v in vals], dtype="int64")
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise fail(path, i, col, s.iloc[i], f"is not a whole number below 2**53; {col} must be a whole number")
    return pd.Series(num.astype("int64"), index=s.index)


def as_float(s: pd.Series, col: str, path) -> pd.Series:
    """Finite reals as float64; empty cells and NaN become NaN (not recorded); text, bools and
    infinities raise TltsimError naming the row."""
    if pd.api.types.is_float_dtype(s.dtype) or pd.api.types.is_integer_dtype(s.dtype):
        num = s.to_numpy(dtype="float64", na_value=np.nan)
        bad = np.isinf(num)
    else:
        values = [exact(v) for v in s.tolist()]
        missing = s.map(is_missing).to_numpy(dtype=bool)
        num = np.array([np.nan if d is None or d.is_nan() else float(d) for d in values], dtype="float64")
        bad = (np.array([d is None for d in values]) & ~missing) | np.isinf(num)  # 1e999 becomes inf
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise fail(path, i, col, s.iloc[i], f"is not a finite number; {col} must be a number or empty")
    return pd.Series(num, index=s.index)


_TRUE = {"true", "1", "yes", "t", "y", "1.0"}
_FALSE = {"false", "0", "no", "f", "n", "0.0"}


def as_bool(s: pd.Series, path, col: str) -> pd.Series:
    """Booleans from bools, 0/1 and true/false/yes/no text; anything else (empty included) raises."""
    if pd.api.types.is_bool_dtype(s.dtype) and not s.isna().any():
        return s.astype(bool)
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
            raise fail(path, i, col, v, "is not a boolean; use true or false")
    return pd.Series(out, index=s.index, dtype=bool)
