"""lineage as a graph (each artifact and execution once), on a TFX-layout store and on stores
grown from it by copying its runs (tests.mlmd_synth), as the 1,000-run benchmark does."""

from __future__ import annotations

import contextlib
import io
import json

from pipeline.mlmd import cli as inspect_mlmd
from pipeline.mlmd import connection, lineage, records, runs
from tests import mlmd_synth


def inspect(path: str, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert inspect_mlmd.main(["--metadata", path, *args]) == 0
    return out.getvalue()


def test_upstream_of_a_pushed_model_reaches_the_data_and_the_baseline(penguin_store):
    recorded = penguin_store["runs"]
    pushed = recorded["run-3"]["Pusher"]["outputs"]["pushed_model"]
    graph = json.loads(inspect(penguin_store["path"], "--json", "lineage", str(pushed)))
    upstream = graph["upstream"]
    executions = [e["execution"] for e in upstream["executions"]]
    artifacts = [a["artifact"] for a in upstream["artifacts"]]
    assert len(executions) == len(set(executions)) and len(artifacts) == len(set(artifacts))
    components = {(e["component"], e["run"]) for e in upstream["executions"]}
    # Run 3's chain, and through the Evaluator's baseline, run 1's Trainer and what it read.
    assert {("Pusher", "run-3"), ("Evaluator", "run-3"), ("Trainer", "run-1")} <= components
    assert ("ImportSchemaGen", "run-1") in components  # run 3's schema came from run 1's cache
    [example_gen] = [e for e in upstream["executions"] if e["run"] == "run-3" and "source" in e]
    assert example_gen["source"] == "/data/penguins-v2"
    baseline = recorded["run-1"]["Trainer"]["outputs"]["model"]
    evaluator = recorded["run-3"]["Evaluator"]["execution"]
    assert {"artifact": baseline, "execution": evaluator, "direction": "input"} in upstream["edges"]
    # The producer of a reused artifact is the execution that made it, not the cached reruns.
    schema = recorded["run-1"]["ImportSchemaGen"]["outputs"]["schema"]
    writers = {
        e["execution"]
        for e in upstream["edges"]
        if e["artifact"] == schema and e["direction"] == "output"
    }
    assert writers == {recorded["run-1"]["ImportSchemaGen"]["execution"]}


def test_text_lists_each_execution_once_in_dependency_order(penguin_store):
    pushed = penguin_store["runs"]["run-3"]["Pusher"]["outputs"]["pushed_model"]
    text = inspect(penguin_store["path"], "lineage", str(pushed))
    upstream = text.split("downstream")[0]
    lines = [line.strip() for line in upstream.splitlines() if "(execution " in line]
    assert len(lines) == len(set(lines))
    order = [line.split(" ")[0] for line in lines]
    assert order.index("CsvExampleGen") < order.index("Transform") < order.index("Trainer")
    assert order[-1] == "Pusher"


def test_lineage_grows_with_the_graph_not_with_the_paths(penguin_store, tmp_path):
    """Cached reruns of run 1, copied until the store holds 6, 12, 24 runs: each reads run 1's
    examples again (StatisticsGen, Transform, Evaluator) and outputs what run 1 made. The old
    tree repeated whole subtrees per path (22,213 lines at 8 runs); the graph adds each rerun's
    executions once, and nothing else."""
    examples = penguin_store["runs"]["run-1"]["CsvExampleGen"]["outputs"]["examples"]
    sizes = {}
    for count in (6, 12, 24):
        grown = str(tmp_path / f"grown-{count}.sqlite")
        assert mlmd_synth.grow(penguin_store["path"], grown, count, templates=[2]) == count - 3
        db = records.Store(connection.open_store(grown))
        assert len(db.runs()) == count
        graph = lineage.lineage(db, examples)["downstream"]
        executions = [e["execution"] for e in graph["executions"]]
        assert len(executions) == len(set(executions))
        sizes[count] = (len(executions), len(graph["artifacts"]), len(json.dumps(graph)))
    # Per cached rerun: the 6 executions that read the examples or what was made from them
    # (StatisticsGen, ExampleValidator, Transform, Trainer, Evaluator, Pusher).
    assert sizes[12][0] - sizes[6][0] == 6 * 6 and sizes[24][0] - sizes[12][0] == 12 * 6
    assert sizes[6][1] == sizes[12][1] == sizes[24][1]  # no artifact is repeated
    assert sizes[24][2] / (sizes[24][0] + sizes[24][1]) < 300  # bytes per node


def test_grown_store_copies_states_and_reuse(penguin_store, tmp_path):
    grown = str(tmp_path / "grown.sqlite")
    mlmd_synth.grow(penguin_store["path"], grown, 7)
    db = records.Store(connection.open_store(grown))
    states = list(db.node_states_by_run().values())
    assert states[3] == states[0] and states[4] == states[1] and states[6] == states[0]
    fourth, fifth = db.runs()[3], db.runs()[4]
    first_outputs = {r["component"]: r["outputs"] for r in runs.describe_executions(db, fourth)}
    cached = {r["component"]: r["outputs"] for r in runs.describe_executions(db, fifth)}
    # The cached copy reuses what the copy before it made (new ids, not run 1's).
    assert cached["Trainer"] == first_outputs["Trainer"]
    assert first_outputs["Trainer"] != penguin_store["runs"]["run-1"]["Trainer"]["outputs"]
    sources = runs.cache_sources(db, runs.describe_executions(db, fifth))
    assert {s["row"] for s in sources.values()} == {4}
