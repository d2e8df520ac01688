"""Compile the pipeline for Kubeflow Pipelines v2: the same create_pipeline(config) as the local
runner, compiled with TFX's KubeflowV2DagRunner, then written as a KFP pipeline file that the
open-source KFP backend runs (container executors only: the Evaluator's baseline comes from the
BaselineModel component, not a resolver).

The config differs from a local run's only where Kubeflow needs it: data_root becomes a runtime
parameter of the compiled pipeline. What is added to the pipeline create_pipeline() returns:
  - per-component resources as each component's platform config (a KFP ResourceSpec: CPU and
    memory limits and requests, `nvidia.com/gpu` for the Trainer), which the compiler copies
    into the container spec;
  - the Trainer's image is the GPU image, every other component's the project's image.
For multi-worker strategies the launcher (a TFJob or a TrainJob: image, replicas' resources, GPU
pool, policies) is part of the config's training settings, which create_pipeline() writes into
the Trainer's custom_config like every other training setting; the Trainer's pod then only
follows the job and gets KubeflowConfig.watcher_resources (CPU only).

After compiling, ExampleGen gets the driver TFX runs before it locally, as a task of its own
(kubeflow.example_gen_driver, never cached): it fingerprints the files under data_root and hands
span, fingerprint and resolved input config to ExampleGen as parameters, which KFP's cache key
includes. An unchanged data_root is then a cache hit for every component; new or changed files
rerun ExampleGen and everything downstream.

The output is the KFP IR YAML the Kubeflow Pipelines API accepts: the PipelineSpec, then a
PlatformSpec document (kfp-kubernetes' format) with the GPU pods' node selector and tolerations
and, with --pvc_name, the volume mounted in every pod.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
from typing import Any

from components.ml import features
from components.training.settings import GPU_RESOURCE, LocalLauncherConfig
from kubeflow.config import (
    IMAGE_DIGITS_DIR,
    IMAGE_PROJECT_DIR,
    IMAGE_SITE_PACKAGES,
    KubeflowConfig,
    Resources,
)
from pipeline import datasets, fingerprints, flags, tuning
from pipeline.config import ConfigError, DatasetConfig, PipelineConfig

TRAINER_ID = "Trainer"
# --tune: TFX's Tuner, a task of its own; its trials train the Trainer's model, so it gets the
# Trainer's image and resources. Its parallel workers (--tune_workers) are the replicas of a job
# of the Trainer's launcher (--launcher tfjob|trainjob: worker 0 KerasTuner's oracle chief,
# components.training.tuner_job), the Tuner's pod following it with the watcher's resources, or
# with --launcher local processes in its pod beside the chief
# (components.tfx_components.tuner.distributed).
TUNER_ID = "Tuner"
# The container command of every TFX task (TFX's compiler adds the args): the project's entry
# point, TFX's kubeflow_v2_run_executor with each input's TFX type restored from the compiled
# inputDefinitions (kubeflow/run_executor.py: KFP's driver and kfp.local send other types).
EXECUTOR_COMMAND = ["python", "-m", "kubeflow.run_executor"]
# Runtime parameter of the compiled pipeline: where the raw data is read from.
DATA_ROOT_PARAMETER = "data_root"
# The ExampleGen driver's task (kubeflow/example_gen_driver.py) and what it hands ExampleGen.
DRIVER_COMMAND = ["python", "-m", "kubeflow.example_gen_driver"]
# Not "-driver": KFP's Argo compiler names its own driver step of task T "T-driver"
# (backend/src/v2/compiler/argocompiler/container.go), and KFP's API server refuses a Workflow
# with two nodes of one name ("duplicated nodeName CsvExampleGen-driver"; kfp_check argo).
DRIVER_SUFFIX = "-span"
INPUT_BASE, INPUT_CONFIG = "input_base", "input_config"
DRIVER_OUTPUTS = {"span": "NUMBER_INTEGER", "input_fingerprint": "STRING", INPUT_CONFIG: "STRING"}
# What TFX's executors can write artifacts to: TensorFlow 2.16's own file systems.
OBJECT_STORE_ROOT = re.compile(r"^gs://[^/?]+(/[^?]*)?$")
S3_SCHEMES = ("s3://", "minio://")
# Pipeline roots KFP's launcher moves artifacts for: TFX's executors work on the launcher's local
# copies (/minio/BUCKET/..., /s3/BUCKET/...; kubeflow/run_executor.py), never on the store.
LAUNCHER_ROOT = re.compile(r"^(s3|minio)://[^/?]+(/[^?]*)?$")


def image_path(local_path: str) -> str:
    """Where a file of the project or of an installed package lies inside the images."""
    local_path = os.path.abspath(local_path)
    site_packages = _site_packages()
    if local_path.startswith(site_packages + os.sep):
        return f"{IMAGE_SITE_PACKAGES}/{os.path.relpath(local_path, site_packages)}"
    if local_path.startswith(datasets.SCHEMAS_DIR + os.sep):
        # The image copies schemas/ next to the installed project.
        return f"{IMAGE_PROJECT_DIR}/{os.path.relpath(local_path, datasets.PROJECT_ROOT)}"
    raise ConfigError(
        f"invalid configuration: {local_path} is a local file the cluster cannot read; curated "
        "schemas go under schemas/<dataset>/ (shipped in the image), data under an "
        "object-store URI (gs://, s3://) or a path on a volume mounted in the pods"
    )


def local_path(path_in_image: str) -> str:
    """The inverse of image_path(): this machine's copy of a file the image carries (the
    project's schemas, installed packages); other paths as they are."""
    for prefix, local in (
        (f"{IMAGE_PROJECT_DIR}/schemas", datasets.SCHEMAS_DIR),
        (IMAGE_SITE_PACKAGES, _site_packages()),
    ):
        if path_in_image.startswith(prefix + "/"):
            return local + path_in_image[len(prefix) :]
    return path_in_image


def known_rows(choice: flags.DatasetChoice) -> int | None:
    """The rows of an embedded dataset, which this machine has (what a user's run_fn gets
    its fn_args.train_steps from); None for users' data, which only the pods read."""
    from pipeline import preflight
    from pipeline.datasets import images

    if choice.kind == datasets.DIGITS:
        return images.DIGITS_COUNT
    if choice.kind == datasets.PENGUINS:
        facts = preflight.check_dataset(
            datasets.local_dataset(choice, ""),
            choice.delimiter,
            choice.keep_columns,
            choice.keep_text_columns,
        )
        return facts.rows - facts.rows_without_label
    return None


def _site_packages() -> str:
    import palmerpenguins

    return os.path.dirname(os.path.dirname(os.path.abspath(palmerpenguins.__file__)))


def kubeflow_dataset(choice: flags.DatasetChoice) -> DatasetConfig:
    """The dataset the dataset flags chose (pipeline.flags), as the pods see it. Default: the
    penguins CSV inside the image; digits: the JPEG class folders written into the image at
    build time. Users' data: CSV files or image class folders under a URI or mounted path, with
    a curated schema from schemas/ (no inference on the cluster)."""
    from pipeline import preflight

    if choice.kind == datasets.DIGITS:
        schema_path = _shipped_schema(
            datasets.DIGITS, choice.schema or datasets.curated_schema_path(datasets.DIGITS)
        )
        return _image_dataset(datasets.DIGITS, IMAGE_DIGITS_DIR, schema_path, choice.image_size)
    if choice.kind == "images":
        images = choice.location
        assert images is not None, "flags.dataset_choice sets the location of images and CSVs"
        name = choice.name or os.path.basename(images.rstrip("/")) or "images"
        schema_path = _curated_schema(
            name, choice.schema, "image dataset", "run locally once with --images"
        )
        return _image_dataset(name, images, schema_path, choice.image_size)
    if choice.kind == datasets.PENGUINS:
        dataset = datasets.local_dataset(choice, "")
        schema_path = _shipped_schema(datasets.PENGUINS, choice.schema or dataset.schema_path)
        # The same file the image carries: task, delimiter, exclusions and types checked here.
        facts = preflight.check_dataset(
            dataset, choice.delimiter, choice.keep_columns, choice.keep_text_columns
        )
        return dataclasses.replace(
            preflight.resolved(dataset, facts),
            data_root=image_path(dataset.data_root),
            schema_path=image_path(schema_path),
            schema_digest=fingerprints.file_digest(schema_path),
        )
    data_root, label = choice.location, choice.label
    # flags.dataset_choice sets both for CSV data (--data needs --label).
    assert data_root is not None and label is not None, "CSV data without location or label"
    name = choice.name or os.path.basename(data_root.rstrip("/")) or "csv"
    schema_path = _curated_schema(name, choice.schema, "dataset", "run locally once")
    # The CSV columns are read in the schema's order on the cluster (no local file to look at).
    settings = preflight.cluster_csv_settings(
        label, schema_path, choice.task, choice.delimiter, choice.exclude_columns
    )
    return DatasetConfig(
        name=name,
        data_root=data_root,
        label_key=label,
        schema_path=image_path(schema_path),
        schema_digest=fingerprints.file_digest(schema_path),
        **settings,
    )


def _shipped_schema(name: str, schema_path: str | None) -> str:
    """--schema, else the curated schema the project ships for its embedded dataset `name`."""
    if schema_path is None:
        raise ConfigError(
            f"invalid configuration: no schema for dataset {name!r}: schemas/{name}/schema.pbtxt "
            "ships with the project and is missing (reinstall it), and no --schema was given"
        )
    return schema_path


def _curated_schema(name: str, schema_path: str | None, what: str, how: str) -> str:
    """--schema, else schemas/<name>/schema.pbtxt: the cluster infers none."""
    schema_path = schema_path or datasets.curated_schema_path(name)
    if not schema_path:
        raise ConfigError(
            f"invalid configuration: no curated schema for {what} {name!r} (--schema or "
            f"schemas/{name}/schema.pbtxt); {how} to infer and review one"
        )
    return schema_path


def _image_dataset(name: str, data_root: str, schema_path: str, image_size: int):
    """An image dataset whose schema is checked to describe what the image ExampleGen writes
    (the image bytes and the label): a CSV schema would fail only on the cluster, in Transform."""
    from pipeline import preflight

    try:
        schema = preflight.load_schema(schema_path)
    except (OSError, ValueError) as error:
        raise ConfigError(f"invalid --schema: {error}") from None
    missing = preflight.missing_image_features(schema, features.IMAGE_LABEL_KEY)
    if missing:
        raise ConfigError(
            f"invalid --schema {schema_path}: an image dataset's schema needs the feature(s) "
            f"{missing} the image ExampleGen writes"
        )
    return DatasetConfig(
        name=name,
        data_root=data_root,
        label_key=features.IMAGE_LABEL_KEY,
        schema_path=image_path(schema_path),
        schema_digest=fingerprints.file_digest(schema_path),
        kind="images",
        image_size=image_size,
    )


def resource_spec(resources: Resources):
    """A KFP ResourceSpec: CPU in cores and memory in GB (limits = requests), GPUs."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec()
    if resources.cpu:
        spec.cpu_limit = spec.cpu_request = float(resources.cpu)
    if resources.memory_gb:
        spec.memory_limit = spec.memory_request = float(resources.memory_gb)
    if resources.gpus:
        spec.accelerator.type = GPU_RESOURCE
        spec.accelerator.count = resources.gpus
    return spec


def trains_in_trainer_pod(config: PipelineConfig) -> bool:
    """Single-worker strategies, and clusters of processes in the Trainer's own pod."""
    training = config.training
    return not training.needs_cluster or isinstance(training.launcher, LocalLauncherConfig)


def watcher_resources(kubeflow: KubeflowConfig) -> Resources:
    """The Trainer pod's resources when a job's pods train: the watcher's, capped by the
    Trainer's own (a 0 there, no request, stays 0)."""
    watcher, trainer = kubeflow.watcher_resources, kubeflow.trainer_resources
    return Resources(
        cpu=min(watcher.cpu, trainer.cpu), memory_gb=min(watcher.memory_gb, trainer.memory_gb)
    )


def attach_platform(tfx_pipeline, config: PipelineConfig, kubeflow: KubeflowConfig):
    """Per-component resources, on the pipeline create_pipeline() returned."""
    from tfx.dsl.components.base import base_beam_component, base_component

    for component in tfx_pipeline.components:
        if not isinstance(component, base_component.BaseComponent):
            continue  # a node without a pod (an importer, say)
        if component.id == TUNER_ID:
            resources = kubeflow.trainer_resources
            if tuning.job_launcher(config) is not None:
                # Its workers and oracle chief are a job's pods (--tune_workers with the
                # Trainer's TFJob or TrainJob launcher); the Tuner's pod only follows them.
                resources = kubeflow.watcher_resources
        elif component.id == TRAINER_ID:
            resources = kubeflow.trainer_resources
            if not trains_in_trainer_pod(config):
                # The launcher's pods train; the Trainer's pod only follows them: a small
                # CPU-only request, so it needs no GPU node either; never more than
                # --trainer_cpu / --trainer_memory_gb (0: no request, as for every task).
                resources = watcher_resources(kubeflow)
        elif isinstance(component, base_beam_component.BaseBeamComponent):
            resources = kubeflow.beam_resources
        else:
            resources = kubeflow.default_resources
        component.with_platform_config(resource_spec(resources))
    return tfx_pipeline


def _reads_raw_data(component) -> bool:
    from tfx.types import standard_component_specs

    return standard_component_specs.INPUT_BASE_KEY in component.exec_properties


def gpu_executors(pipeline_spec: dict) -> list[str]:
    executors = pipeline_spec["deploymentSpec"]["executors"]
    return sorted(
        name
        for name, executor in executors.items()
        if executor.get("container", {}).get("resources", {}).get("accelerator")
    )


def platform_spec(pipeline_spec: dict, kubeflow: KubeflowConfig) -> dict | None:
    """Kubernetes settings per executor (kfp-kubernetes' format): the GPU pool's node selector
    and tolerations for every executor that requests GPUs; the PVC (--pvc_name) mounted in every
    executor, since every component reads or writes a path that may lie on it (data_root is a
    run-time parameter, the Pusher and BaselineModel use the serving directory)."""
    pool = kubeflow.gpu_pool
    gpu_config: dict[str, object] = {}  # nodeSelector: {labels: ...}, tolerations: [...]
    if pool.node_selector:
        gpu_config["nodeSelector"] = {"labels": dict(pool.node_selector)}
    if pool.tolerations:
        gpu_config["tolerations"] = [t.kubernetes() for t in pool.tolerations]
    gpu_labels = set(gpu_executors(pipeline_spec)) if gpu_config else set()
    executors: dict[str, dict] = {}
    for label in sorted(pipeline_spec["deploymentSpec"]["executors"]):
        executor_config = copy.deepcopy(gpu_config) if label in gpu_labels else {}
        if kubeflow.pvc_name:
            executor_config["pvcMount"] = [
                {
                    # Both forms: pvcNameParameter for KFP >= 2.4, constant for older backends.
                    "constant": kubeflow.pvc_name,
                    "pvcNameParameter": {"runtimeValue": {"constant": kubeflow.pvc_name}},
                    "mountPath": kubeflow.mount_path,
                }
            ]
        if executor_config:
            executors[label] = executor_config
    if not executors:
        return None
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": executors}}}}


def _on_volume(path: str, kubeflow: KubeflowConfig) -> bool:
    mount = kubeflow.mount_path.rstrip("/")
    return bool(mount) and (path == mount or path.startswith(mount + "/"))


def check_pipeline_root(root: str, flag: str = "--pipeline_root") -> None:
    """A pipeline root both KFP's launcher and TFX's executors (TensorFlow 2.16) can use: gs://
    (TensorFlow writes it), or minio:// / s3:// (the launcher downloads inputs to and uploads
    outputs from local paths in the pod, where kubeflow/run_executor.py runs TFX's executor)."""
    if LAUNCHER_ROOT.match(root) or OBJECT_STORE_ROOT.match(root):
        return
    raise ConfigError(
        f"invalid {flag} {root}: Kubeflow Pipelines' launcher accepts only object-"
        "store pipeline roots: gs://BUCKET[/PATH], or minio://BUCKET[/PATH] / s3://BUCKET[/PATH]"
        " (the KFP installation's object store, e.g. minio://mlpipeline/v2/artifacts); a volume "
        "(--pvc_name, --mount_path) can hold --data_root and --serving_model_dir, not the "
        "pipeline root"
    )


def check_storage(config: PipelineConfig, kubeflow: KubeflowConfig) -> None:
    """Refuses, naming the flag, any location the pods could not read or write.

    KFP's launcher accepts only object-store pipeline roots (gs://, s3://, minio://: it fails
    the task otherwise). TFX's executors write artifacts through TensorFlow's file systems,
    which have gs:// and local paths but no s3:// in this stack (TensorFlow 2.16 moved S3 to
    tensorflow-io, which the lock does not pin) and no minio:// at all; under an s3:// or
    minio:// root the launcher moves the artifacts and the executors use its local copies. What
    no launcher moves (the serving directory, which the Pusher writes and BaselineModel reads;
    data; the user's module) is gs:// or a path on the mounted volume."""
    check_pipeline_root(config.pipeline_root)
    # A job's pods cannot read KFP's launcher's copies in the Trainer's (Tuner's) own pod.
    job = "Tuner" if tuning.job_launcher(config) is not None else ""
    job = "Trainer" if not trains_in_trainer_pod(config) else job
    if LAUNCHER_ROOT.match(config.pipeline_root) and job and not kubeflow.pvc_name:
        tune = f" with --tune_workers {config.tuning.workers}" if job == "Tuner" else ""
        raise ConfigError(
            f"invalid --launcher {config.training.launcher.KIND}{tune}: under the pipeline root "
            f"{config.pipeline_root} the {job}'s inputs exist only as KFP's launcher's copies "
            f"in the {job}'s pod, which the job's pods cannot read; give --pvc_name and "
            f"--mount_path (a volume the {job} stages them on for the job)"
        )
    serving = config.serving_model_dir
    if not (OBJECT_STORE_ROOT.match(serving) or _on_volume(serving, kubeflow)):
        where = f" or a path under --mount_path {kubeflow.mount_path}" if kubeflow.pvc_name else ""
        why = (
            " (TensorFlow has no s3:// or minio:// file system here, and KFP's launcher moves"
            " only artifacts; the default is <pipeline_root>/serving_model)"
            if serving.startswith(S3_SCHEMES)
            else ""
        )
        raise ConfigError(
            f"invalid --serving_model_dir {serving}: the Pusher and BaselineModel pods share it"
            f"{why}; use gs://BUCKET/PATH{where}"
        )
    data_root = config.dataset.data_root
    flag = "--images" if config.dataset.is_images else "--data_root"
    if not (OBJECT_STORE_ROOT.match(data_root) or data_root.startswith("/")):
        raise ConfigError(
            f"invalid {flag} {data_root}: the pods read gs://BUCKET/PATH, a path inside the "
            "image, or a path on the volume mounted at --mount_path"
            + (
                " (s3:// has no TensorFlow file system here)"
                if data_root.startswith(S3_SCHEMES)
                else ""
            )
        )


def add_example_gen_driver(
    pipeline_spec: dict, example_gen_id: str, driver_class_path: str, resources
) -> str:
    """Puts ExampleGen's driver in front of it as an uncached task; ExampleGen then takes span,
    input fingerprint and the resolved input config from it, so its cache key changes exactly
    when the input files do. Returns the driver's task name."""
    tasks = pipeline_spec["root"]["dag"]["tasks"]
    example_gen_task = tasks[example_gen_id]
    component_name = example_gen_task["componentRef"]["name"]
    component = pipeline_spec["components"][component_name]
    executors = pipeline_spec["deploymentSpec"]["executors"]
    example_gen_container = executors[component["executorLabel"]]["container"]

    driver = f"{example_gen_id}{DRIVER_SUFFIX}"
    executors[f"{driver}_executor"] = {
        "container": {
            "image": example_gen_container["image"],
            "command": list(DRIVER_COMMAND),
            "args": ["--driver_class_path", driver_class_path, "--executor_input", "{{$}}"],
            "resources": resource_spec_dict(resources),
        }
    }
    pipeline_spec["components"][driver] = {
        "executorLabel": f"{driver}_executor",
        "inputDefinitions": {
            "parameters": {
                INPUT_BASE: {"parameterType": "STRING"},
                INPUT_CONFIG: {"parameterType": "STRING"},
            }
        },
        "outputDefinitions": {
            "parameters": {name: {"parameterType": kind} for name, kind in DRIVER_OUTPUTS.items()}
        },
    }
    parameters = example_gen_task["inputs"]["parameters"]
    tasks[driver] = {
        "taskInfo": {"name": driver},
        "componentRef": {"name": driver},
        "inputs": {
            "parameters": {
                INPUT_BASE: copy.deepcopy(parameters[INPUT_BASE]),
                INPUT_CONFIG: copy.deepcopy(parameters[INPUT_CONFIG]),
            }
        },
        # It reads the files under data_root, which KFP's cache key cannot see.
        "cachingOptions": {"enableCache": False},
    }
    for name in DRIVER_OUTPUTS:
        parameters[name] = {
            "taskOutputParameter": {"producerTask": driver, "outputParameterKey": name}
        }
    example_gen_task["dependentTasks"] = sorted(
        {*example_gen_task.get("dependentTasks", []), driver}
    )
    definitions = component["inputDefinitions"]["parameters"]
    for name, kind in DRIVER_OUTPUTS.items():
        definitions[name] = {"parameterType": kind}
    # TFX's entry point types the execution properties from this copy of the inputs spec.
    args = example_gen_container["args"]
    position = args.index("--json_serialized_inputs_spec_args") + 1
    inputs_spec = json.loads(args[position])
    inputs_spec["parameters"] = copy.deepcopy(definitions)
    args[position] = json.dumps(inputs_spec, indent=2, sort_keys=True)
    return driver


def user_code_root(given: str | None, config: PipelineConfig, kubeflow: KubeflowConfig) -> str:
    """Where compile stages the user's module (pipeline.user_code.stage): --user_code_root, else
    <pipeline_root>/_user_code. The pods read it, so it is gs:// or a path on the volume
    (--pvc_name at --mount_path); and this machine writes it, so a volume path needs the volume
    mounted here at the same path (a notebook or job pod of the cluster)."""
    from pipeline import user_code

    root = (given or user_code.staging_root(config.pipeline_root)).rstrip("/")
    if root.startswith(S3_SCHEMES) or not (
        OBJECT_STORE_ROOT.match(root) or _on_volume(root, kubeflow)
    ):
        where = f", or a path under --mount_path {kubeflow.mount_path}" if kubeflow.pvc_name else ""
        raise ConfigError(
            f"invalid --user_code_root {root}: every pod imports --module_file from there, so it "
            f"is a gs:// URI (default: <pipeline_root>/{user_code.STAGING_DIR}){where}"
        )
    if "://" not in root and not os.path.isdir(kubeflow.mount_path):
        raise ConfigError(
            f"invalid --user_code_root {root}: --pvc_name {kubeflow.pvc_name} is not mounted on "
            f"this machine at --mount_path {kubeflow.mount_path}, so compile cannot stage "
            "--module_file there; compile where the volume is mounted at that path (a notebook "
            "or job pod of the cluster), or drop --user_code_root to stage under the gs:// "
            f"pipeline root ({user_code.staging_root(config.pipeline_root)})"
        )
    return root


def stage_user_code(
    config: PipelineConfig, kubeflow: KubeflowConfig, root: str | None = None
) -> PipelineConfig:
    """The config with the user's module staged where every pod imports it from (a new
    directory per behaviour of the module: its digest, which is in each task's cache key)."""
    from pipeline import user_code

    if not config.user_code.module_path:
        return config
    target = user_code_root(root, config, kubeflow)
    remedy = (
        "compile writes the module there for the pods: give this machine write access (gcloud "
        "auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS for a service "
        "account that may write the bucket), or stage it elsewhere with --user_code_root "
        "(gs://, or a path under --mount_path where the volume is mounted here)"
        if "://" in target
        else f"compile writes the module there for the pods: make {target} writable here"
    )
    staged = user_code.stage(config.user_code, config.pipeline_root, target, remedy)
    assert staged.modules, "stage() names the staged modules"
    # Its file name only, for the pods' messages: the compiled pipeline (and the cache key,
    # which has every exec property) is then the same from any checkout on any machine.
    source = os.path.basename(staged.module_path)
    modules = tuple(
        (role, dataclasses.replace(module, source=source)) for role, module in staged.modules
    )
    return dataclasses.replace(config, user_code=dataclasses.replace(staged, modules=modules))


def resource_spec_dict(resources: Resources) -> dict:
    from google.protobuf import json_format

    return json_format.MessageToDict(resource_spec(resources))


def compile_pipeline(
    config: PipelineConfig,
    kubeflow: KubeflowConfig,
    output_path: str,
    user_code_root: str | None = None,
) -> dict[str, Any]:
    """Writes the KFP pipeline file, the user's module staged first (stage_user_code) once
    everything else is valid; returns the PipelineSpec (and PlatformSpec) as dicts."""
    import yaml
    from tfx.orchestration import data_types
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as v2
    from tfx.orchestration.kubeflow.v2.pipeline_builder import DEFAULT_IMAGE_PATH_KEY

    from pipeline import builder

    config.validate()
    kubeflow.validate()
    check_storage(config, kubeflow)
    config = stage_user_code(config, kubeflow, user_code_root)
    data_root = data_types.RuntimeParameter(
        name=DATA_ROOT_PARAMETER, ptype=str, default=config.dataset.data_root
    )
    runtime_config = dataclasses.replace(
        config, dataset=dataclasses.replace(config.dataset, data_root=data_root)
    )
    tfx_pipeline = attach_platform(builder.create_pipeline(runtime_config), config, kubeflow)
    images = {
        DEFAULT_IMAGE_PATH_KEY: kubeflow.image,
        TRAINER_ID: kubeflow.gpu_image,
        TUNER_ID: kubeflow.gpu_image,
    }
    runner = v2.KubeflowV2DagRunner(
        config=v2.KubeflowV2DagRunnerConfig(
            display_name=config.pipeline_name,
            default_image=images,
            default_commands=EXECUTOR_COMMAND,
            # Schema 2.1 (parameterType, defaultValue), as the KFP 2.x SDK and backend use.
            use_pipeline_spec_2_1=True,
        )
    )
    job = runner.run(tfx_pipeline, write_out=False)
    pipeline_spec = job["pipelineSpec"]
    # TFX keeps a runtime parameter's default in the PipelineJob's runtime config, which the KFP
    # API does not take: put it on the pipeline's input, where the UI and runs find it.
    root_inputs = pipeline_spec["root"]["inputDefinitions"]["parameters"]
    root_inputs[DATA_ROOT_PARAMETER]["defaultValue"] = config.dataset.data_root
    # The KFP API reads the pipeline root from the spec (a run may override it).
    pipeline_spec["defaultPipelineRoot"] = config.pipeline_root
    for component in tfx_pipeline.components:
        if component.id in pipeline_spec["root"]["dag"]["tasks"] and _reads_raw_data(component):
            driver_class = component.driver_class
            add_example_gen_driver(
                pipeline_spec,
                component.id,
                f"{driver_class.__module__}.{driver_class.__name__}",
                kubeflow.default_resources,
            )
    documents = [pipeline_spec]
    platform = platform_spec(pipeline_spec, kubeflow)
    if platform:
        documents.append(platform)
    parent = os.path.dirname(os.path.abspath(output_path))
    os.makedirs(parent, exist_ok=True)
    with open(output_path, "w") as handle:
        yaml.safe_dump_all(documents, handle, sort_keys=True)
    staged = config.user_code if config.user_code.modules else None
    return {"pipeline_spec": pipeline_spec, "platform_spec": platform, "user_code": staged}
