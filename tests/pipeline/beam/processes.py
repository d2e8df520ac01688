"""What a test's background command started, read from /proc (to check that it all stops)."""

from __future__ import annotations

import os


def descendants(pid: int) -> list[int]:
    """The process ids started, directly or not, by `pid` (read from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            parents.setdefault(parent, []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        for child in parents.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found
