"""Values as table cells, rows as a text table (the CLI's output; the report's HTML tables show
the same cells)."""

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
