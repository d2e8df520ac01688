"""Values as table cells, rows as a text table: the CLI's output. The report's HTML tables show
the same cells (pipeline/mlmd/templates/macros.html.j2)."""

from __future__ import annotations

import json


def cell(value) -> str:
    """One value as a table cell: None -> "-", lists comma-joined, dicts as sorted JSON."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def write(rows: list[dict], columns: list[str], out) -> None:
    """Rows as a text table, one column per key in `columns`, padded to its widest cell;
    "(none)" for no rows."""
    if not rows:
        out.write("(none)\n")
        return
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")
