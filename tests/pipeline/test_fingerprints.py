"""Cache fingerprints: which project files a component's code loads, digests that ignore comments
but not behaviour, the schema and stack parts, and the reason a component reran."""

from __future__ import annotations

import json
import os

import pytest

from pipeline import builder, datasets, fingerprints
from pipeline import config as config_lib
from tests.pipeline_components import CSV_COMPONENTS


def _write(root, path: str, text: str) -> None:
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)


@pytest.fixture
def fake_project(tmp_path):
    """components/{__init__, a, b, c, d}.py: a imports b at the top and c inside a function;
    d is imported by nothing."""
    root = str(tmp_path)
    _write(root, "components/__init__.py", "")
    _write(
        root,
        "components/a.py",
        "import os\nfrom components import b\n\ndef f():\n"
        "    from components.c import g\n    return g()\n",
    )
    _write(root, "components/b.py", "X = 1  # a constant\n")
    _write(root, "components/c.py", "from . import b\n\ndef g():\n    return b.X\n")
    _write(root, "components/d.py", "Y = 2\n")
    return root


def test_the_closure_follows_every_project_import(fake_project):
    closure = fingerprints.source_closure(["components.a"], root=fake_project)
    assert sorted(closure) == [
        "components/__init__.py",
        "components/a.py",
        "components/b.py",  # top-level import, and the relative import in c
        "components/c.py",  # imported inside a function
    ]
    assert fingerprints.source_closure(["tensorflow", "os"], root=fake_project) == {}


def test_comments_do_not_change_a_digest_and_behaviour_does(fake_project):
    before = fingerprints.source_closure(["components.a"], root=fake_project)
    _write(fake_project, "components/b.py", "# reworded\nX = 1    # the constant, reformatted\n")
    assert fingerprints.source_closure(["components.a"], root=fake_project) == before
    _write(fake_project, "components/b.py", "X = 2\n")
    after = fingerprints.source_closure(["components.a"], root=fake_project)
    assert [p for p in after if after[p] != before[p]] == ["components/b.py"]


def test_explain_names_what_changed():
    code = {"components/ml/model.py": "1", "components/ml/features.py": "2"}
    stack = {"tfx": "1.16.0", "tensorflow": "2.16.2"}
    before = json.dumps({"code": code, "schema": "s1", "stack": stack})
    assert fingerprints.explain(before, before) == ""
    after = json.dumps(
        {
            "code": {**code, "components/ml/model.py": "9"},
            "schema": "s2",
            "stack": {**stack, "tfx": "1.17.0"},
        }
    )
    assert fingerprints.explain(before, after) == (
        "code changed: components/ml/model.py; curated schema changed; "
        "stack changed: tfx 1.16.0 -> 1.17.0"
    )
    previous, current = {"Trainer": before}, {"Trainer": before, "Pusher": before}
    assert "inputs or parameters changed" in fingerprints.rerun_reason(previous, current, "Trainer")
    assert fingerprints.rerun_reason(previous, current, "Pusher") == ""  # never ran before


def _penguin_fingerprints(tmp_path, **dataset_changes) -> dict[str, dict]:
    dataset = datasets.penguins()
    if dataset_changes:
        import dataclasses

        dataset = dataclasses.replace(dataset, **dataset_changes)
    config = config_lib.local_config(dataset=dataset, output_root=str(tmp_path))
    pipeline = builder.create_pipeline(config)
    return {
        node: json.loads(value)
        for node, value in fingerprints.of_components(pipeline.components).items()
    }


def test_every_component_of_the_pipeline_carries_its_fingerprint(tmp_path):
    by_node = _penguin_fingerprints(tmp_path)
    assert set(by_node) == set(CSV_COMPONENTS)
    baseline = by_node["BaselineModel"]["code"]
    assert "components/tfx_components/baseline_model/executor.py" in baseline
    assert "components/tfx_components/evaluator/executor.py" in by_node["Evaluator"]["code"]
    for value in by_node.values():
        assert value["stack"] == fingerprints.stack_versions()
        assert value["stack"]["tfx"] == "1.16.0"
    trainer, transform = set(by_node["Trainer"]["code"]), set(by_node["Transform"]["code"])
    assert {"components/training/trainer.py", "components/ml/model.py"} <= trainer
    assert "components/ml/preprocessing.py" in trainer  # the model reads NUM_OOV_BUCKETS
    assert {
        "components/ml/preprocessing.py",
        "components/tfx_components/transform/executor.py",
    } <= transform
    assert "components/ml/model.py" not in transform
    assert not any(path.startswith("pipeline/") for path in trainer | transform)
    validator = by_node["ExampleValidator"]["code"]
    assert "components/tfx_components/validation/executor.py" in validator
    assert by_node["StatisticsGen"]["code"] == {}  # stock TFX: the stack alone
    schema = by_node["ImportSchemaGen"]
    assert schema["schema"] == fingerprints.file_digest(datasets.penguins().schema_path)
    assert "schema" not in by_node["Transform"]


def test_a_digest_given_by_the_runner_is_used_for_a_schema_not_readable_here(tmp_path):
    by_node = _penguin_fingerprints(
        tmp_path, schema_path="/app/schemas/penguins/schema.pbtxt", schema_digest="abc"
    )
    assert by_node["ImportSchemaGen"]["schema"] == "abc"


def test_the_evaluator_carries_the_metric_module_tfma_loads(tmp_path):
    """Both tasks bless on a skill metric TFMA loads from components/ml/metrics.py (the
    classification skill over the majority-class guess, the regression skill over the mean), so
    an edit there reruns the Evaluator."""
    penguins = _penguin_fingerprints(tmp_path / "classification")
    regression = _penguin_fingerprints(
        tmp_path / "regression", label_key="body_mass_g", task="regression"
    )
    assert "components/ml/metrics.py" in regression["Evaluator"]["code"]
    assert "components/ml/metrics.py" in penguins["Evaluator"]["code"]
    assert "components/ml/metrics.py" not in penguins["StatisticsGen"]["code"]


def test_previous_fingerprints_are_this_pipelines_newest_finished_ones(tmp_path):
    """A shared store (MySQL) holds other pipelines' nodes of the same name: never read."""
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2 as mlmd

    from pipeline.mlmd import records

    connection = mlmd.ConnectionConfig()
    connection.sqlite.filename_uri = str(tmp_path / "metadata.sqlite")
    connection.sqlite.connection_mode = mlmd.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    store = metadata_store.MetadataStore(connection)
    node_type = store.put_context_type(mlmd.ContextType(name="node"))
    trainer_type = store.put_execution_type(mlmd.ExecutionType(name="Trainer"))
    contexts = dict(
        zip(
            ("mine", "other"),
            store.put_contexts(
                [mlmd.Context(type_id=node_type, name=f"{p}.Trainer") for p in ("mine", "other")]
            ),
            strict=True,
        )
    )
    for pipeline, value, state in [
        ("mine", "old", mlmd.Execution.COMPLETE),
        ("mine", "new", mlmd.Execution.CACHED),
        ("mine", "failed", mlmd.Execution.FAILED),
        ("other", "theirs", mlmd.Execution.COMPLETE),
    ]:
        execution = mlmd.Execution(type_id=trainer_type, last_known_state=state)
        execution.custom_properties[fingerprints.FINGERPRINT_KEY].string_value = value
        [execution_id] = store.put_executions([execution])
        association = mlmd.Association(context_id=contexts[pipeline], execution_id=execution_id)
        store.put_attributions_and_associations([], [association])
    db = records.Store(store, schema=records.TFX_SCHEMA)
    key = fingerprints.FINGERPRINT_KEY
    assert records.latest_property(db, key, "mine") == {"Trainer": "new"}
    assert records.latest_property(db, key, "other") == {"Trainer": "theirs"}
