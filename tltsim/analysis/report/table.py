"""Plain-text tables for the CLI."""
from __future__ import annotations


def _cell(v, large: bool = False) -> str:
    """A cell as the table writes it: floats with 3 decimals, or in a column that holds a number of 1,000 or more
    (`large`) with thousands separators and 1 decimal, so one column has one format."""
    if isinstance(v, float):
        if v != v:
            return "-"
        return f"{v:,.1f}" if large else f"{v:.3f}"
    return str(v)


def format_table(header: list[str], rows: list[list]) -> str:
    large = [any(isinstance(r[i], float) and abs(r[i]) >= 1000 for r in rows) for i in range(len(header))]
    cells = [[_cell(v, big) for v, big in zip(row, large)] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    for r in cells:
        out.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(out)
