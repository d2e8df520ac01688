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


def test_a_tuner_job_under_a_pod_local_root_is_one_clear_line():
    """The Tuner's job reads a TunerTask file whose own paths the job's pods must reach: off a
    pod-local root it is left as it is; on one it is refused, naming what to do."""
    from components.training.tuner_job import TunerJobTask

    fields = {f.name: None for f in dataclasses.fields(TunerJobTask)}
    reachable = TunerJobTask(**{**fields, "tuner_task": "gs://bucket/tuner/search/task.json"})
    assert staging.stage(reachable, "tfx-tune-1", "/mnt", "claim", "tfjob") is None
    local = TunerJobTask(**{**fields, "tuner_task": "/minio/mlpipeline/x/search/task.json"})
    with pytest.raises(staging.StagingError, match=r"--launcher local, or --tune_workers 1"):
        staging.stage(local, "tfx-tune-1", "/mnt", "claim", "tfjob")
