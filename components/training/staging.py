"""Staging a training task's inputs and outputs on the job's volume, for the Kubernetes launchers.

Under a minio:// or s3:// pipeline root, KFP's launcher downloads the Trainer's input artifacts
into its own pod (`/minio/BUCKET/...`, `/s3/BUCKET/...`; kubeflow/run_executor.py maps the
URIs) and uploads its outputs from there when the Trainer ends. A TFJob's or TrainJob's pods see
none of that pod's files. So, when the task names such paths and the job mounts a volume
(--pvc_name at --mount_path), the Trainer copies the inputs the job reads (the examples' shards,
the transform graph; for a user's run_fn every input artifact) into a folder of this execution
on the volume, `<mount_path>/tfx-scaleout-staging/<job name>/`, points the task at the copies
and at output folders there, and after the job succeeded copies the outputs (the serving model,
the model run: metrics, logs, backups) back to its own output paths, which the launcher then
uploads. The folder is removed afterwards, whatever the outcome. Without a volume such a task is
refused with one line saying to give --pvc_name and --mount_path.
"""

from __future__ import annotations

import dataclasses
import json
import logging as std_logging
import os
import shutil
from typing import Any

from components import PROGRESS_LOGGER
from components.training.cluster import ClusterError

progress_log = std_logging.getLogger(PROGRESS_LOGGER)

# KFP's launcher's local copies of object-store artifacts (kubeflow/pipelines 2.14.3
# backend/src/v2/component/launcher_v2.go LocalPathForURI; kubeflow/run_executor.LAUNCHER_PATHS).
POD_LOCAL_PREFIXES = ("/minio/", "/s3/")
STAGING_DIR = "tfx-scaleout-staging"


class StagingError(ClusterError):
    """The task's files cannot be made visible to the job's pods."""


def pod_local(path: str) -> bool:
    return path.startswith(POD_LOCAL_PREFIXES)


def _artifact_uris(artifact_dict_json: str) -> list[str]:
    """The URIs of TFX's artifact dict as JSON (artifact_utils.jsonify_artifact_dict)."""
    uris = []
    for listed in json.loads(artifact_dict_json).values():
        for artifact in json.loads(listed) if isinstance(listed, str) else listed:
            entry = json.loads(artifact) if isinstance(artifact, str) else artifact
            uri = (entry.get("artifact") or entry).get("uri", "")
            if uri:
                uris.append(uri)
    return uris


def task_paths(task) -> tuple[list[str], list[str]]:
    """(inputs the job reads, outputs it writes) of a TrainTask, a user's RunFnTask or the
    Tuner's job (its TunerTask file; what that file names is read by the job's pods)."""
    if hasattr(task, "tuner_task"):
        return [task.tuner_task], []
    if hasattr(task, "train_files"):
        inputs = [*task.train_files, *task.eval_files, task.transform_output]
        return inputs, [task.serving_model_dir, task.model_run_dir]
    return _artifact_uris(task.input_dict), [
        *_artifact_uris(task.output_dict),
        task.model_run_dir,
    ]


def _mapped(value: Any, folder: str) -> Any:
    """`value` with every pod-local path (in strings, lists, dicts, and JSON held in strings)
    moved under `folder`."""
    if isinstance(value, str):
        if pod_local(value):
            return folder + value
        if value[:1] in "[{":
            try:
                return json.dumps(_mapped(json.loads(value), folder))
            except ValueError:
                return value
        return value
    if isinstance(value, list):
        return [_mapped(item, folder) for item in value]
    if isinstance(value, dict):
        return {key: _mapped(item, folder) for key, item in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class Staged:
    """A task whose pod-local paths lie under `folder` on the job's volume."""

    task: Any
    folder: str
    outputs: tuple[str, ...]  # the Trainer's own output paths, copied back from the folder

    def staged(self, path: str) -> str:
        return self.folder + path

    def copy_back(self) -> None:
        for output in self.outputs:
            source = self.staged(output)
            if os.path.isdir(source):
                shutil.copytree(source, output, dirs_exist_ok=True)
        progress_log.info(
            "copied the job's outputs from %s back to %s", self.folder, ", ".join(self.outputs)
        )

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def stage(task, job_name: str, mount_path: str, pvc_name: str, launcher: str) -> Staged | None:
    """Copies the task's pod-local inputs to this execution's folder on the volume and returns the
    task pointed there; None when the task names no pod-local path (its files are on the volume
    or in an object store the pods reach)."""
    inputs, outputs = task_paths(task)
    local_inputs = [path for path in inputs if pod_local(path)]
    local_outputs = tuple(path for path in outputs if pod_local(path))
    if not local_inputs and not local_outputs:
        return None
    if hasattr(task, "tuner_task"):
        raise StagingError(
            f"the Tuner's workers cannot run as a {launcher} job under a minio:// or s3:// "
            f"pipeline root: its search and inputs exist only in the Tuner's pod "
            f"({local_inputs[0]}); run them as processes in that pod (--launcher local, or "
            "--tune_workers 1) or use a pipeline root the job's pods reach (gs://)"
        )
    if not mount_path:
        example = (local_inputs or list(local_outputs))[0]
        raise StagingError(
            f"the {launcher} job's pods cannot read the Trainer's inputs: under a minio:// or "
            f"s3:// pipeline root they exist only in the Trainer's pod (e.g. {example}); give "
            "--pvc_name and --mount_path (a volume the Trainer stages them on for the job)"
        )
    folder = os.path.join(mount_path, STAGING_DIR, job_name)
    try:
        shutil.rmtree(folder, ignore_errors=True)  # an earlier attempt of this execution
        os.makedirs(folder)
        for path in local_inputs:
            target = folder + path
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.isdir(path):
                shutil.copytree(path, target, dirs_exist_ok=True)
            else:
                shutil.copyfile(path, target)
        for path in local_outputs:
            os.makedirs(folder + path, exist_ok=True)
    except OSError as error:
        shutil.rmtree(folder, ignore_errors=True)
        raise StagingError(
            f"cannot stage the {launcher} job's inputs on --pvc_name {pvc_name} at {folder}: "
            f"{error}; the Trainer's pod must be able to create folders under "
            f"{os.path.join(mount_path, STAGING_DIR)} (make it writable for the pods' user)"
        ) from None
    staged_task = dataclasses.replace(
        task,
        **{
            field.name: _mapped(getattr(task, field.name), folder)
            for field in dataclasses.fields(task)
            if field.name not in ("settings", "user_module", "user_config")
        },
    )
    size = sum(
        os.path.getsize(os.path.join(where, name))
        for path in local_inputs
        for where, _, names in (os.walk(folder + path) if os.path.isdir(path) else [])
        for name in names
    ) + sum(os.path.getsize(folder + path) for path in local_inputs if os.path.isfile(path))
    progress_log.info(
        "staged %d input(s) of the %s job (%.1f MB) in %s on %s",
        len(local_inputs),
        launcher,
        size / 1e6,
        folder,
        pvc_name,
    )
    return Staged(staged_task, folder, local_outputs)
