"""The whole local pipeline, as a user runs it: `python pipeline/run_local.py` in a fresh
process, on real data, checked through ML Metadata and the pushed model."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from components.ml import features
from pipeline.mlmd import cli as inspect_mlmd
from pipeline.mlmd import connection, records
from tests import system_packages
from tests.docs import pages
from tests.pipeline.mlmd import report_geometry
from tests.pipeline_components import CSV_COMPONENTS

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPONENTS = list(CSV_COMPONENTS)


def run_local(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, os.path.join(PROJECT_ROOT, "pipeline", "run_local.py"), *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=1200,
        check=False,
    )


def run_logs(metadata: str) -> str:
    """Every log file of the run whose MLMD store is `metadata` (its `logs/` beside it), joined."""
    logs = os.path.join(os.path.dirname(metadata), "logs")
    text = ""
    for name in sorted(os.listdir(logs)):
        with open(os.path.join(logs, name), errors="replace") as handle:
            text += handle.read()
    return text


def explain(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"


def test_every_component_executed_then_rerun_is_fully_cached(penguin_runs):
    store = connection.open_store(penguin_runs["metadata"])
    runs = list(records.Store(store).node_states_by_run().values())
    assert len(runs) == 2
    first, second = runs
    assert sorted(first) == sorted(COMPONENTS)
    assert all(state == "COMPLETE" for state in first.values()), first
    # Every component is reused, the baseline too (its input, the candidate, is unchanged).
    assert second == {n: "CACHED" for n in COMPONENTS}
    assert "9 component(s) executed, 0 reused" in penguin_runs["first"].stdout
    assert "0 component(s) executed, 9 reused" in penguin_runs["second"].stdout


def test_progress_lines_and_summary(penguin_runs):
    stdout = penguin_runs["first"].stdout
    for index, name in enumerate(COMPONENTS, start=1):
        assert f"({index}/9) {name} started" in stdout
    assert "(6/9) Trainer executed in " in stdout
    assert "blessed:       yes" in stdout
    assert "rows rejected: 0" in stdout
    assert penguin_runs["metadata"] in stdout
    assert "(6/9) Trainer cached in " in penguin_runs["second"].stdout


def test_training_choices_printed_and_recorded_on_the_model(penguin_runs):
    """No --batch_size or --early_stopping_patience: the batch chosen from the ~260 training
    rows (32) and early stopping under the 20-epoch cap, printed and on the Model in MLMD."""
    import json

    from components.training import loop

    stdout = penguin_runs["first"].stdout
    assert "global batch 32 (chosen from the training rows)" in stdout, stdout
    assert "at most 20 epoch(s) (early stopping on the eval loss, patience 3)" in stdout
    store = connection.open_store(penguin_runs["metadata"])
    trainer = store.get_context_by_type_and_name("node", "penguins-pipeline.Trainer")
    first_run = min(store.get_executions_by_context(trainer.id), key=lambda e: e.id)
    outputs = records.Store(store).outputs_by_type(first_run.id)
    [model_artifact], [model_run] = outputs["Model"], outputs["ModelRun"]
    recorded = records.properties(model_artifact)
    with open(os.path.join(model_run.uri, loop.RESULT_FILE)) as handle:
        result = json.load(handle)
    assert recorded["per_replica_batch_size"] == result["per_replica_batch"] == 32
    assert recorded["batch_size_from_data"] == 1
    assert recorded["epochs_cap"] == 20 and recorded["early_stopping_patience"] == 3
    assert 1 <= recorded["best_epoch"] <= recorded["epochs_run"] == result["epochs_run"] <= 20
    assert recorded["stopped_early"] == int(result["stopped_early"])
    assert recorded["best_eval_loss"] == pytest.approx(result["best_val_loss"], rel=1e-4)
    ended = "early stopping" if result["stopped_early"] else "training ended"
    assert f"{ended} at epoch {result['epochs_run']}/20: keeping the weights of epoch" in stdout


def test_model_blessed_and_pushed(penguin_runs):
    store = connection.open_store(penguin_runs["metadata"])
    blessings = store.get_artifacts_by_type("ModelBlessing")
    assert len(blessings) == 1
    assert records.custom_value(blessings[0], "blessed") == 1
    pushed = store.get_artifacts_by_type("PushedModel")
    assert len(pushed) == 1 and records.custom_value(pushed[0], "pushed") == 1
    versions = os.listdir(penguin_runs["serving"])
    assert len(versions) == 1 and versions[0].isdigit()  # one versioned SavedModel
    # The project's classification EvalConfig is evaluated over record batches, not by TFMA's
    # per-example path (the run's log, beside metadata.sqlite, says which and why).
    text = run_logs(penguin_runs["metadata"])
    assert "Evaluator: batched evaluation over record batches" in text
    assert "TFMA's per-example evaluation" not in text


def test_pushed_model_predicts_raw_held_out_rows(penguin_runs):
    store = connection.open_store(penguin_runs["metadata"])
    [examples] = store.get_artifacts_by_type("Examples")[:1]
    eval_files = glob.glob(os.path.join(examples.uri, "Split-eval", "*.gz"))
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(eval_files, compression_type="GZIP")]
    truth = [
        tf.train.Example.FromString(r).features.feature["species"].bytes_list.value[0].decode()
        for r in serialized
    ]
    [version] = os.listdir(penguin_runs["serving"])
    serve = tf.saved_model.load(os.path.join(penguin_runs["serving"], version)).signatures[
        features.SERVING_SIGNATURE
    ]
    predicted = [
        c.decode() for c in serve(examples=tf.constant(serialized))[features.CLASSES].numpy()
    ]
    accuracy = sum(p == t for p, t in zip(predicted, truth, strict=True)) / len(truth)
    assert len(truth) > 50
    assert accuracy >= 0.9, accuracy


def test_users_csv_infers_and_writes_out_a_schema(tmp_path, penguins_csv):
    """--data/--label on a dataset with no curated schema: SchemaGen infers one, the run trains
    and the schema is written out for review."""
    data_dir = tmp_path / "birds"
    data_dir.mkdir()
    with open(penguins_csv) as source:
        lines = source.read().splitlines()
    # Two files, to exercise multi-file ingestion.
    (data_dir / "part1.csv").write_text("\n".join(lines[:200]) + "\n")
    (data_dir / "part2.csv").write_text("\n".join([lines[0], *lines[200:]]) + "\n")
    # The README's (and csv.md's) command, DIR and COLUMN being this directory and species.
    sandbox = pages.Sandbox(tmp_path / "sandbox")
    csv_command = pages.command("README.md", "--data DIR --label COLUMN")
    result = sandbox.run(csv_command, {"DIR": str(data_dir), "COLUMN": "species"})
    assert result.returncode == 0, explain(result)
    assert "(3/9) SchemaGen executed" in result.stdout
    inferred = sandbox.output_root / "birds-pipeline" / "inferred_schema" / "schema.pbtxt"
    assert f"inferred schema: {inferred}" in result.stdout
    text = inferred.read_text()
    assert 'name: "species"' in text and 'name: "bill_length_mm"' in text
    assert "blessed:       yes" in result.stdout


def test_a_column_with_a_value_in_one_eval_row_of_15002_is_a_feature(tmp_path):
    """TFX's chicago taxi data, from the installed tfx wheel: `pickup_census_tract` has a value
    in 1 of 15,002 rows, which the split puts in eval. TFX's SchemaGen deprecates the column
    (Transform then drops it unsaid); here it is an optional INT feature, listed after the run,
    in the transform graph's inputs, and the regression on `tips` is blessed."""
    import shutil

    import tensorflow_transform as tft
    import tfx
    from tensorflow_metadata.proto.v0 import schema_pb2

    from pipeline import preflight

    source = os.path.join(
        os.path.dirname(tfx.__file__), "examples", "chicago_taxi_pipeline", "data", "simple"
    )
    data_dir = tmp_path / "taxi"
    data_dir.mkdir()
    shutil.copy(os.path.join(source, "data.csv"), data_dir / "data.csv")
    out = tmp_path / "out"
    result = run_local(
        "--data", str(data_dir), "--label", "tips", "--epochs", "3", "--output_root", str(out)
    )  # fmt: skip
    assert result.returncode == 0, explain(result)
    assert (
        "column(s) with values in some split(s) only, features typed from those values (TFX's "
        "SchemaGen would deprecate them): pickup_census_tract"
    ) in result.stdout
    schema = preflight.load_schema(str(out / "taxi-pipeline" / "inferred_schema" / "schema.pbtxt"))
    [tract] = [f for f in schema.feature if f.name == "pickup_census_tract"]
    assert tract.type == schema_pb2.INT
    assert tract.lifecycle_stage == schema_pb2.UNKNOWN_STAGE and tract.presence.min_count == 0
    # TFX's shape inference: the label and the columns in every row are fixed-shape.
    shaped = {f.name for f in schema.feature if f.HasField("shape")}
    assert "tips" in shaped and "pickup_census_tract" not in shaped
    [graph] = glob.glob(
        str(out / "taxi-pipeline" / "pipeline_root" / "Transform" / "transform_graph" / "*")
    )
    raw_spec = tft.TFTransformOutput(graph).raw_feature_spec()
    assert isinstance(raw_spec["pickup_census_tract"], tf.io.VarLenFeature)
    assert isinstance(raw_spec["tips"], tf.io.FixedLenFeature)
    assert "blessed:       yes" in result.stdout
    # The pushed model predicts a row with empty cells in optional columns, and refuses, with
    # its line, a row without a value in a fixed-shape one.
    with open(data_dir / "data.csv") as handle:
        header, row = handle.readline().rstrip("\n"), handle.readline().rstrip("\n")
    required = sorted(shaped - {"tips"})[0]
    cells = row.split(",")
    cells[header.split(",").index(required)] = ""
    (tmp_path / "new.csv").write_text("\n".join([header, row, ",".join(cells)]) + "\n")
    predicted = subprocess.run(
        [sys.executable, "-m", "pipeline.predict", "--model", str(out / "taxi-pipeline" /
         "serving_model"), "--csv", str(tmp_path / "new.csv")],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600, check=False,
    )  # fmt: skip
    assert predicted.returncode == 2, predicted.stderr
    assert predicted.stdout.startswith(f"{tmp_path / 'new.csv'}:2\ttips=")
    assert f"new.csv:3: column {required!r}: no value, and the model requires one" in (
        predicted.stderr
    )


def test_drifted_data_stops_before_transform(tmp_path, penguins_csv):
    data_dir = tmp_path / "drifted"
    data_dir.mkdir()
    with open(penguins_csv) as source:
        text = source.read().replace("Adelie,Torgersen", "Emperor,Torgersen")
    (data_dir / "penguins.csv").write_text(text)
    schema = os.path.join(PROJECT_ROOT, "schemas", "penguins", "schema.pbtxt")
    result = run_local(
        "--data",
        str(data_dir),
        "--label",
        "species",
        "--schema",
        schema,
        "--output_root",
        str(tmp_path / "out"),
    )
    assert result.returncode == 1, explain(result)
    assert "error: ExampleValidator failed" in result.stderr
    assert "feature 'species': ENUM_TYPE_UNEXPECTED_STRING_VALUES" in result.stderr
    assert "Transform started" not in result.stdout
    store = connection.open_store(str(tmp_path / "out" / "drifted-pipeline" / "metadata.sqlite"))
    [states] = records.Store(store).node_states_by_run().values()
    assert states["ExampleValidator"] == "FAILED"
    assert "Transform" not in states


def inspect(penguin_runs, *args):
    """`python -m pipeline.mlmd --json ...` in-process; returns the parsed output."""
    import contextlib
    import io
    import json

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = inspect_mlmd.main(["--metadata", penguin_runs["metadata"], "--json", *args])
    assert code == 0
    return json.loads(out.getvalue())


def test_inspect_runs_and_executions_match_mlmd(penguin_runs):
    store = connection.open_store(penguin_runs["metadata"])
    runs = inspect(penguin_runs, "runs")
    raw_runs = sorted(store.get_contexts_by_type("pipeline_run"), key=lambda c: c.id)
    assert [r["run"] for r in runs] == [c.name for c in raw_runs]
    assert (runs[0]["executed"], runs[0]["cached"], runs[0]["status"]) == (9, 0, "COMPLETE")
    # Second run: everything reused.
    assert (runs[1]["executed"], runs[1]["cached"], runs[1]["status"]) == (0, 9, "COMPLETE")
    for row, context in zip(runs, raw_runs, strict=True):
        assert row["executed"] + row["cached"] == len(store.get_executions_by_context(context.id))

    executions = inspect(penguin_runs, "executions")  # latest run
    assert [e["component"] for e in executions] == COMPONENTS
    trainer = next(e for e in executions if e["component"] == "Trainer")
    assert trainer["state"] == "CACHED"
    assert trainer["properties"]["run_fn"] == "components.training.trainer.run_fn"
    first = inspect(penguin_runs, "executions", "1")
    assert all(e["state"] == "COMPLETE" for e in first)


def test_inspect_artifacts_lineage_and_diff(penguin_runs):
    [model] = [
        m
        for m in inspect(penguin_runs, "artifacts", "--type", "Model", "1")
        if m["produced_by"]["component"] == "Trainer"
    ]
    assert model["produced_by"]["component"] == "Trainer"
    assert model["size_bytes"] > 10_000 and os.path.isdir(model["uri"])
    [pushed] = inspect(penguin_runs, "artifacts", "--type", "PushedModel", "1")

    upstream = inspect(penguin_runs, "lineage", str(pushed["artifact"]))["upstream"]
    components = {e["component"] for e in upstream["executions"]}
    sources = {e.get("source") for e in upstream["executions"]}
    assert len(components) == len(upstream["executions"])  # each execution once (one run)
    assert {"Pusher", "Trainer", "Transform", "CsvExampleGen", "Evaluator"} <= components
    assert any(s and s.endswith(os.path.join("palmerpenguins", "data")) for s in sources)

    [examples] = inspect(penguin_runs, "artifacts", "--type", "Examples", "1")[:1]
    downstream = inspect(penguin_runs, "lineage", str(examples["artifact"]))["downstream"]
    consumers = {e["component"] for e in downstream["executions"]}
    assert {"StatisticsGen", "Transform", "Evaluator"} <= consumers

    changes = inspect(penguin_runs, "diff", "1", "2")
    states = {c["component"]: (c["a"], c["b"]) for c in changes if c["change"] == "state"}
    assert states["Trainer"] == ("COMPLETE", "CACHED")
    assert states["BaselineModel"] == ("COMPLETE", "CACHED")
    # The rerun reused the same evaluation: no metric differs.
    assert not [c for c in changes if c["change"].startswith("metric ")]


def test_evaluation_against_the_majority_guess_in_the_summary_and_the_cli(penguin_runs):
    """The first run's figures: the summary's lines, `python -m pipeline.mlmd evaluation` and
    TFMA's own reading of the Evaluator's output agree; the guess is the training split's most
    frequent species (Transform's counts), its accuracy that species' share of the eval split."""
    import re

    from tests.test_e2e_blessing import summary_metrics, tfma_overall

    stdout = penguin_runs["first"].stdout
    metrics = summary_metrics(stdout)
    store = connection.open_store(penguin_runs["metadata"])
    [evaluated] = store.get_artifacts_by_type("ModelEvaluation")
    tfma_values = tfma_overall(evaluated.uri)
    for name in ("sparse_categorical_accuracy", "accuracy_skill", "majority_class_accuracy"):
        assert metrics[name] == pytest.approx(tfma_values[name], abs=6e-5), name
    [graph] = store.get_artifacts_by_type("TransformGraph")
    counts_file = os.path.join(graph.uri, "transform_fn", "assets", features.LABEL_COUNTS)
    with open(counts_file) as handle:
        counts = {name: int(count) for count, name in (line.split() for line in handle)}
    majority = max(counts, key=counts.get)
    assert f"baseline:      always answering {majority!r} (the training split's" in stdout
    assert sum(counts.values()) == int(re.search(r"examples: +train (\d+)", stdout).group(1))

    [section] = inspect(penguin_runs, "evaluation", "1")["evaluations"]
    classes = section["classes"]
    assert sorted(classes["classes"]) == ["Adelie", "Chinstrap", "Gentoo"]
    support = {row["class"]: float(row["support"]) for row in classes["per_class"]}
    assert sum(support.values()) == metrics["example_count"]
    assert support[majority] / metrics["example_count"] == pytest.approx(
        metrics["majority_class_accuracy"], abs=6e-5
    )
    recalls = {row["actual"]: row["cells"] for row in classes["rows"]}
    for row in classes["per_class"]:
        diagonal = next(c for c in recalls[row["class"]] if c["predicted"] == row["class"])
        assert float(row["recall"]) == pytest.approx(diagonal["share"], abs=6e-5)
        assert f"{row['class']} precision {row['precision']} recall {row['recall']}" in stdout
    shown = {m["metric"]: m for m in section["metrics"]}
    assert shown["accuracy_skill"]["threshold"] == ">= 0.1"


CHROMIUM_FLAGS = [*report_geometry.CHROMIUM_FLAGS, "--enable-logging=stderr", "--v=0"]


@pytest.mark.system_packages("chromium")
def test_report_renders_in_headless_chromium(penguin_runs, tmp_path):
    chromium = system_packages.which("chromium")
    report = tmp_path / "report.html"
    result = inspect(penguin_runs, "report", "1", "--out", str(report))
    assert result["report"] == str(report)
    page = report.read_text()
    assert "<script" not in page and "http://" not in page and "https://" not in page

    size, stderr = report_geometry.screenshot(report, tmp_path)
    assert size > 20_000  # a rendered page, not a blank one
    assert "CONSOLE" not in stderr  # no console errors or messages at all

    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, *profile, "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = dom.stdout
    for section in (
        "Lineage",
        "Component times",
        "Data statistics",
        "Anomalies",
        "Evaluation",
        "Artifacts",
    ):
        assert f">{section}</h2>" in rendered
    assert rendered.count('class="node"') == len(COMPONENTS)
    assert "sparse_categorical_accuracy" in rendered and "Model blessed" in rendered
    # The confusion matrix, drawn as a shaded grid with the species as rows and columns.
    assert "Confusion matrix (eval split" in rendered and 'class="confusion"' in rendered
    assert rendered.count("<th>Gentoo</th>") == 2 and "accuracy_skill" in rendered
    assert "bill_length_mm" in rendered and "no anomalies" in rendered

    # The lineage drawing as Chromium lays it out: artifact nodes between the executions, no
    # two boxes overlapping, no edge through a box it does not join.
    geometry = report_geometry.measure(report, tmp_path)
    assert geometry["boxes"] == len(COMPONENTS) + rendered.count('class="artifact"') > 15
    assert geometry["overlaps"] == [] and geometry["crossings"] == []


@pytest.fixture
def mariadb(tmp_path):
    """Debian's MariaDB server on a loopback port, in a throwaway data directory."""
    import time

    import portpicker

    server, install = system_packages.which("mariadbd"), system_packages.which("mariadb-install-db")
    assert server and install, "the system_packages marker installs mariadb-server or skips"
    data_dir = tmp_path / "mariadb"
    subprocess.run(
        [
            install,
            "--user=root",
            f"--datadir={data_dir}",
            "--skip-test-db",
            "--auth-root-authentication-method=normal",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = portpicker.pick_unused_port()
    process = subprocess.Popen(
        [
            server,
            "--user=root",
            f"--datadir={data_dir}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={tmp_path / 'mariadb.sock'}",
            f"--pid-file={tmp_path / 'mariadb.pid'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    import socket

    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, "mariadbd exited during start-up"
            assert time.monotonic() < deadline, "mariadbd did not start in 60 s"
            time.sleep(0.3)
    yield port
    process.terminate()
    process.wait(timeout=60)


@pytest.mark.system_packages("mariadb-server")
def test_pipeline_on_mysql_metadata(mariadb, tmp_path):
    """run_local records MLMD in MySQL (MariaDB here) and inspect_mlmd reads it back."""
    import contextlib
    import io
    import json

    from ml_metadata.proto import metadata_store_pb2

    flags = [
        "--mysql_host",
        "127.0.0.1",
        "--mysql_port",
        str(mariadb),
        "--mysql_database",
        "mlmd_test",
    ]
    result = run_local("--output_root", str(tmp_path / "out"), *flags)
    assert result.returncode == 0, explain(result)
    assert f"MLMD:          mysql://127.0.0.1:{mariadb}/mlmd_test" in result.stdout
    assert not (tmp_path / "out" / "penguins-pipeline" / "metadata.sqlite").exists()

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert inspect_mlmd.main([*flags, "--json", "runs"]) == 0
    [run] = json.loads(out.getvalue())
    assert (run["status"], run["executed"], run["cached"]) == ("COMPLETE", 9, 0)

    config = metadata_store_pb2.ConnectionConfig()
    config.mysql.host, config.mysql.port = "127.0.0.1", mariadb
    config.mysql.database, config.mysql.user = "mlmd_test", "root"
    store = connection.open_store(config)
    [states] = records.Store(store).node_states_by_run().values()
    assert sorted(states) == sorted(COMPONENTS)
    assert len(store.get_artifacts_by_type("PushedModel")) == 1
