"""A user's module through the compiled pipeline, as the Kubeflow tests run it (the IR runner,
tests/kubeflow/ir_runner.py): compile stages --module_file under the pipeline root, every pod
that runs it (Transform, Trainer) imports it from there, and KFP's cache key changes with the
module's behaviour and not with a comment.

What stands in for the cluster, beyond the IR runner's own stand-ins: compile writes gs://bucket
through TensorFlow's file systems, which have no bucket here, so staging writes into the folder
that stands for gs://bucket in the IR runner (pipeline.user_code._stage_remote replaced by a copy
into that folder). The pods get the staged URI, which the IR runner maps to that folder as it
maps every gs:// URI in their ExecutorInput."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml

from pipeline import PROJECT_ROOT
from pipeline import user_code as user_code_lib
from tests.kubeflow import ir_runner
from tests.kubeflow.test_ir_pipeline import DRIVER, compile_package, make_runner

pytestmark = pytest.mark.slow

BUCKET = "gs://bucket"


@pytest.fixture()
def staging_into_the_bucket_folder(monkeypatch):
    """Returns a function that points compile's gs://bucket writes at a directory's bucket
    folder (where the IR runner's pods read gs://bucket)."""

    def point_at(directory) -> None:
        def stage_remote(uri, folder, files, manifest):
            assert uri.startswith(BUCKET + "/"), uri
            local = str(directory / "gcs" / "bucket") + uri[len(BUCKET) :]
            user_code_lib._stage_local(local, folder, files, manifest)

        monkeypatch.setattr(user_code_lib, "_stage_remote", stage_remote)

    return point_at


def _user_module(spec: dict, task: str) -> dict | None:
    """The user_module exec property of a compiled task (None when it has none)."""
    parameters = spec["root"]["dag"]["tasks"][task]["inputs"].get("parameters", {})
    value = parameters.get("user_module", {}).get("runtimeValue", {}).get("constant")
    return json.loads(value) if value else None


def _spec(package: str) -> dict:
    with open(package) as handle:
        return next(yaml.safe_load_all(handle))


def _model_dir(runner: ir_runner.IRRunner, result: ir_runner.RunResult) -> str:
    return os.path.join(
        runner.local(result.tasks["Trainer"].outputs["model"]["uri"]), "Format-Serving"
    )


def _saved_graph(model_dir: str) -> bytes:
    """The SavedModel's graph (op names keep the Keras model's and layers' name scopes)."""
    with open(os.path.join(model_dir, "saved_model.pb"), "rb") as handle:
        return handle.read()


def _variable_shapes(model_dir: str) -> list[list[int]]:
    import tensorflow as tf

    path = os.path.join(model_dir, "variables", "variables")
    return [shape for _, shape in tf.train.list_variables(path)]


def test_a_hook_module_reaches_the_trainer_pod_and_its_behaviour_is_the_cache_key(
    tmp_path, staging_into_the_bucket_folder
):
    """A cold run of the compiled pipeline with --module_file (the model hook) up to the
    Trainer, a rerun after a comment edit (recompiled: every component a cache hit), and a
    partial run to the Trainer after a behaviour edit (recompiled: the Trainer reruns and trains
    the edited model)."""
    staging_into_the_bucket_folder(tmp_path)
    folder = tmp_path / "my_code"
    folder.mkdir()
    module = folder / "penguin_hook.py"
    shutil.copy(os.path.join(PROJECT_ROOT, "examples", "penguin_hook.py"), module)
    package = compile_package(tmp_path, f"--module_file={module}")
    spec = _spec(package)
    staged = _user_module(spec, "Trainer")
    assert staged is not None and staged["module"] == "penguin_hook"
    # Nothing of this machine's paths in the pipeline file (nor in the cache key).
    assert staged["source"] == "penguin_hook.py"
    assert str(tmp_path) not in (tmp_path / "pipeline.yaml").read_text()
    assert staged["uri"] == f"{BUCKET}/tfx/_user_code/{staged['digest']}"
    # Only the Trainer runs it (the project's preprocessing_fn, the default EvalConfig).
    assert _user_module(spec, "Transform") is None and _user_module(spec, "Evaluator") is None
    staged_dir = tmp_path / "gcs" / "bucket" / "tfx" / "_user_code" / staged["digest"]
    assert (staged_dir / "penguin_hook.py").read_text() == module.read_text()

    # Up to the Trainer, the one task that runs the hook: the hook model's evaluation and push
    # run on real KFP (test_local_cluster_kfp_training.py: the pushed SavedModel is the hook's)
    # and under run_local.py (tests/test_e2e_user_code.py).
    cold = make_runner(tmp_path, package, {}).run(until={"Trainer"})
    assert {"CsvExampleGen", "Transform", "ImportSchemaGen", "Trainer"} <= set(cold.tasks)
    assert set(cold.states().values()) == {"EXECUTED"}
    # The Trainer's pod built the user's model: its name, its residual block, its width.
    model_dir = _model_dir(make_runner(tmp_path, package, {}), cold)
    graph = _saved_graph(model_dir)
    assert b"penguin_residual/" in graph and b"layer_normalization" in graph
    # The residual block's width 24 -> 24 and the output over it, 24 -> 3 species.
    assert [24, 24] in _variable_shapes(model_dir) and [24, 3] in _variable_shapes(model_dir)

    # A comment edit: the same syntax tree, the same staged directory, the same cache key.
    module.write_text(module.read_text() + "\n# Tried width 32 on Tuesday: no better.\n")
    commented = compile_package(tmp_path, f"--module_file={module}")
    assert _user_module(_spec(commented), "Trainer") == staged
    rerun = make_runner(tmp_path, commented, {}).run(until={"Trainer"})
    assert set(rerun.tasks) == set(cold.tasks)
    assert rerun.states() == {
        DRIVER: "EXECUTED",
        **{name: "CACHED" for name in set(cold.tasks) - {DRIVER}},
    }
    assert rerun.tasks["Trainer"].fingerprint == cold.tasks["Trainer"].fingerprint

    # A behaviour edit: a new digest, a new staged directory, a new cache key for the Trainer
    # (and so for what reads its model); what comes before it is a cache hit.
    module.write_text(module.read_text().replace('get("width", 24)', 'get("width", 12)'))
    edited = compile_package(tmp_path, f"--module_file={module}")
    edited_module = _user_module(_spec(edited), "Trainer")
    assert edited_module is not None and edited_module["digest"] != staged["digest"]
    partial = make_runner(tmp_path, edited, {}).run(until={"Trainer"})
    # The Trainer and what it needs (BaselineModel, Evaluator and Pusher are not needed).
    assert partial.states() == {
        DRIVER: "EXECUTED",
        **{name: "CACHED" for name in set(partial.tasks) - {DRIVER, "Trainer"}},
        "Trainer": "EXECUTED",
    }
    assert {"CsvExampleGen", "Transform", "ImportSchemaGen"} <= set(partial.tasks)
    assert partial.tasks["Trainer"].fingerprint != cold.tasks["Trainer"].fingerprint
    assert partial.tasks["Transform"].fingerprint == cold.tasks["Transform"].fingerprint
    edited_shapes = _variable_shapes(_model_dir(make_runner(tmp_path, edited, {}), partial))
    assert [12, 12] in edited_shapes and [12, 3] in edited_shapes
    assert [24, 24] not in edited_shapes
    # Both Trainer copies stay staged (the running pipeline's and the new one's).
    assert {staged["digest"], edited_module["digest"]} <= set(os.listdir(staged_dir.parent))


def test_a_tfx_style_module_runs_in_the_transform_and_trainer_pods(
    tmp_path, staging_into_the_bucket_folder
):
    """TFX's own contract through the compiled pipeline: the module's preprocessing_fn in the
    Transform pod, its run_fn with TFX's FnArgs in the Trainer pod (train steps from the
    embedded dataset's rows, known at compile time), the default EvalConfig for a user's model
    blessing it and the Pusher pushing it."""
    staging_into_the_bucket_folder(tmp_path)
    module = os.path.join(PROJECT_ROOT, "examples", "penguin_tfx_style.py")
    package = compile_package(
        tmp_path, f"--module_file={module}", '--custom_config={"hidden": [12]}'
    )
    spec = _spec(package)
    transform_module, trainer_module = (
        _user_module(spec, "Transform"),
        _user_module(spec, "Trainer"),
    )
    assert transform_module is not None and trainer_module is not None
    # One module, staged per role: Transform's copy is keyed without run_fn, the Trainer's
    # without preprocessing_fn (an edit to one does not rerun the other's component).
    assert transform_module["module"] == trainer_module["module"] == "penguin_tfx_style"
    assert transform_module["digest"] != trainer_module["digest"]
    runner = make_runner(tmp_path, package, {})
    result = runner.run()
    assert set(result.states().values()) == {"EXECUTED"}
    # Transform ran the module's preprocessing_fn: its vocabulary files, by its names.
    graph = runner.local(result.tasks["Transform"].outputs["transform_graph"]["uri"])
    assert {"island", "species"} <= set(os.listdir(os.path.join(graph, "transform_fn", "assets")))
    # The Trainer ran its run_fn: TFX-style signatures ("outputs", not the project's
    # "probabilities"), and the hidden layer --custom_config asked for.
    import tensorflow as tf

    loaded = tf.saved_model.load(_model_dir(runner, result))
    assert set(loaded.signatures["serving_default"].structured_outputs) == {"outputs"}
    assert "transform_features" in loaded.signatures
    # The output layer over the one hidden layer of 12 units.
    assert [12, 3] in _variable_shapes(_model_dir(runner, result))
    assert result.tasks["Evaluator"].outputs["blessing"]["metadata"]["blessed"] == 1
    assert result.tasks["Pusher"].outputs["pushed_model"]["metadata"]["pushed"] == 1
