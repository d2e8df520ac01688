"""Line and branch coverage of the project's modules, before and after a change to the tests.

    .venv/bin/python -m coverage run -m pytest && .venv/bin/python -m coverage combine
    .venv/bin/python -m coverage json -o before.json
    ... (the change) ... the same three commands, -o after.json
    python -m benchmarks.coverage_compare before.json after.json

The suite's coverage settings are pyproject.toml's [tool.coverage.*] (the pipeline runs the tests
start as subprocesses included). Prints each module whose covered lines or branches changed, and
the totals; exits 1 when a module lost covered lines or branches (the rule for moving a check to a
cheaper depth: no module may lose covered lines). Counts, not line numbers: a module whose code
changed between the two runs is compared by how many of its lines and branches ran.
"""

from __future__ import annotations

import argparse
import json
import sys

# module -> (lines run, lines, branches run, branches)
Counts = dict[str, tuple[int, int, int, int]]


def load(path: str) -> Counts:
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    counts: Counts = {}
    for module, data in report["files"].items():
        summary = data["summary"]
        counts[module] = (
            summary["covered_lines"],
            summary["num_statements"],
            summary.get("covered_branches", 0),
            summary.get("num_branches", 0),
        )
    return counts


def compare(before: Counts, after: Counts) -> tuple[list[str], list[str]]:
    """(one line per module that changed, the modules that lost covered lines or branches)."""
    lines, losses = [], []
    for module in sorted(set(before) | set(after)):
        old = before.get(module, (0, 0, 0, 0))
        new = after.get(module, (0, 0, 0, 0))
        if old[0] == new[0] and old[2] == new[2]:
            continue
        lost = new[0] < old[0] or new[2] < old[2]
        lines.append(
            f"{'LOST ' if lost else '     '}{module}: "
            f"lines {old[0]}/{old[1]} -> {new[0]}/{new[1]}, "
            f"branches {old[2]}/{old[3]} -> {new[2]}/{new[3]}"
        )
        if lost:
            losses.append(module)
    return lines, losses


def _total(counts: Counts) -> str:
    run, lines, branches_run, branches = (sum(c[i] for c in counts.values()) for i in range(4))
    return (
        f"lines {run}/{lines} ({100 * run / max(lines, 1):.1f} %), "
        f"branches {branches_run}/{branches} ({100 * branches_run / max(branches, 1):.1f} %)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.coverage_compare")
    parser.add_argument("before", help="`coverage json` of the suite before the change")
    parser.add_argument("after", help="`coverage json` of the suite after it")
    args = parser.parse_args(argv)
    before, after = load(args.before), load(args.after)
    lines, losses = compare(before, after)
    print("\n".join(lines) if lines else "no module's covered lines or branches changed")
    print(f"before: {_total(before)}")
    print(f"after:  {_total(after)}")
    if losses:
        print(f"{len(losses)} module(s) lost covered lines or branches: {', '.join(losses)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
