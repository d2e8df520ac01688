"""The Kubeflow compile: the same create_pipeline(config) compiled by KubeflowV2DagRunner into a
KFP IR file that parses strictly into kfp-pipeline-spec's protos, with every component's image,
command, resources, the Beam runner's arguments and the TFJob launcher settings."""

from __future__ import annotations

import json

import pytest
import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from components.training.settings import TFJobConfig
from kubeflow import compile as compiler
from kubeflow import run_kubeflow
from kubeflow.config import IMAGE_DIGITS_DIR, IMAGE_PROJECT_DIR, IMAGE_SITE_PACKAGES
from pipeline import config as config_lib
from pipeline import flags

# Pinned by digest, as the compiler requires (a tag is refused: see the test below).
IMAGE = "registry.example.com/tfx-scaleout@sha256:" + "1" * 64
GPU_IMAGE = "registry.example.com/tfx-scaleout-gpu:1.0@sha256:" + "2" * 64
BEAM_COMPONENTS = ("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator")
COMPONENTS = (
    *BEAM_COMPONENTS,
    "ImportSchemaGen",
    "ExampleValidator",
    "Trainer",
    "Pusher",
    "BaselineModel",
)
DRIVER = "CsvExampleGen-span"
EXECUTORS = {
    "CsvExampleGen": "components.tfx_components.example_gen.executor.Executor",
    "BaselineModel": "components.tfx_components.baseline_model.executor.Executor",
    "Evaluator": "components.tfx_components.evaluator.executor.Executor",
    "Transform": "components.tfx_components.transform.executor.Executor",
    "ExampleValidator": "components.tfx_components.validation.executor.Executor",
    "Trainer": "components.tfx_components.trainer.executor.Executor",
}


def _compile(tmp_path_factory, name: str, *flags: str):
    output = tmp_path_factory.mktemp(name) / "pipeline.yaml"
    argv = [
        "compile",
        "--pipeline_root=gs://bucket/tfx",
        f"--image={IMAGE}",
        f"--gpu_image={GPU_IMAGE}",
        f"--output={output}",
        *flags,
    ]
    assert run_kubeflow.main(argv) == 0
    with open(output) as handle:
        documents = list(yaml.safe_load_all(handle))
    # Strict: an unknown or misspelled field fails the parse.
    spec = json_format.ParseDict(documents[0], pipeline_spec_pb2.PipelineSpec())
    platform = (
        json_format.ParseDict(documents[1], pipeline_spec_pb2.PlatformSpec())
        if len(documents) > 1
        else None
    )
    assert len(documents) <= 2
    return spec, platform, output


@pytest.fixture(scope="module")
def flink_gpu(tmp_path_factory):
    """Single-worker mirrored on 2 GPUs in the Trainer's pod, Beam on Flink."""
    return _compile(
        tmp_path_factory,
        "flink",
        "--gpus=2",
        "--node_selector=cloud.google.com/gke-accelerator=nvidia-l4",
        "--toleration=nvidia.com/gpu",
        "--toleration=dedicated=ml:NoSchedule",
        "--beam_runner=flink",
        "--flink_master=flink-jobmanager:8081",
        "--beam_parallelism=4",
        f"--sdk_container_image={IMAGE}",
        "--epochs=3",
    )


@pytest.fixture(scope="module")
def tfjob_dataflow(tmp_path_factory):
    """Parameter-server training as a TFJob, Beam on Dataflow."""
    return _compile(
        tmp_path_factory,
        "tfjob",
        "--strategy=parameter_server",
        "--workers=4",
        "--ps=2",
        "--gpus=1",
        "--tfjob_namespace=ml",
        "--pvc_name=pipeline-root",
        "--mount_path=/mnt/pipeline",
        "--beam_runner=dataflow",
        "--dataflow_project=my-project",
        "--dataflow_region=europe-west4",
        "--dataflow_temp_location=gs://bucket/tmp",
        f"--sdk_container_image={IMAGE}",
    )


def _container(spec, task: str):
    """The task's container, parsed strictly from the spec's deployment Struct."""
    deployment = json_format.ParseDict(
        json_format.MessageToDict(spec.deployment_spec),
        pipeline_spec_pb2.PipelineDeploymentConfig(),
    )
    label = spec.components[spec.root.dag.tasks[task].component_ref.name].executor_label
    return deployment.executors[label].container


def _task_parameter(spec, task: str, name: str) -> str:
    return spec.root.dag.tasks[task].inputs.parameters[name].runtime_value.constant.string_value


def test_every_component_with_image_command_and_executor(flink_gpu):
    spec, _, _ = flink_gpu
    assert spec.pipeline_info.name == "penguins-pipeline"
    assert spec.schema_version == "2.1.0"
    assert spec.default_pipeline_root == "gs://bucket/tfx"
    assert set(spec.root.dag.tasks) == {*COMPONENTS, DRIVER}
    assert list(_container(spec, DRIVER).command) == compiler.DRIVER_COMMAND
    for task in COMPONENTS:
        container = _container(spec, task)
        assert container.image == (GPU_IMAGE if task == "Trainer" else IMAGE), task
        assert list(container.command) == compiler.EXECUTOR_COMMAND
        if task in EXECUTORS:
            args = list(container.args)
            assert args[args.index("--executor_class_path") + 1] == EXECUTORS[task]


def test_trainer_requests_gpus_on_the_gpu_pool(flink_gpu):
    spec, platform, _ = flink_gpu
    resources = _container(spec, "Trainer").resources
    assert (resources.accelerator.type, resources.accelerator.count) == ("nvidia.com/gpu", 2)
    assert (resources.cpu_limit, resources.memory_limit) == (8, 32)
    for task in BEAM_COMPONENTS:
        beam = _container(spec, task).resources
        assert (beam.cpu_limit, beam.memory_limit, beam.accelerator.count) == (4, 16, 0)
    assert _container(spec, "Pusher").resources.cpu_limit == 1
    executors = json_format.MessageToDict(platform.platforms["kubernetes"].deployment_spec)[
        "executors"
    ]
    label = spec.components["Trainer"].executor_label
    assert list(executors) == [label]
    assert executors[label] == {
        "nodeSelector": {"labels": {"cloud.google.com/gke-accelerator": "nvidia-l4"}},
        "tolerations": [
            # Without :EFFECT a toleration matches every effect of the taint.
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        ],
    }
    config = json.loads(_task_parameter(spec, "Trainer", "custom_config"))
    assert config["strategy"] == "mirrored" and config["epochs"] == 3
    assert config["launcher"] == {"kind": "local"}  # trains in its own pod


def test_beam_components_get_the_flink_args(flink_gpu):
    spec, _, _ = flink_gpu
    expected = [
        "--runner=FlinkRunner",
        "--flink_master=flink-jobmanager:8081",
        "--parallelism=4",
        # One SDK harness per job, not per stage (pipeline.beam.runners).
        "--environment_cache_millis=60000",
        "--environment_type=DOCKER",
        f"--environment_config={IMAGE}",
    ]
    for task in BEAM_COMPONENTS:
        args = list(_container(spec, task).args)
        assert args[-len(expected) :] == expected, task


def test_data_root_is_a_runtime_parameter_and_files_are_in_the_image(flink_gpu):
    spec, _, _ = flink_gpu
    parameter = spec.root.input_definitions.parameters["data_root"]
    assert parameter.default_value.string_value == (f"{IMAGE_SITE_PACKAGES}/palmerpenguins/data")
    example_gen = spec.root.dag.tasks["CsvExampleGen"].inputs.parameters["input_base"]
    assert example_gen.component_input_parameter == "data_root"
    schema_file = _task_parameter(spec, "ImportSchemaGen", "schema_file")
    assert schema_file == f"{IMAGE_PROJECT_DIR}/schemas/penguins/schema.pbtxt"


def test_multi_worker_training_goes_to_a_tfjob(tfjob_dataflow):
    spec, platform, _ = tfjob_dataflow
    # The Trainer's pod only follows the TFJob: a small CPU-only request, no GPU pool either.
    resources = _container(spec, "Trainer").resources
    assert resources.accelerator.count == 0
    assert (resources.cpu_limit, resources.memory_limit) == (1, 2)
    executors = json_format.MessageToDict(platform.platforms["kubernetes"].deployment_spec)[
        "executors"
    ]
    trainer = executors.get(spec.components["Trainer"].executor_label, {})
    assert "nodeSelector" not in trainer and "tolerations" not in trainer
    config = json.loads(_task_parameter(spec, "Trainer", "custom_config"))
    assert (config["strategy"], config["workers"], config["ps"]) == ("parameter_server", 4, 2)
    assert config["launcher"]["kind"] == "tfjob"
    settings = TFJobConfig.from_dict(config["launcher"])
    settings.validate()
    assert (settings.image, settings.namespace) == (GPU_IMAGE, "ml")
    # The coordinator (chief) and parameter servers get no GPU.
    assert (settings.worker.gpus, settings.chief.gpus, settings.ps.gpus) == (1, 0, 0)
    assert settings.restart_policy == "ExitCode" and settings.service_account == ""
    assert (settings.pvc_name, settings.mount_path) == ("pipeline-root", "/mnt/pipeline")
    assert settings.gpu_pool.tolerations[0].key == "nvidia.com/gpu"


def test_beam_components_get_the_dataflow_args(tfjob_dataflow):
    spec, _, _ = tfjob_dataflow
    for task in BEAM_COMPONENTS:
        args = list(_container(spec, task).args)
        assert "--runner=DataflowRunner" in args
        assert {
            "--project=my-project",
            "--region=europe-west4",
            "--temp_location=gs://bucket/tmp",
            f"--sdk_container_image={IMAGE}",
        } <= set(args)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--node_selector=pool"], "invalid --node_selector 'pool': expected NAME=VALUE"),
        (["--beam_runner=spark"], "beam.spark_master_url or beam.job_endpoint must be set"),
        (["--strategy=parameter_server"], "training.ps (--ps) must be >= 1"),
        (["--data_root=gs://bucket/csv"], "--label is required with --data_root"),
        (
            ["--data_root=gs://bucket/mine", "--label=y"],
            "no curated schema for dataset 'mine'",
        ),
        (["--toleration=k=v:Sometimes"], "gpu_pool.tolerations effect must be one of"),
        (
            ["--images=gs://bucket/flowers", "--data_root=gs://bucket/csv"],
            "--images and --data_root are exclusive",
        ),
        (["--dataset=digits", "--images=gs://bucket/flowers"], "--dataset digits is an embedded"),
        (
            ["--images=gs://bucket/flowers", "--label=species"],
            "with --images the class folder names are the labels",
        ),
        (["--images=gs://bucket/flowers"], "no curated schema for image dataset 'flowers'"),
        (
            ["--images=gs://bucket/flowers", "--schema=schemas/penguins/schema.pbtxt"],
            "needs the feature(s) ['class_name', 'image']",
        ),
        (["--dataset=digits", "--image_size=16"], "dataset.image_size must be >= 32"),
    ],
)
def test_bad_flags_fail_before_compiling(capsys, tmp_path, flags, message):
    argv = [
        "compile",
        "--pipeline_root=gs://bucket/tfx",
        f"--image={IMAGE}",
        f"--gpu_image={GPU_IMAGE}",
        f"--output={tmp_path / 'p.yaml'}",
        *flags,
    ]
    assert run_kubeflow.main(argv) == run_kubeflow.EXIT_BAD_INPUT
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


def test_user_csv_with_curated_schema_reads_columns_in_schema_order(tmp_path):
    dataset = compiler.kubeflow_dataset(
        flags.DatasetChoice(
            "csv", location="gs://bucket/penguins/", label="species", name="penguins"
        )
    )
    assert dataset.data_root == "gs://bucket/penguins/"
    assert dataset.schema_path == f"{IMAGE_PROJECT_DIR}/schemas/penguins/schema.pbtxt"
    assert dict(dataset.column_types)["body_mass_g"] == "int"
    outside = tmp_path / "schema.pbtxt"
    outside.write_text("")
    with pytest.raises(compiler.ConfigError, match="local file the cluster cannot read"):
        compiler.image_path(str(outside))


def test_example_gen_is_cached_by_the_fingerprint_its_driver_task_computes(flink_gpu):
    """KFP runs no TFX driver: the driver is a task of its own, never cached, and hands the
    input fingerprint to ExampleGen as a parameter, which KFP's cache key includes."""
    spec, _, _ = flink_gpu
    tasks = spec.root.dag.tasks
    assert not tasks[DRIVER].caching_options.enable_cache
    assert tasks[DRIVER].inputs.parameters["input_base"].component_input_parameter == "data_root"
    example_gen = tasks["CsvExampleGen"]
    assert example_gen.caching_options.enable_cache
    assert DRIVER in example_gen.dependent_tasks
    for name in compiler.DRIVER_OUTPUTS:
        reference = example_gen.inputs.parameters[name].task_output_parameter
        assert (reference.producer_task, reference.output_parameter_key) == (DRIVER, name)
    assert all(tasks[name].caching_options.enable_cache for name in COMPONENTS)
    # TFX's entry point types execution properties from the inputs spec in the arguments.
    args = list(_container(spec, "CsvExampleGen").args)
    inputs_spec = json.loads(args[args.index("--json_serialized_inputs_spec_args") + 1])
    assert inputs_spec["parameters"]["span"] == {"parameterType": "NUMBER_INTEGER"}


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The embedded digits image dataset, read from the folders the project's image carries."""
    return _compile(tmp_path_factory, "digits", "--dataset=digits")


def test_digits_compiles_the_image_pipeline_reading_the_folders_in_the_image(digits):
    spec, _, _ = digits
    assert spec.pipeline_info.name == "digits-pipeline"
    image_components = {
        "ImageExampleGen",
        "ImageExampleGen-span",
        *(set(COMPONENTS) - {"CsvExampleGen"}),
    }
    assert set(spec.root.dag.tasks) == image_components
    args = list(_container(spec, "ImageExampleGen").args)
    assert (
        args[args.index("--executor_class_path") + 1]
        == "components.tfx_components.image_example_gen.executor.Executor"
    )
    assert _container(spec, "ImageExampleGen").image == IMAGE
    parameter = spec.root.input_definitions.parameters["data_root"]
    assert parameter.default_value.string_value == IMAGE_DIGITS_DIR
    input_base = spec.root.dag.tasks["ImageExampleGen"].inputs.parameters["input_base"]
    assert input_base.component_input_parameter == "data_root"
    schema_file = _task_parameter(spec, "ImportSchemaGen", "schema_file")
    assert schema_file == f"{IMAGE_PROJECT_DIR}/schemas/digits/schema.pbtxt"
    # Cached by the fingerprint of the image files its driver task computes.
    tasks = spec.root.dag.tasks
    assert tasks["ImageExampleGen"].caching_options.enable_cache
    assert not tasks["ImageExampleGen-span"].caching_options.enable_cache
    fingerprint = tasks["ImageExampleGen"].inputs.parameters["input_fingerprint"]
    assert fingerprint.task_output_parameter.producer_task == "ImageExampleGen-span"
    transform = json.loads(_task_parameter(spec, "Transform", "custom_config"))
    # Images stream one file per Beam bundle (flat memory) unless --transform_shards is set.
    assert (transform["image_size"], transform["num_output_shards"]) == (32, 0)
    assert transform["label_key"] == "class_name"
    trainer = json.loads(_task_parameter(spec, "Trainer", "custom_config"))
    assert trainer["image_model"] == "small_cnn"
    assert trainer["learning_rate"] == config_lib.IMAGE_LEARNING_RATE


def test_user_images_under_a_uri_with_a_curated_schema(tmp_path_factory):
    spec, _, _ = _compile(
        tmp_path_factory,
        "flowers",
        "--images=gs://bucket/flowers/",
        "--schema=schemas/digits/schema.pbtxt",
        "--image_size=96",
        "--image_model=mobilenet_v2",
        "--transform_shards=4",
        "--learning_rate=0.0005",
    )
    assert spec.pipeline_info.name == "flowers-pipeline"
    parameter = spec.root.input_definitions.parameters["data_root"]
    assert parameter.default_value.string_value == "gs://bucket/flowers/"
    transform = json.loads(_task_parameter(spec, "Transform", "custom_config"))
    assert (transform["image_size"], transform["num_output_shards"]) == (96, 4)
    trainer = json.loads(_task_parameter(spec, "Trainer", "custom_config"))
    assert (trainer["image_model"], trainer["learning_rate"]) == ("mobilenet_v2", 0.0005)


def test_images_must_be_pinned_by_digest(tmp_path, capsys):
    """KFP caches by image reference: a tag rebuilt with new code would serve the old results."""
    argv = [
        "compile",
        "--pipeline_root=gs://bucket/tfx",
        "--image=registry.example.com/tfx-scaleout:1.0",
        f"--gpu_image={GPU_IMAGE}",
        f"--output={tmp_path / 'p.yaml'}",
    ]
    assert run_kubeflow.main(argv) == run_kubeflow.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "image must be pinned by digest (NAME@sha256:...)" in err
    assert "--allow_unpinned_images" in err and not (tmp_path / "p.yaml").exists()
    assert run_kubeflow.main([*argv, "--allow_unpinned_images"]) == 0
    with open(tmp_path / "p.yaml") as handle:
        spec = next(yaml.safe_load_all(handle))
    executors = spec["deploymentSpec"]["executors"].values()
    images = {e["container"]["image"] for e in executors if "container" in e}
    assert images == {"registry.example.com/tfx-scaleout:1.0", GPU_IMAGE}


def test_components_carry_cache_fingerprints_with_the_schema_shipped_in_the_image(flink_gpu):
    """KFP caches by a task's parameters too: the code, schema and stack fingerprint is one."""
    from pipeline import datasets, fingerprints

    spec, _, _ = flink_gpu
    transform = json.loads(_task_parameter(spec, "Transform", fingerprints.FINGERPRINT_KEY))
    assert "components/ml/preprocessing.py" in transform["code"]
    schema = json.loads(_task_parameter(spec, "ImportSchemaGen", fingerprints.FINGERPRINT_KEY))
    # Read from the local file the image ships (the compiled path is the image's).
    assert schema["schema"] == fingerprints.file_digest(datasets.penguins().schema_path)


@pytest.mark.slow
def test_compile_command_prints_no_tensorflow_cuda_noise(tmp_path):
    """`python kubeflow/run_kubeflow.py compile`, as a user types it: TensorFlow's CUDA wheels log
    three plugin-registration "errors" on import on a CPU-only machine; none reach the console."""
    import os
    import subprocess
    import sys

    from pipeline import PROJECT_ROOT

    output = tmp_path / "pipeline.yaml"
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(PROJECT_ROOT, "kubeflow", "run_kubeflow.py"),
            "compile",
            "--pipeline_root=gs://bucket/tfx",
            f"--image={IMAGE}",
            f"--gpu_image={GPU_IMAGE}",
            f"--output={output}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert f"compiled penguins-pipeline -> {output}" in result.stdout
    assert "Unable to register" not in result.stderr, result.stderr
    assert "cuda" not in result.stderr.lower(), result.stderr


def test_a_minio_root_with_no_requests_for_a_small_cluster(tmp_path_factory):
    """The KFP installation's object store as pipeline root (KFP's launcher moves the artifacts;
    kubeflow/run_executor.py maps them), and every request 0: no pod asks for CPU or memory."""
    spec, _, _ = _compile(
        tmp_path_factory,
        "minio",
        "--pipeline_root=minio://mlpipeline/v2/artifacts",
        "--serving_model_dir=gs://bucket/serving",
        "--gpus=0",
        *(
            f"--{kind}_{size}=0"
            for kind in ("beam", "trainer", "default")
            for size in ("cpu", "memory_gb")
        ),
    )
    assert spec.default_pipeline_root == "minio://mlpipeline/v2/artifacts"
    for task in (*COMPONENTS, DRIVER):
        resources = _container(spec, task).resources
        assert (resources.cpu_limit, resources.memory_limit, resources.accelerator.count) == (
            0,
            0,
            0,
        ), task
        assert resources.cpu_request == resources.memory_request == 0, task


def test_a_job_launcher_under_a_launcher_root_needs_the_volume(capsys, tmp_path):
    """Under minio:// the Trainer's inputs are KFP's launcher's copies in its own pod: a TFJob's
    pods could not read them without the volume the Trainer stages them on (one line)."""
    argv = [
        "compile",
        "--pipeline_root=minio://mlpipeline/v2/artifacts",
        f"--image={IMAGE}",
        f"--gpu_image={GPU_IMAGE}",
        "--strategy=multi_worker_mirrored",
        "--workers=2",
        f"--output={tmp_path / 'p.yaml'}",
    ]
    assert run_kubeflow.main(argv) == run_kubeflow.EXIT_BAD_INPUT
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: invalid --launcher tfjob: under the pipeline root minio://mlpipeline/v2/artifacts "
        "the Trainer's inputs exist only as KFP's launcher's copies in the Trainer's pod, which "
        "the job's pods cannot read; give --pvc_name and --mount_path (a volume the Trainer "
        "stages them on for the job)"
    ]
    assert not (tmp_path / "p.yaml").exists()


def test_the_trainer_watching_a_job_asks_for_no_more_than_trainer_cpu(tmp_path_factory):
    """With a TFJob the Trainer's pod only follows it (1 CPU, 2 GB), capped by
    --trainer_cpu / --trainer_memory_gb: 0 there is no request, as for every task."""
    spec, _, _ = _compile(
        tmp_path_factory,
        "minio-tfjob",
        "--pipeline_root=minio://mlpipeline/v2/artifacts",
        "--pvc_name=shared",
        "--mount_path=/mnt/shared",
        "--serving_model_dir=/mnt/shared/serving",
        "--strategy=multi_worker_mirrored",
        "--workers=2",
        "--gpus=0",
        "--trainer_cpu=0",
        "--trainer_memory_gb=1",
    )
    resources = _container(spec, "Trainer").resources
    assert (resources.cpu_request, resources.memory_request) == (0, 1)
