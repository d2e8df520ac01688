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

The Tuner's job (--tune_workers N with --launcher tfjob|trainjob, a TunerJobTask) is staged the
same way through its search's TunerTask file: the inputs every replica reads (the transformed
examples, the transform graph, the schema; any other launcher-local path the exec properties
name, such as a user module) are copied, a TunerTask naming the copies and output folders on
the volume is written there for the replicas, and after the job succeeded the Tuner's outputs
(best_hyperparameters, and TunerResults with the search folder `search/`: the trials, the
chief's summary) are copied back.
"""

from __future__ import annotations

import contextlib
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
# The Tuner's staged TunerTask, at the top of the staging folder (outside what is copied back, so
# the TunerResults output keeps the search's own task file, which names the Tuner's paths).
TUNER_TASK_FILE = "tuner_task.json"


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
    """(inputs the job reads, outputs it writes) of a TrainTask or a user's RunFnTask."""
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


def _pod_local_strings(value: Any) -> list[str]:
    """Every pod-local path in `value` (strings, lists, dicts, and JSON held in strings)."""
    if isinstance(value, str):
        if pod_local(value):
            return [value]
        if value[:1] in "[{":
            try:
                return _pod_local_strings(json.loads(value))
            except ValueError:
                return []
        return []
    if isinstance(value, list):
        return [path for item in value for path in _pod_local_strings(item)]
    if isinstance(value, dict):
        return [path for item in value.values() for path in _pod_local_strings(item)]
    return []


def _outermost(paths: list[str]) -> tuple[str, ...]:
    """The pod-local ones of `paths`, each once, without those inside another one."""
    local = sorted({path.rstrip("/") for path in paths if pod_local(path)})
    return tuple(path for path in local if not any(path.startswith(other + "/") for other in local))


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
    if hasattr(task, "tuner_task"):
        return _stage_tuner(task, job_name, mount_path, pvc_name, launcher)
    inputs, outputs = task_paths(task)
    local_inputs = [path for path in inputs if pod_local(path)]
    local_outputs = tuple(path for path in outputs if pod_local(path))
    if not local_inputs and not local_outputs:
        return None
    if not mount_path:
        raise _needs_volume(launcher, "Trainer", (local_inputs or list(local_outputs))[0])
    folder = _copy_in(local_inputs, local_outputs, mount_path, job_name, pvc_name, launcher)
    staged_task = dataclasses.replace(
        task,
        **{
            field.name: _mapped(getattr(task, field.name), folder)
            for field in dataclasses.fields(task)
            if field.name not in ("settings", "user_module", "user_config")
        },
    )
    return Staged(staged_task, folder, local_outputs)


def _needs_volume(launcher: str, role: str, example: str, instead: str = "") -> StagingError:
    """A job launcher with no volume to stage `role`'s (Trainer's, Tuner's) pod-local inputs on."""
    return StagingError(
        f"the {launcher} job's pods cannot read the {role}'s inputs: under a minio:// or s3:// "
        f"pipeline root they exist only in the {role}'s pod (e.g. {example}); give --pvc_name "
        f"and --mount_path (a volume the {role} stages them on for the job){instead}"
    )


def _stage_tuner(task, job_name: str, mount_path: str, pvc_name: str, launcher: str):
    """The Tuner's job: its search's TunerTask names what every replica reads and writes."""
    from components.tfx_components.tuner.search import TunerTask

    if not (pod_local(task.tuner_task) or pod_local(task.model_run_dir)):
        return None
    if not mount_path:
        raise _needs_volume(
            launcher,
            "Tuner",
            task.tuner_task,
            ", or keep its workers in the Tuner's pod (--launcher local)",
        )
    search = TunerTask.load(task.tuner_task)
    named = _pod_local_strings(json.loads(search.exec_properties))
    local_inputs = _outermost(
        [*_artifact_uris(search.input_dict), *(path for path in named if os.path.exists(path))]
    )
    local_outputs = _outermost([*_artifact_uris(search.output_dict), search.working_dir])
    folder = _copy_in(list(local_inputs), local_outputs, mount_path, job_name, pvc_name, launcher)
    staged_search = dataclasses.replace(
        search,
        input_dict=_mapped(search.input_dict, folder),
        output_dict=_mapped(search.output_dict, folder),
        exec_properties=_mapped(search.exec_properties, folder),
        working_dir=_mapped(search.working_dir, folder),
    )
    os.makedirs(_mapped(search.working_dir, folder), exist_ok=True)
    staged_search.save(os.path.join(folder, TUNER_TASK_FILE))
    staged_task = dataclasses.replace(
        task,
        tuner_task=os.path.join(folder, TUNER_TASK_FILE),
        model_run_dir=_mapped(task.model_run_dir, folder),
    )
    return Staged(staged_task, folder, local_outputs)


def _copy_in(
    local_inputs: list[str],
    local_outputs: tuple[str, ...],
    mount_path: str,
    job_name: str,
    pvc_name: str,
    launcher: str,
) -> str:
    """This execution's folder on the volume, with the inputs copied and the output folders
    made; a folder the pod cannot make is a StagingError naming it."""
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
            f"{error}; the pod must be able to create folders under "
            f"{os.path.join(mount_path, STAGING_DIR)} (make it writable for the pods' user)"
        ) from None
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
    return folder


@contextlib.contextmanager
def staged_task(task, job_name: str, mount_path: str, pvc_name: str, launcher: str):
    """The task the job runs: `task` itself, or its copy staged on the volume (stage()), whose
    outputs are copied back when the body ended without an error; the staging folder is removed
    whatever the outcome."""
    staged = stage(task, job_name, mount_path, pvc_name, launcher)
    try:
        yield staged.task if staged else task
        if staged:
            staged.copy_back()
    finally:
        if staged:
            staged.remove()
