"""The HTML report on a TFX-layout store: its sections, and its lineage drawing as headless
Chromium renders it (no overlapping boxes, no edge through a box)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from pipeline import PROJECT_ROOT
from pipeline.mlmd import cli, connection, records, report, runs
from tests.pipeline.mlmd import report_geometry, tfx_store


def write_report(penguin_store, tmp_path, *args) -> str:
    out = tmp_path / "report.html"
    code = cli.main(["--metadata", penguin_store["path"], "report", *args, "--out", str(out)])
    assert code == 0
    return out.read_text()


def test_lineage_drawing_has_artifact_nodes_and_the_resolver_connected(penguin_store):
    db = records.Store(connection.open_store(penguin_store["path"]))
    run = db.run("3")
    graph = report.lineage_graph(db, run, runs.describe_executions(db, run))
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
    graph = report.lineage_graph(db, first, runs.describe_executions(db, first))
    resolver_1 = f"e{recorded['run-1']['baseline_model_resolver']['execution']}"
    assert (resolver_1, f"e{recorded['run-1']['Evaluator']['execution']}", True) in graph["edges"]
    assert "resolved nothing" in graph["nodes"][resolver_1]["lines"]


def test_a_full_report_needs_no_graphviz(penguin_store, tmp_path):
    """`report` as a user runs it, with a PATH on which there is no program at all (Graphviz's
    dot included): the page comes out with the whole lineage drawing."""
    empty = tmp_path / "bin"
    empty.mkdir()
    assert shutil.which("dot", path=str(empty)) is None
    out = tmp_path / "report.html"
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.mlmd", "--metadata", penguin_store["path"]]
        + ["report", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env=dict(os.environ, PATH=str(empty)),
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    page = out.read_text()
    drawing = re.search(r'<svg [^>]*aria-label="lineage graph".*?</svg>', page, re.S).group(0)
    # Run 3: 9 executions, 12 artifacts; every edge names two of them.
    assert drawing.count('class="node"') == 9 and drawing.count('class="artifact"') == 12
    ids = set(re.findall(r'data-id="([ae]\d+)"', drawing))
    ends = re.findall(r'data-tail="(\w+)" data-head="(\w+)"', drawing)
    assert len(ends) > 20 and {name for pair in ends for name in pair} <= ids


def test_what_the_records_say_is_escaped(tmp_path):
    """Text from the store and its files (an anomaly's feature and description) is shown as
    text, never as markup: the templates escape every value."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    path = str(tmp_path / "metadata.sqlite")
    recorded = tfx_store.record_runs(path, str(tmp_path / "pipeline_root"))
    db = records.Store(connection.open_store(path))
    anomalies_id = recorded["run-1"]["ExampleValidator"]["outputs"]["anomalies"]
    uri = db.artifact(anomalies_id).uri
    os.makedirs(os.path.join(uri, "Split-train"))
    found = anomalies_pb2.Anomalies()
    info = found.anomaly_info["<img src=x>"]
    info.description = "<script>alert(1)</script> & more"
    info.reason.add().type = anomalies_pb2.AnomalyInfo.ENUM_TYPE_UNEXPECTED_STRING_VALUES
    with open(os.path.join(uri, "Split-train", "SchemaDiff.pb"), "wb") as handle:
        handle.write(found.SerializeToString())
    page = write_report({"path": path}, tmp_path, "1")
    assert "<script" not in page and "<img" not in page
    assert (
        "<li>train: &lt;img src=x&gt;: ENUM_TYPE_UNEXPECTED_STRING_VALUES: "
        "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more</li>"
    ) in page


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


@pytest.mark.system_packages("chromium")
@pytest.mark.parametrize("run", ["1", "2", "3"])
def test_drawing_in_headless_chromium(penguin_store, tmp_path, run):
    page = write_report(penguin_store, tmp_path, run)
    written = tmp_path / "report.html"
    geometry = report_geometry.measure(written, tmp_path)
    assert geometry["boxes"] == page.count('class="node"') + page.count('class="artifact"')
    assert geometry["edges"] == page.count('class="edge"') > 20
    assert geometry["overlaps"] == []
    assert geometry["crossings"] == []
    size, stderr = report_geometry.screenshot(written, tmp_path)
    assert size > 20_000 and "CONSOLE" not in stderr


@pytest.mark.system_packages("chromium")
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
