"""The lineage drawing's layout (grandalf, no Graphviz): columns left to right, no two boxes
over each other, every edge from its tail's right side to its head's left side and through no
other box. Checked on random graphs; the rendered page is checked in headless Chromium by
test_mlmd_report."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeline.mlmd import lineage_layout

# A sample point this close to a box's border still counts as outside it (rounding).
TOLERANCE_PX = 0.5


def bezier_samples(points, per_segment: int = 40):
    """Points along a path of cubic Bezier segments (start, then 3 control points each)."""
    start = points[0]
    for i in range(1, len(points), 3):
        c1, c2, end = points[i : i + 3]
        for step in range(per_segment + 1):
            t = step / per_segment
            yield tuple(
                (1 - t) ** 3 * start[k]
                + 3 * (1 - t) ** 2 * t * c1[k]
                + 3 * (1 - t) * t**2 * c2[k]
                + t**3 * end[k]
                for k in (0, 1)
            )
        start = end


def inside(point, box) -> bool:
    x, y = point
    t = TOLERANCE_PX
    return box.x + t < x < box.x + box.width - t and box.y + t < y < box.y + box.height - t


def problems(sizes, edges, placed) -> list[str]:
    found = []
    assert set(placed.boxes) == set(sizes)
    for name, box in placed.boxes.items():
        if (box.width, box.height) != sizes[name]:
            found.append(f"{name}: size {box.width}x{box.height}, not {sizes[name]}")
        if box.x < 0 or box.y < 0 or box.x + box.width > placed.width + TOLERANCE_PX:
            found.append(f"{name} outside the drawing")
        if box.y + box.height > placed.height + TOLERANCE_PX:
            found.append(f"{name} outside the drawing")
    for a, b in itertools.combinations(placed.boxes.values(), 2):
        apart_x = a.x + a.width <= b.x or b.x + b.width <= a.x
        if not apart_x and not (a.y + a.height <= b.y or b.y + b.height <= a.y):
            found.append(f"{a.node} overlaps {b.node}")
    wanted = list(dict.fromkeys((t, h) for t, h in edges if t != h))
    if [(e.tail, e.head) for e in placed.edges] != wanted:
        found.append(f"edges {[(e.tail, e.head) for e in placed.edges]}, not {wanted}")
    for edge in placed.edges:
        tail, head = placed.boxes[edge.tail], placed.boxes[edge.head]
        (x0, y0), (x1, y1) = edge.points[0], edge.points[-1]
        if len(edge.points) % 3 != 1:
            found.append(f"{edge.tail}->{edge.head}: not a path of cubic segments")
        if head.x < tail.x + tail.width + lineage_layout.RANK_GAP - TOLERANCE_PX:
            found.append(f"{edge.tail}->{edge.head}: the head is not in a column to the right")
        if (
            abs(x0 - (tail.x + tail.width)) > TOLERANCE_PX
            or not tail.y <= y0 <= tail.y + tail.height
        ):
            found.append(f"{edge.tail}->{edge.head} does not leave its tail's right side")
        if abs(x1 - head.x) > TOLERANCE_PX or not head.y <= y1 <= head.y + head.height:
            found.append(f"{edge.tail}->{edge.head} does not reach its head's left side")
        others = [b for n, b in placed.boxes.items() if n not in (edge.tail, edge.head)]
        for point in bezier_samples(edge.points):
            hit = [b.node for b in others if inside(point, b)]
            if hit:
                found.append(f"{edge.tail}->{edge.head} passes through {hit[0]}")
                break
    return found


@st.composite
def dags(draw):
    """Up to 24 boxes of the sizes the report draws; edges from a lower to a higher index."""
    count = draw(st.integers(1, 24))
    sizes = {
        f"n{i}": (
            float(draw(st.integers(40, 220))),
            float(draw(st.sampled_from([42, 57, 72]))),
        )
        for i in range(count)
    }
    pairs = [(f"n{a}", f"n{b}") for a in range(count) for b in range(a + 1, count)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=40)) if pairs else []
    return sizes, edges


def _graph(sizes: list[tuple[float, float]], edges: list[tuple[int, int]]):
    return {f"n{i}": size for i, size in enumerate(sizes)}, [(f"n{a}", f"n{b}") for a, b in edges]


# Graphs the layout once got wrong. An edge leaving its column by the wrong side, through a
# wider box of the next column:
WRONG_SIDE = _graph([(40.0, 42.0)] * 8 + [(95.0, 72.0), (40.0, 42.0)], [(1, 9), (6, 8), (6, 9)])
# grandalf's Brandes-Koepf placement putting two boxes of a column over each other:
PLACED_OVER = _graph(
    [(214, 42), (208, 42), (84, 72), (119, 42), (190, 57), (215, 57), (168, 57), (137, 42)]
    + [(196, 42), (83, 57), (210, 42), (94, 72), (100, 72), (193, 42), (149, 57), (133, 57)]
    + [(41, 42), (85, 57), (203, 42), (92, 42), (192, 72), (185, 72), (171, 57), (157, 42)]
    + [(71, 57)],
    [(4, 11), (4, 22), (0, 3), (19, 22), (17, 23), (9, 24), (5, 12), (0, 10), (18, 20), (7, 20)]
    + [(11, 16), (2, 19), (2, 17), (9, 19), (6, 14), (6, 9), (1, 20), (0, 18), (3, 21), (20, 24)]
    + [(4, 22), (6, 15), (16, 22), (7, 8), (0, 4), (7, 19), (12, 20), (5, 24), (17, 18), (12, 23)]
    + [(4, 12), (1, 13), (5, 8), (3, 17), (13, 16), (0, 7), (0, 6), (2, 20), (1, 20), (2, 3)]
    + [(3, 11), (12, 13), (14, 15), (3, 13), (18, 21)],
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=dags())
@example(graph=WRONG_SIDE)
@example(graph=PLACED_OVER)
def test_random_graphs_are_drawn_left_to_right_without_overlaps_or_edges_through_boxes(graph):
    sizes, edges = graph
    assert problems(sizes, edges, lineage_layout.layout(sizes, edges)) == []


def test_the_checks_see_an_edge_through_a_box_and_overlapping_boxes():
    """What the layout must never do: a straight edge from the first box to the third, through
    the second; two boxes drawn over each other."""
    sizes = {"a": (80.0, 30.0), "b": (80.0, 30.0), "c": (80.0, 30.0), "d": (80.0, 30.0)}
    boxes = {
        name: lineage_layout.Box(name, x, y, 80.0, 30.0)
        for name, x, y in (("a", 0, 0), ("b", 150, 0), ("c", 300, 0), ("d", 310, 10))
    }
    straight = ((80.0, 15.0), (150.0, 15.0), (250.0, 15.0), (300.0, 15.0))
    placed = lineage_layout.Layout(400.0, 40.0, boxes, (lineage_layout.Edge("a", "c", straight),))
    assert problems(sizes, [("a", "c")], placed) == [
        "c overlaps d",
        "a->c passes through b",
    ]


def test_a_chain_with_a_shortcut_goes_around_the_middle_box():
    """a -> b -> c and a -> c: the long edge passes b's column beside b, not through it."""
    sizes = {"a": (100.0, 42.0), "b": (60.0, 42.0), "c": (80.0, 42.0)}
    edges = [("a", "b"), ("b", "c"), ("a", "c"), ("a", "b")]
    placed = lineage_layout.layout(sizes, edges)
    assert problems(sizes, edges, placed) == []
    a, b, c = (placed.boxes[n] for n in "abc")
    assert a.x + a.width < b.x and b.x + b.width < c.x  # three columns
    assert len(placed.edges) == 3  # the repeated a -> b is drawn once


def test_unconnected_parts_are_stacked_and_a_self_edge_is_not_drawn():
    sizes = {"a": (50.0, 30.0), "b": (50.0, 30.0), "lone": (70.0, 30.0)}
    placed = lineage_layout.layout(sizes, [("a", "b"), ("lone", "lone")])
    assert [(e.tail, e.head) for e in placed.edges] == [("a", "b")]
    lone, a = placed.boxes["lone"], placed.boxes["a"]
    assert lone.y >= a.y + a.height + lineage_layout.PART_GAP - TOLERANCE_PX
    assert lineage_layout.layout({}, []) == lineage_layout.Layout(0.0, 0.0, {}, ())


def test_the_layout_is_the_same_in_every_process():
    """Python randomises str hashes per process: the layout must not depend on them."""
    script = (
        "from pipeline.mlmd import lineage_layout as L\n"
        "sizes = {f'n{i}': (40.0 + 7 * i, 42.0) for i in range(12)}\n"
        "edges = [(f'n{i}', f'n{j}') for i in range(12) for j in range(i + 1, 12)"
        " if (i * 7 + j) % 4 == 0]\n"
        "print(repr(L.layout(sizes, edges)))\n"
    )
    outputs = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        result = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
        )
        outputs.add(result.stdout)
    assert len(outputs) == 1


def test_grandalf_is_loaded_without_numpy_and_lays_out_the_same_with_it():
    """`report` does not pay for numpy's import (grandalf's Sugiyama layout does not use it);
    numpy still imports afterwards, and a process that had loaded it gets the same layout."""
    script = (
        "import sys\n"
        "{first}"
        "from pipeline.mlmd import lineage_layout as L\n"
        "print('numpy' in sys.modules)\n"
        "import numpy\n"
        "sizes = {{f'n{{i}}': (40.0 + 9 * i, 57.0) for i in range(10)}}\n"
        "edges = [(f'n{{i}}', f'n{{j}}') for i in range(10) for j in range(i + 1, 10)"
        " if (i + 2 * j) % 3 == 0]\n"
        "print(repr(L.layout(sizes, edges)))\n"
    )

    def run(first: str) -> list[str]:
        result = subprocess.run(
            [sys.executable, "-c", script.format(first=first)],
            capture_output=True,
            text=True,
            check=True,
        )
        return result.stdout.splitlines()

    without, placed = run("")
    loaded, placed_with_numpy = run("import numpy\n")
    assert (without, loaded) == ("False", "True")
    assert placed == placed_with_numpy
