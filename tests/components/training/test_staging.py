"""components.training.staging: a training task's KFP-launcher-local files (/minio/..., /s3/...)
staged on the job's volume and its outputs copied back. The launcher's local folder is a
temporary folder here (POD_LOCAL_PREFIXES patched); the job through a real TFJob on KFP:
tests/kubeflow/test_local_cluster_kfp_training.py."""

from __future__ import annotations

import dataclasses
import json
import os
from unittest import mock

import pytest

from components.training import staging
from components.training.loop import TrainTask
from components.training.run_fn_task import RunFnTask


@pytest.fixture
def pod(tmp_path):
    """The Trainer pod's launcher folder (as /minio/) and the volume's mount, both folders."""
    local = tmp_path / "minio"
    mount = tmp_path / "volume"
    mount.mkdir()
    with mock.patch.object(staging, "POD_LOCAL_PREFIXES", (f"{local}/",)):
        yield local, mount


def _write(path, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    return str(path)


def _task(local) -> TrainTask:
    examples = local / "b" / "Transform" / "transformed_examples"
    graph = local / "b" / "Transform" / "transform_graph"
    _write(graph / "transform_fn" / "saved_model.pb", "graph")
    return TrainTask(
        train_files=[_write(examples / "Split-train" / "part-0.gz", "train")],
        eval_files=[_write(examples / "Split-eval" / "part-0.gz", "eval")],
        transform_output=str(graph),
        serving_model_dir=str(local / "b" / "Trainer" / "model" / "Format-Serving"),
        model_run_dir=str(local / "b" / "Trainer" / "model_run"),
        label_key="species",
    )


def test_inputs_are_copied_outputs_point_to_the_volume_and_come_back(pod):
    local, mount = pod
    task = _task(local)
    staged = staging.stage(task, "tfx-train-abc", str(mount), "claim", "tfjob")
    assert staged is not None
    folder = f"{mount}/{staging.STAGING_DIR}/tfx-train-abc"
    assert staged.folder == folder
    job_task = staged.task
    assert job_task.train_files == [folder + task.train_files[0]]
    with open(job_task.train_files[0]) as handle:
        assert handle.read() == "train"
    with open(os.path.join(job_task.transform_output, "transform_fn", "saved_model.pb")) as h:
        assert h.read() == "graph"
    assert job_task.serving_model_dir == folder + task.serving_model_dir
    assert os.path.isdir(job_task.model_run_dir)
    assert (job_task.label_key, job_task.settings) == (task.label_key, task.settings)
    # What the job writes ...
    _write(os.path.join(job_task.serving_model_dir, "saved_model.pb"), "model")
    _write(os.path.join(job_task.model_run_dir, "training_result.json"), "{}")
    staged.copy_back()
    staged.remove()
    # ... is where the Trainer's launcher uploads from; the staging folder is gone.
    with open(os.path.join(task.serving_model_dir, "saved_model.pb")) as handle:
        assert handle.read() == "model"
    assert os.path.exists(os.path.join(task.model_run_dir, "training_result.json"))
    assert not os.path.exists(folder)


def test_a_task_on_the_volume_or_a_store_is_not_staged(pod, tmp_path):
    _, mount = pod
    task = TrainTask(
        train_files=["gs://bucket/Split-train/part-0.gz"],
        eval_files=[f"{mount}/Split-eval/part-0.gz"],
        transform_output="gs://bucket/graph",
        serving_model_dir=f"{mount}/serving",
        model_run_dir=f"{mount}/run",
        label_key="species",
    )
    assert staging.stage(task, "tfx-train-abc", str(mount), "claim", "tfjob") is None


def test_without_a_volume_it_is_one_line_saying_to_give_pvc_name(pod):
    local, _ = pod
    with pytest.raises(staging.StagingError) as raised:
        staging.stage(_task(local), "tfx-train-abc", "", "", "tfjob")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("the tfjob job's pods cannot read the Trainer's inputs")
    assert message.endswith(
        "give --pvc_name and --mount_path (a volume the Trainer stages them on for the job)"
    )


def test_a_folder_it_cannot_create_is_named(pod):
    """(A file in the staging folder's place: refused for root too, as a read-only folder is for
    the pods' user.)"""
    local, mount = pod
    _write(mount / staging.STAGING_DIR, "not a folder")
    with pytest.raises(staging.StagingError) as raised:
        staging.stage(_task(local), "tfx-train-abc", str(mount), "claim", "tfjob")
    message = str(raised.value)
    assert message.startswith(
        "cannot stage the tfjob job's inputs on --pvc_name"
        f" claim at {mount}/{staging.STAGING_DIR}/tfx-train-abc: "
    ), message
    assert message.endswith("(make it writable for the pods' user)"), message


def test_a_run_fn_tasks_artifact_uris_are_staged(pod):
    """A user's run_fn: its input and output artifacts (TFX's artifact dicts as JSON)."""
    local, mount = pod
    examples = local / "b" / "Transform" / "transformed_examples"
    _write(examples / "Split-train" / "part-0.gz", "train")
    model = local / "b" / "Trainer" / "model"

    def artifact_dict(key: str, uri: str) -> str:
        entry = {"artifact": {"uri": uri, "typeId": "1"}, "artifact_type": {"name": "Examples"}}
        return json.dumps({key: json.dumps([entry])})

    task = RunFnTask(
        run_fn="module.run_fn",
        input_dict=artifact_dict("examples", str(examples)),
        output_dict=artifact_dict("model", str(model)),
        exec_properties=json.dumps({"custom_config": "{}"}),
        model_run_dir=str(local / "b" / "Trainer" / "model_run"),
    )
    staged = staging.stage(task, "tfx-train-abc", str(mount), "claim", "tfjob")
    assert staged is not None
    folder = staged.folder
    assert staging._artifact_uris(staged.task.input_dict) == [folder + str(examples)]
    assert staging._artifact_uris(staged.task.output_dict) == [folder + str(model)]
    assert os.path.exists(folder + str(examples / "Split-train" / "part-0.gz"))
    assert staged.outputs == (str(model), task.model_run_dir)


def _tuner_job(local, tmp_path):
    """The Tuner's job as the Tuner's executor hands it to a launcher (distributed's own task
    writer), its artifacts and staged user module in the launcher's folder."""
    from tfx.types import standard_artifacts

    from components import user_code
    from components.tfx_components.tuner import distributed
    from components.training import tuner_job

    examples = local / "b" / "Transform" / "transformed_examples"
    _write(examples / "Split-train" / "part-0.gz", "train")
    graph = local / "b" / "Transform" / "transform_graph"
    _write(graph / "transform_fn" / "saved_model.pb", "g")
    _write(local / "b" / "Schema" / "schema" / "schema.pbtxt", "feature {}")
    module = local / "b" / "_user_code" / "abc123"
    _write(module / "tuner_module.py", "def tuner_fn(fn_args): ...")
    run = local / "b"
    uris = {
        "examples": (standard_artifacts.Examples, examples),
        "transform_graph": (standard_artifacts.TransformGraph, graph),
        "schema": (standard_artifacts.Schema, run / "Schema" / "schema"),
        "best_hyperparameters": (standard_artifacts.HyperParameters, run / "Tuner" / "best"),
        "tuner_results": (standard_artifacts.TunerResults, run / "Tuner" / "results"),
    }
    artifacts = {}
    for key, (kind, uri) in uris.items():
        artifacts[key] = [kind()]
        artifacts[key][0].uri = str(uri)
    properties = {
        "tuner_fn": "tuner_module.tuner_fn",
        "custom_config": "{}",
        user_code.USER_MODULE_KEY: user_code.UserModule(
            "tuner_module", str(module), "abc123"
        ).to_json(),
    }
    working_dir = str(uris["tuner_results"][1] / "search")
    os.makedirs(working_dir)
    inputs = {k: artifacts[k] for k in ("examples", "transform_graph", "schema")}
    outputs = {k: artifacts[k] for k in ("best_hyperparameters", "tuner_results")}
    task_path = distributed._save_task(inputs, outputs, properties, working_dir, 4)  # noqa: SLF001
    return tuner_job.TunerJobTask(task_path, working_dir), uris, module


def test_a_tuner_jobs_search_is_staged_and_its_results_come_back(pod, tmp_path):
    """What every replica reads (the transformed examples, the transform graph, the schema, the
    user module the exec properties name) is copied to the volume, the replicas' TunerTask names
    only the copies, and what the chief writes (TFX's best hyperparameters, the search folder
    in TunerResults) comes back to the Tuner's outputs; the staging folder is removed."""
    from tfx.types import artifact_utils

    from components import user_code
    from components.tfx_components.tuner import distributed, search

    local, mount = pod
    task, uris, module = _tuner_job(local, tmp_path)
    with staging.staged_task(task, "tfx-tune-abc", str(mount), "claim", "tfjob") as job_task:
        folder = f"{mount}/{staging.STAGING_DIR}/tfx-tune-abc"
        assert job_task.tuner_task == f"{folder}/{staging.TUNER_TASK_FILE}"
        assert job_task.model_run_dir == folder + task.model_run_dir
        staged = search.TunerTask.load(job_task.tuner_task)
        # TFX's own parser reads the staged artifact dicts: every URI on the volume, copied.
        inputs = artifact_utils.parse_artifact_dict(staged.input_dict)
        assert {k: a.uri for k, [a] in inputs.items()} == {
            k: folder + str(uris[k][1]) for k in ("examples", "transform_graph", "schema")
        }
        with open(inputs["examples"][0].uri + "/Split-train/part-0.gz") as handle:
            assert handle.read() == "train"
        assert os.path.exists(inputs["schema"][0].uri + "/schema.pbtxt")
        properties = json.loads(staged.exec_properties)
        moved = user_code.from_exec_properties(properties)
        assert moved.uri == folder + str(module)
        assert os.path.isfile(os.path.join(moved.uri, "tuner_module.py"))
        outputs = artifact_utils.parse_artifact_dict(staged.output_dict)
        assert outputs["tuner_results"][0].uri == folder + str(uris["tuner_results"][1])
        assert staged.working_dir == folder + task.model_run_dir and staged.max_trials == 4
        written = json.dumps(dataclasses.asdict(staged))
        assert written.count(str(local)) == written.count(folder + str(local)) > 0
        # What the chief writes on the volume ...
        _write(os.path.join(outputs["best_hyperparameters"][0].uri, "best_hyperparameters.txt"),
               '{"values": {"width": 8}}')  # fmt: skip
        _write(os.path.join(staged.working_dir, distributed.SUMMARY_FILE), '{"trials": 4}')
        _write(os.path.join(staged.working_dir, "trial_0", "trial.json"), "{}")
    # ... is in the Tuner's outputs, which KFP's launcher uploads; the volume's folder is gone.
    with open(uris["best_hyperparameters"][1] / "best_hyperparameters.txt") as handle:
        assert json.load(handle) == {"values": {"width": 8}}
    assert distributed._read_summary(task.model_run_dir) == {"trials": 4}  # noqa: SLF001
    assert os.path.exists(os.path.join(task.model_run_dir, "trial_0", "trial.json"))
    # The search's own task file still names the Tuner's paths (not the staged copy's).
    assert search.TunerTask.load(task.tuner_task).working_dir == task.model_run_dir
    assert not os.path.exists(folder)


def test_a_failed_tuner_job_copies_nothing_back_and_removes_the_folder(pod, tmp_path):
    local, mount = pod
    task, _, _ = _tuner_job(local, tmp_path)
    folder = f"{mount}/{staging.STAGING_DIR}/tfx-tune-abc"
    staged = staging.staged_task(task, "tfx-tune-abc", str(mount), "claim", "tfjob")
    with pytest.raises(RuntimeError, match="the job failed"), staged as job_task:
        _write(os.path.join(job_task.model_run_dir, "trial_0", "trial.json"), "{}")
        raise RuntimeError("the job failed")
    assert not os.path.exists(os.path.join(task.model_run_dir, "trial_0"))
    assert not os.path.exists(folder)


def test_a_tuner_job_without_a_volume_is_one_line_saying_to_give_pvc_name(pod, tmp_path):
    """Off a pod-local root the Tuner's job is left as it is; on one without a volume it is
    refused, naming the flags."""
    from components.training.tuner_job import TunerJobTask

    local, mount = pod
    reachable = TunerJobTask("gs://bucket/tuner/search/tuner_task.json", "gs://bucket/tuner/search")
    assert staging.stage(reachable, "tfx-tune-1", str(mount), "claim", "tfjob") is None
    task, _, _ = _tuner_job(local, tmp_path)
    with pytest.raises(staging.StagingError) as raised:
        staging.stage(task, "tfx-tune-1", "", "", "trainjob")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        f"the trainjob job's pods cannot read the Tuner's inputs: under a minio:// or s3:// "
        f"pipeline root they exist only in the Tuner's pod (e.g. {task.tuner_task})"
    )
    assert "give --pvc_name and --mount_path (a volume the Tuner stages them on" in message
