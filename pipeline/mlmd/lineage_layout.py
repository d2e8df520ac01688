"""A layered drawing of a lineage graph, laid out left to right in pure Python (grandalf).

grandalf's Sugiyama layout ranks the graph (each node one layer after the nodes it depends on;
a long edge passes its layers through placeholder nodes), reduces crossings by reordering each
layer, and assigns coordinates (Brandes and Koepf; the boxes of a layer are then pushed apart
where it left two over each other). Its layers run top to bottom; here they are columns, left
to right, so a node's extent along a layer is its height. Each edge leaves its tail's right
side, runs straight across the rest of the tail's column, curves through the gap to the next
column, and so on to the head's left side: the straight runs stay inside a box's own row or a
placeholder's, the curves inside the gaps between columns, so an edge never crosses a box it
does not join. report.py draws the result as inline SVG.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any


def _import_grandalf():
    """grandalf's modules, imported without numpy when it is not loaded yet: grandalf imports
    it for its spline and energy layouts only, not the Sugiyama layout used here (which runs on
    plain Python numbers either way), and numpy's import would be a large part of `report`."""
    blocked = "numpy" not in sys.modules
    if blocked:
        sys.modules["numpy"] = None  # type: ignore[assignment]  # makes `import numpy` fail
    try:
        from grandalf import graphs, layouts
    finally:
        if blocked:
            del sys.modules["numpy"]
    return graphs, layouts


_graphs, _layouts = _import_grandalf()
_GraphEdge, Graph, Vertex = _graphs.Edge, _graphs.Graph, _graphs.Vertex
SugiyamaLayout: Any = _layouts.SugiyamaLayout

# Pixels between two boxes of one column, between two columns, between unconnected parts.
NODE_GAP = 22.0
RANK_GAP = 40.0
PART_GAP = 22.0
# grandalf's crossing reduction: rounds of reordering the layers down and up again.
ORDERING_ROUNDS = 4.5


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


class _View:
    """What grandalf reads and writes on a node: w along its layer, h across it, xy the
    centre."""

    def __init__(self, w: float, h: float):
        self.w, self.h = w, h
        self.xy = (0.0, 0.0)


Point = tuple[float, float]


def _line(start: Point, end: Point) -> list[Point]:
    """A straight segment as a cubic Bezier's three remaining control points."""
    (x0, y0), (x1, y1) = start, end
    return [
        (x0 + (x1 - x0) / 3, y0 + (y1 - y0) / 3),
        (x0 + 2 * (x1 - x0) / 3, y0 + 2 * (y1 - y0) / 3),
        end,
    ]


def _curve(start: Point, end: Point) -> list[Point]:
    """Horizontal at both ends, bending in the middle of the gap between two columns."""
    middle = (start[0] + end[0]) / 2
    return [(middle, start[1]), (middle, end[1]), end]


class _Layers(SugiyamaLayout):
    """grandalf's layout with its own ranking tightened: it ranks each node right after the
    latest of the nodes it depends on, which leaves a source (a resolver, a schema import) in
    the first column however late its outputs are read, with long edges across the drawing.
    grandalf's optional fix (init_all(optimize=True)) is replaced by one that keeps every edge
    pointing to a later column."""

    layers: list  # grandalf's: the vertices of each layer, placeholders included

    def _rank_optimize(self):
        """Called by rank_all on the graph made acyclic. From the last column back, a node that
        has at least as many outputs as inputs moves to the column before its earliest output
        (its inputs' columns, earlier still, are final by then, and its outputs' too); columns
        left empty are dropped."""
        ranks = self.grx
        for vertex in [v for layer in reversed(self.layers) for v in layer]:
            successors = vertex.N(+1)
            if not successors or len(successors) < len(vertex.N(-1)):
                continue
            target = min(ranks[s].rank for s in successors) - 1
            if target > ranks[vertex].rank:
                self.layers[ranks[vertex].rank].remove(vertex)
                self.layers[target].append(vertex)
                ranks[vertex].rank = target
        self.layers = [layer for layer in self.layers if layer]
        for rank, layer in enumerate(self.layers):
            for vertex in layer:
                ranks[vertex].rank = rank

    def setxy(self):
        """grandalf's coordinates, then each column's boxes and placeholders pushed apart, in
        their order, to NODE_GAP at least: its Brandes-Koepf placement can leave two of them
        over each other in one of its four alignments, and so in the result."""
        super().setxy()
        for layer in self.layers:
            previous = None
            for vertex in sorted(layer, key=lambda v: self.grx[v].pos):
                along, across = vertex.view.xy
                if previous is not None:
                    least = (
                        previous.view.xy[0] + self.xspace + (previous.view.w + vertex.view.w) / 2
                    )
                    vertex.view.xy = (max(along, least), across)
                previous = vertex


class _Part:
    """One connected part of the graph laid out by grandalf, in its own coordinates: x across
    the columns, y down each column."""

    def __init__(self, core):
        self.sugiyama = _Layers(core)
        self.sugiyama.xspace, self.sugiyama.yspace = NODE_GAP, RANK_GAP
        self.sugiyama.init_all(optimize=True)
        self.sugiyama.draw(ORDERING_ROUNDS)
        self.core = core
        # Each column's left and right edge: its widest box or placeholder.
        self.columns = {}
        for rank, layer in enumerate(self.sugiyama.layers):
            centre = layer[0].view.xy[1]
            half = max(v.view.h for v in layer) / 2
            self.columns[rank] = (centre - half, centre + half)

    def rank(self, vertex) -> int:
        return self.sugiyama.grx[vertex].rank

    def centre(self, vertex) -> Point:
        along, across = vertex.view.xy
        return across, along

    def extent(self) -> tuple[float, float, float, float]:
        """(left, top, right, bottom) of every box and placeholder."""
        placed = [v for layer in self.sugiyama.layers for v in layer]
        top = min(v.view.xy[0] - v.view.w / 2 for v in placed)
        bottom = max(v.view.xy[0] + v.view.w / 2 for v in placed)
        left = min(left for left, _ in self.columns.values())
        right = max(right for _, right in self.columns.values())
        return left, top, right, bottom

    def route(self, edge) -> list[Point]:
        tail, head = edge.v
        r0, r1 = self.rank(tail), self.rank(head)
        (tx, ty), (hx, hy) = self.centre(tail), self.centre(head)
        if r0 == r1:  # the ranking never puts both ends of an edge in one column; if it did
            return [(tx, ty), *_line((tx, ty), (hx, hy))]
        step = 1 if r1 > r0 else -1
        side = 1 if step > 0 else 0  # leaves a column by its right edge going right
        placeholders = self.sugiyama.ctrls.get(edge, {})
        start = (tx + step * tail.view.h / 2, ty)
        points = [start]
        here = start
        for rank in range(r0, r1 + step, step):
            if rank == r1:
                row = hy
            elif rank == r0:
                row = ty
            else:
                row = placeholders[rank].view.xy[0]
            if rank != r0:  # enter this column from the gap before it
                entry = (self.columns[rank][1 - side], row)
                points += _curve(here, entry)
                here = entry
            if rank == r1:
                end = (hx - step * head.view.h / 2, hy)
            else:
                end = (self.columns[rank][side], row)
            if end != here:
                points += _line(here, end)
                here = end
        return points


def layout(sizes: dict[str, tuple[float, float]], edges: list[tuple[str, str]]) -> Layout:
    """Positions for boxes of the given pixel sizes (width, height) and routes for the edges
    between them, one per distinct (tail, head); an edge from a node to itself is not drawn."""
    if not sizes:
        return Layout(0.0, 0.0, {}, ())
    vertices = {}
    for name, (width, height) in sizes.items():
        vertex = Vertex(name)
        vertex.view = _View(w=height, h=width)
        vertices[name] = vertex
    distinct = list(dict.fromkeys((t, h) for t, h in edges if t != h))
    graph_edges = {(t, h): _GraphEdge(vertices[t], vertices[h]) for t, h in distinct}
    graph = Graph(list(vertices.values()), list(graph_edges.values()))
    order = {name: index for index, name in enumerate(sizes)}
    parts = sorted(
        (_Part(core) for core in graph.C),
        key=lambda part: min(order[v.data] for v in part.core.sV),
    )

    boxes: dict[str, Box] = {}
    routes: dict[tuple[str, str], tuple[Point, ...]] = {}
    width = height = 0.0
    for part in parts:  # one below the other
        left, top, right, bottom = part.extent()

        def move(point: Point, left=left, top=top, offset=height) -> Point:
            return (round(point[0] - left, 2), round(point[1] - top + offset, 2))

        for vertex in part.core.sV:
            (cx, cy), box_width, box_height = move(part.centre(vertex)), *sizes[vertex.data]
            boxes[vertex.data] = Box(
                vertex.data,
                round(cx - box_width / 2, 2),
                round(cy - box_height / 2, 2),
                box_width,
                box_height,
            )
        for graph_edge in part.core.sE:
            key = (graph_edge.v[0].data, graph_edge.v[1].data)
            routes[key] = tuple(move(p) for p in part.route(graph_edge))
        width = max(width, right - left)
        height += bottom - top + PART_GAP
    placed = tuple(Edge(t, h, routes[(t, h)]) for t, h in distinct)
    return Layout(
        round(width, 2), round(height - PART_GAP, 2), {n: boxes[n] for n in sizes}, placed
    )
