"""The HTML report on a TFX-layout store: its sections, and its lineage drawing as headless
Chromium renders it (no overlapping boxes, no edge through a box)."""

from __future__ import annotations

import re

import pytest

from pipeline.mlmd import cli as inspect_mlmd
from pipeline.mlmd import connection, lineage_layout, records, runs
from pipeline.mlmd import report as mlmd_report
from tests.pipeline.mlmd import report_geometry


def write_report(penguin_store, tmp_path, *args) -> str:
    out = tmp_path / "report.html"
    code = inspect_mlmd.main(
        ["--metadata", penguin_store["path"], "report", *args, "--out", str(out)]
    )
    assert code == 0
    return out.read_text()


def test_lineage_drawing_has_artifact_nodes_and_the_resolver_connected(penguin_store):
    db = records.Store(connection.open_store(penguin_store["path"]))
    run = db.run("3")
    graph = mlmd_report.lineage_graph(db, run, runs.describe_executions(db, run))
    recorded = penguin_store["runs"]
    baseline = recorded["run-1"]["Trainer"]["outputs"]["model"]
    resolver = recorded["run-3"]["baseline_model_resolver"]["execution"]
    evaluator = recorded["run-3"]["Evaluator"]["execution"]
    kinds = [node["kind"] for node in graph["nodes"].values()]
    assert (
        kinds.count("execution") == 9 and kinds.count("artifact") == 12
    )  # 11 outputs, the baseline
    # The resolver brought run 1's model in as the baseline; the Evaluator read it.
    assert (f"e{resolver}", f"a{baseline}", True) in graph["edges"]
    assert (f"a{baseline}", f"e{evaluator}", False) in graph["edges"]

    # Run 1 resolved nothing: the resolver feeds the Evaluator, as it did in run 3.
    first = db.run("1")
    graph = mlmd_report.lineage_graph(db, first, runs.describe_executions(db, first))
    resolver_1 = f"e{recorded['run-1']['baseline_model_resolver']['execution']}"
    assert (resolver_1, f"e{recorded['run-1']['Evaluator']['execution']}", True) in graph["edges"]
    assert "resolved nothing" in graph["nodes"][resolver_1]["lines"]


def test_dot_layout_is_parsed_into_pixels():
    placed = lineage_layout.layout({"a": (100, 30), "b": (80, 30)}, [("a", "b")])
    a, b = placed.boxes["a"], placed.boxes["b"]
    assert [round(v) for v in (a.width, a.height, b.width)] == [100, 30, 80]
    assert b.x >= a.x + a.width  # ranked left to right
    [edge] = placed.edges
    assert (edge.tail, edge.head) == ("a", "b") and len(edge.points) % 3 == 1
    assert a.x + a.width - 1 <= edge.points[0][0] <= b.x + 1


def test_missing_dot_is_one_error_line(penguin_store, tmp_path, capsys):
    from unittest import mock

    with mock.patch("shutil.which", return_value=None):
        code = inspect_mlmd.main(
            ["--metadata", penguin_store["path"], "report", "--out", str(tmp_path / "r.html")]
        )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "apt-get install graphviz" in err


def test_sections(penguin_store, tmp_path):
    page = write_report(penguin_store, tmp_path, "3", "--compare", "1")
    assert "<script" not in page and "http://" not in page and "https://" not in page
    # Statistics side by side: train then eval, with min/max and a histogram per split.
    header = re.search(r"<table class='stats'><thead><tr>(.*?)</tr>", page).group(1)
    assert header.index("train (260 examples)") < header.index("eval (260 examples)")
    assert "min 32, max 60" in page and page.count('aria-label="histogram"') == 4
    # The evaluation: threshold, baseline model, candidate against baseline, verdict.
    assert "&gt;= 0.9; change vs baseline absolute -1e-10 (higher is better)" in page
    baseline = penguin_store["runs"]["run-1"]["Trainer"]["outputs"]["model"]
    assert f"baseline <code>baseline</code> (artifact #{baseline})" in page
    assert "<td>0.9700</td><td>0.9500</td><td>+0.0200</td>" in page
    assert "Threshold validation passed." in page
    # The data diff against run 1: schema changes and drift, in a section of its own.
    assert "Changes since run 1" in page
    assert "schema sex: added" in page and "DRIFTED" in page and "L-infinity" in page


def test_cached_executions_link_to_the_run_that_produced_their_outputs(penguin_store, tmp_path):
    page = write_report(penguin_store, tmp_path, "2")
    trainer = penguin_store["runs"]["run-1"]["Trainer"]["execution"]
    assert (
        f"outputs reused from <a href='report-1.html'>run 1</a> (run-1), execution {trainer}"
        in page
    )
    assert page.count("outputs reused from") == 8  # every cached component; not the resolver


@pytest.mark.parametrize("run", ["1", "2", "3"])
def test_drawing_in_headless_chromium(penguin_store, tmp_path, run):
    page = write_report(penguin_store, tmp_path, run)
    report = tmp_path / "report.html"
    geometry = report_geometry.measure(report, tmp_path)
    assert geometry["boxes"] == page.count('class="node"') + page.count('class="artifact"')
    assert geometry["edges"] == page.count('class="edge"') > 20
    assert geometry["overlaps"] == []
    assert geometry["crossings"] == []
    size, stderr = report_geometry.screenshot(report, tmp_path)
    assert size > 20_000 and "CONSOLE" not in stderr


def test_the_geometry_check_sees_an_edge_through_a_box_and_overlapping_boxes(tmp_path):
    """The old drawing's fault: a straight edge from the first box to the third, through the
    second; and two boxes drawn over each other."""
    boxes = "".join(
        f'<g class="node" data-id="{name}"><rect class="box" x="{x}" y="{y}" width="80" '
        'height="30"/></g>'
        for name, x, y in (("a", 0, 0), ("b", 150, 0), ("c", 300, 0), ("d", 310, 10))
    )
    edge = '<path class="edge" data-tail="a" data-head="c" d="M80,15 C150,15 250,15 300,15"/>'
    page = tmp_path / "page.html"
    page.write_text(f"<html><body><svg width='500' height='100'>{edge}{boxes}</svg></body></html>")
    geometry = report_geometry.measure(page, tmp_path)
    assert geometry["crossings"] == [["a", "c", "b"]]
    assert geometry["overlaps"] == [["c", "d"]]
