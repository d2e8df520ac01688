"""--tune compiled for Kubeflow: TFX's Tuner as a task of its own (the project's executor, the
Trainer's image and resources, its settings and the built-in search space in its custom_config)
whose best_hyperparameters the Trainer's task takes as its hyperparameters input; with the
TFJob launcher (Kubeflow's default) its parallel workers are a job of that launcher."""

from __future__ import annotations

import json

from google.protobuf import json_format

from kubeflow import compile as compiler
from tests.kubeflow.test_compile import GPU_IMAGE, _compile, _container, _task_parameter

TUNER_EXECUTOR = "components.tfx_components.tuner.executor.Executor"


def test_tuner_is_a_task_feeding_the_trainer(tmp_path_factory):
    """--launcher local: the Tuner's workers are processes in its pod, which gets the Trainer's
    resources."""
    spec, platform, _ = _compile(
        tmp_path_factory,
        "tune",
        "--gpus=1",
        "--tune",
        "--tune_workers=2",
        "--max_trials=4",
        "--tune_steps=20",
        "--launcher=local",
        '--custom_config={"tune_space": {"width": [8, 16]}}',
    )
    tasks = spec.root.dag.tasks
    assert "Tuner" in tasks and "Trainer" in tasks
    container = _container(spec, "Tuner")
    assert container.image == GPU_IMAGE
    assert list(container.command) == compiler.EXECUTOR_COMMAND
    args = list(container.args)
    assert args[args.index("--executor_class_path") + 1] == TUNER_EXECUTOR
    trainer = _container(spec, "Trainer").resources
    assert (container.resources.cpu_limit, container.resources.accelerator.count) == (
        trainer.cpu_limit,
        trainer.accelerator.count,
    )
    # The Tuner reads Transform's outputs and the Trainer reads the Tuner's best point.
    assert set(tasks["Tuner"].dependent_tasks) >= {"Transform"}
    hyperparameters = tasks["Trainer"].inputs.artifacts["hyperparameters"]
    assert hyperparameters.task_output_artifact.producer_task == "Tuner"
    assert hyperparameters.task_output_artifact.output_artifact_key == "best_hyperparameters"
    config = json.loads(_task_parameter(spec, "Tuner", "custom_config"))
    assert config["tuning"] == {"max_trials": 4, "workers": 2, "max_restarts": 2}
    assert config["tune_space"]["width"] == [8, 16]
    assert _task_parameter(spec, "Tuner", "tuner_fn") == "components.training.tuning.tuner_fn"
    # The search space is the Tuner's only: the Trainer's custom_config has no tune_space.
    assert "tune_space" not in _task_parameter(spec, "Trainer", "custom_config")
    train_args = json.loads(_task_parameter(spec, "Tuner", "train_args"))
    assert train_args["num_steps"] == 20
    # On the GPU pool like the Trainer (it requests the Trainer's GPUs).
    executors = json_format.MessageToDict(platform.platforms["kubernetes"].deployment_spec)[
        "executors"
    ]
    assert spec.components["Tuner"].executor_label in executors


def test_tuner_workers_use_the_trainers_tfjob_launcher(tmp_path_factory):
    """Kubeflow's default launcher (tfjob) with --tune_workers 2: the Tuner's custom_config
    carries the TFJob settings the Trainer would use (the GPU image, the workers' GPUs), and the
    Tuner's pod only follows the job: the watcher's small CPU-only request, as a Trainer whose
    launcher trains has."""
    spec, _, _ = _compile(
        tmp_path_factory, "tune-tfjob", "--gpus=1", "--tune", "--tune_workers=2", "--max_trials=4"
    )
    config = json.loads(_task_parameter(spec, "Tuner", "custom_config"))
    launcher = config["tuning"]["launcher"]
    assert launcher["kind"] == "tfjob" and launcher["image"] == GPU_IMAGE
    assert launcher["worker"]["gpus"] == 1
    tuner = _container(spec, "Tuner").resources
    assert tuner.accelerator.count == 0 and tuner.cpu_limit < 2
    # The Trainer (a single-worker strategy) still trains in its own pod, with its GPU.
    assert _container(spec, "Trainer").resources.accelerator.count == 1
    # Without --tune_workers the Tuner searches in its pod: no launcher.
    spec, _, _ = _compile(tmp_path_factory, "tune-one", "--gpus=1", "--tune", "--max_trials=4")
    config = json.loads(_task_parameter(spec, "Tuner", "custom_config"))
    assert "launcher" not in config["tuning"]
    assert _container(spec, "Tuner").resources.accelerator.count == 1


def test_a_tuner_job_under_a_launcher_root_needs_the_volume(capsys, tmp_path_factory):
    """Under minio:// the Tuner's inputs are KFP's launcher's copies in its own pod: the job's
    pods read them staged on the volume (components.training.staging), so without --pvc_name
    compile refuses in one line; with it the Tuner's job settings carry the volume."""
    from kubeflow import run_kubeflow
    from tests.kubeflow.test_compile import IMAGE

    minio = "--pipeline_root=minio://mlpipeline/v2/artifacts"
    tune = ("--tune", "--tune_workers=2", "--max_trials=4")
    output = tmp_path_factory.mktemp("refused") / "p.yaml"
    argv = ["compile", minio, f"--image={IMAGE}", f"--gpu_image={GPU_IMAGE}", f"--output={output}"]
    assert run_kubeflow.main([*argv, *tune]) == run_kubeflow.EXIT_BAD_INPUT
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: invalid --launcher tfjob with --tune_workers 2: under the pipeline root "
        "minio://mlpipeline/v2/artifacts the Tuner's inputs exist only as KFP's launcher's "
        "copies in the Tuner's pod, which the job's pods cannot read; give --pvc_name and "
        "--mount_path (a volume the Tuner stages them on for the job)"
    ]
    assert not output.exists()
    volume = ("--pvc_name=shared", "--mount_path=/mnt/shared")
    serving = "--serving_model_dir=/mnt/shared/serving"
    spec, _, _ = _compile(tmp_path_factory, "tune-minio", minio, *volume, serving, *tune)
    launcher = json.loads(_task_parameter(spec, "Tuner", "custom_config"))["tuning"]["launcher"]
    assert (launcher["pvc_name"], launcher["mount_path"]) == ("shared", "/mnt/shared")
    # --launcher local keeps the workers in the Tuner's pod: nothing to stage, no volume needed.
    gcs = "--serving_model_dir=gs://bucket/serving"
    _compile(tmp_path_factory, "tune-minio-local", minio, gcs, *tune, "--launcher=local")
