"""A layered drawing of a lineage graph, laid out by Graphviz's `dot`.

dot ranks the graph left to right (Sugiyama-style layering, crossing reduction, coordinate
assignment) and routes each edge as a spline around the boxes in between. Its plain output
(`-Tplain`: node centres and sizes, edge control points, in inches from the bottom left) is turned
into pixel geometry here; mlmd_report draws it as inline SVG. Needs Debian's `graphviz` package.
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess

from pipeline.mlmd.errors import InspectError

POINTS_PER_INCH = 72.0
DOT_TIMEOUT_SEC = 60


@dataclasses.dataclass(frozen=True)
class Box:
    """A node's box in pixels, (x, y) its top-left corner."""

    node: str
    x: float
    y: float
    width: float
    height: float


@dataclasses.dataclass(frozen=True)
class Edge:
    """tail -> head through cubic Bezier control points (start, then 3 points per segment)."""

    tail: str
    head: str
    points: tuple[tuple[float, float], ...]


@dataclasses.dataclass(frozen=True)
class Layout:
    width: float
    height: float
    boxes: dict[str, Box]
    edges: tuple[Edge, ...]


def _quote(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot_source(sizes: dict[str, tuple[float, float]], edges: list[tuple[str, str]]) -> str:
    """A dot graph of fixed-size boxes (sizes in pixels), ranked left to right."""
    lines = [
        "digraph lineage {",
        "  rankdir=LR; nodesep=0.3; ranksep=0.55; splines=spline; margin=0;",
        '  node [shape=box, fixedsize=true, label=""];',
    ]
    for name, (width, height) in sizes.items():
        lines.append(
            f"  {_quote(name)} [width={width / POINTS_PER_INCH:.4f}, "
            f"height={height / POINTS_PER_INCH:.4f}];"
        )
    lines.extend(f"  {_quote(tail)} -> {_quote(head)};" for tail, head in edges)
    lines.append("}")
    return "\n".join(lines) + "\n"


def parse_plain(text: str) -> Layout:
    """dot's -Tplain output -> pixel geometry with the origin at the top left."""
    height_in = 0.0
    width_in = 0.0
    nodes: list[list[str]] = []
    edge_lines: list[list[str]] = []
    for line in text.splitlines():
        fields = shlex.split(line)
        if not fields:
            continue
        if fields[0] == "graph":
            width_in, height_in = float(fields[2]), float(fields[3])
        elif fields[0] == "node":
            nodes.append(fields)
        elif fields[0] == "edge":
            edge_lines.append(fields)

    def point(x: str, y: str) -> tuple[float, float]:
        return (
            round(float(x) * POINTS_PER_INCH, 2),
            round((height_in - float(y)) * POINTS_PER_INCH, 2),
        )

    boxes = {}
    for fields in nodes:
        name = fields[1]
        cx, cy = point(fields[2], fields[3])
        width, height = float(fields[4]) * POINTS_PER_INCH, float(fields[5]) * POINTS_PER_INCH
        boxes[name] = Box(name, round(cx - width / 2, 2), round(cy - height / 2, 2), width, height)
    edges = []
    for fields in edge_lines:
        count = int(fields[3])
        coordinates = fields[4 : 4 + 2 * count]
        points = tuple(point(coordinates[i], coordinates[i + 1]) for i in range(0, 2 * count, 2))
        edges.append(Edge(fields[1], fields[2], points))
    return Layout(width_in * POINTS_PER_INCH, height_in * POINTS_PER_INCH, boxes, tuple(edges))


def dot_binary() -> str:
    found = shutil.which("dot")
    if found is None:
        raise InspectError(
            "the report's lineage drawing needs Graphviz's dot (Debian: apt-get install graphviz)"
        )
    return found


def layout(sizes: dict[str, tuple[float, float]], edges: list[tuple[str, str]]) -> Layout:
    """Positions for boxes of the given pixel sizes and routes for the edges between them."""
    if not sizes:
        return Layout(0.0, 0.0, {}, ())
    result = subprocess.run(
        [dot_binary(), "-Tplain"],
        input=dot_source(sizes, edges),
        capture_output=True,
        text=True,
        timeout=DOT_TIMEOUT_SEC,
        check=False,
    )
    if result.returncode != 0:
        message = result.stderr.strip().splitlines()[:1] or [f"exit code {result.returncode}"]
        raise InspectError(f"Graphviz's dot failed to lay out the lineage: {message[0]}")
    return parse_plain(result.stdout)
