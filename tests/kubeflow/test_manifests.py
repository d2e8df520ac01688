"""`run_kubeflow.py manifests`: the compile flags, and every Kubernetes object the chosen launcher
would create printed as multi-document YAML that fits the vendored CRDs; and the launcher flags'
bad input failing at compile time with the flag named."""

from __future__ import annotations

import pytest
import yaml

from components.training import trainjob
from kubeflow import run_kubeflow
from tests.components.training import crd_schema

IMAGE = "registry.example.com/tfx-scaleout@sha256:" + "1" * 64
GPU_IMAGE = "registry.example.com/tfx-scaleout-gpu:1.0@sha256:" + "2" * 64
BASE = ["--pipeline_root=gs://bucket/tfx", f"--image={IMAGE}", f"--gpu_image={GPU_IMAGE}"]


def _manifests(capsys, *flags: str) -> tuple[str, list[dict]]:
    assert run_kubeflow.main(["manifests", *BASE, *flags]) == 0
    out = capsys.readouterr().out
    return out, [doc for doc in yaml.safe_load_all(out) if doc]


def test_trainjob_prints_the_runtime_and_the_job(capsys):
    out, documents = _manifests(
        capsys,
        "--launcher=trainjob",
        "--strategy=parameter_server",
        "--workers=2",
        "--ps=1",
        "--job_namespace=team-a",
        "--job_service_account=trainer",
        "--gang_scheduling=coscheduling",
        "--worker_cpu=6",
        "--worker_memory_gb=24",
        "--node_selector=pool=gpu",
    )
    assert out.startswith("# trainjob objects for penguins-pipeline")
    runtime, job = documents
    for document in documents:
        crd_schema.validate(document)
    assert (runtime["kind"], job["kind"]) == ("TrainingRuntime", "TrainJob")
    assert runtime["metadata"] == {
        "name": "tfx-scaleout-tf-parameter-server-1ps",
        "labels": {
            "trainer.kubeflow.org/framework": "tensorflow",
            "app.kubernetes.io/part-of": "tfx-scaleout",
        },
        "namespace": "team-a",
    }
    assert runtime["spec"]["podGroupPolicy"]["coscheduling"] == {"scheduleTimeoutSeconds": 600}
    images = {
        rj["template"]["spec"]["template"]["spec"]["containers"][0]["image"]
        for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]
    }
    assert images == {GPU_IMAGE}
    assert job["metadata"]["namespace"] == "team-a"
    assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and trainer["image"] == GPU_IMAGE
    assert trainer["resourcesPerNode"]["limits"] == {
        "cpu": "6",
        "memory": "24G",
        "nvidia.com/gpu": "1",
    }
    task_file = trainer["env"][0]["value"]
    assert task_file.startswith("gs://bucket/tfx/penguins-pipeline/")
    assert task_file.endswith("/trainjob/task.json")
    assert job["spec"]["activeDeadlineSeconds"] == 24 * 3600
    assert "trainer" in yaml.safe_dump(job["spec"]["runtimePatches"])  # the service account
    # The runtime printed is the one the launcher checks for before it creates the TrainJob.
    assert trainjob.first_difference(runtime["spec"], runtime["spec"]) is None


def test_tfjob_prints_the_job_with_the_flags(capsys):
    _, documents = _manifests(
        capsys,
        "--strategy=multi_worker_mirrored",
        "--workers=3",
        "--job_deadline_seconds=3600",
        "--job_delete=always",
    )
    (job,) = documents
    crd_schema.validate(job)
    assert job["kind"] == "TFJob" and "namespace" not in job["metadata"]
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3 and worker["restartPolicy"] == "ExitCode"
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == 3600
    pod = worker["template"]
    assert pod["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert pod["spec"]["containers"][0]["image"] == GPU_IMAGE


def test_the_legacy_tfjob_flag_names_still_work(capsys):
    _, (job,) = _manifests(
        capsys, "--strategy=multi_worker_mirrored", "--workers=2", "--tfjob_namespace=ml"
    )
    assert job["metadata"]["namespace"] == "ml"


def test_nothing_to_print_without_a_kubernetes_launcher(capsys):
    code = run_kubeflow.main(["manifests", *BASE, "--strategy=mirrored"])
    assert code == run_kubeflow.EXIT_BAD_INPUT
    assert "only the tfjob and trainjob launchers" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers=-1"], "training.workers (--workers) must be >= 1"),
        (["--ps=-1", "--strategy=parameter_server"], "training.ps (--ps) must be >= 0"),
        (["--gpus=-1"], "invalid --gpus -1: must be >= 0"),
        (["--worker_cpu=-2"], "invalid --worker_cpu -2.0: must be >= 0"),
        (["--job_deadline_seconds=0"], "invalid --job_deadline_seconds 0: must be >= 1"),
        (["--strategy=parameter_server", "--workers=2"], "training.ps (--ps) must be >= 1"),
        (["--job_namespace=Team_A"], "(--job_namespace) must be a Kubernetes namespace name"),
        (["--job_namespace=" + "a" * 64], "(--job_namespace) must be a Kubernetes namespace"),
        (
            ["--job_service_account=runner_sa"],
            "(--job_service_account) must be a Kubernetes service account name",
        ),
        (
            ["--launcher=trainjob", "--trainjob_runtime=TF Runtime"],
            "(--trainjob_runtime) must be a Kubernetes object name",
        ),
    ],
)
@pytest.mark.parametrize("command", ["compile", "manifests"])
def test_bad_launcher_input_fails_at_compile_time_naming_the_flag(
    capsys, tmp_path, command, flags, message
):
    argv = [command, *BASE, f"--output={tmp_path / 'p.yaml'}"]
    if not any(flag.startswith("--strategy") for flag in flags):
        argv += ["--strategy=multi_worker_mirrored"]
    code = run_kubeflow.main([*argv, *flags])
    assert code == run_kubeflow.EXIT_BAD_INPUT
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


def test_an_unknown_launcher_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_kubeflow.main(["compile", *BASE, "--launcher=slurm"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--launcher" in err and "slurm" in err
