"""TFJob manifests for sync and async strategies, validated against the Training Operator v1.9
TFJob CRD and through the kubernetes client's pod models: the hardening (no Istio sidecar,
ExitCode restarts, deadline, gang scheduling, owner, no GPU on the coordinator or parameter
servers) and the settings' validation. The launcher's jobs on a real cluster:
tests/kubeflow/test_local_cluster_launchers.py."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from kubernetes import client as k8s

from components import ConfigError
from components.training import cluster, kubernetes_job, tfjob
from components.training.settings import GpuPool, Resources, TFJobConfig, Toleration
from tests.components.training import crd_schema

IMAGE = "registry.example.com/tfx-scaleout-gpu:1.0"
TASK_URI = "gs://bucket/root/Trainer/model_run/7/tfjob/task.json"
POOL = GpuPool(
    node_selector=(("cloud.google.com/gke-accelerator", "nvidia-tesla-t4"),),
    tolerations=(Toleration(key="nvidia.com/gpu"), Toleration.parse("dedicated=gpu:NoExecute")),
)
OWNER = kubernetes_job.OwnerPod("trainer-pod", "uid-7", "ml", "default-editor")


def _settings(**changes) -> TFJobConfig:
    values: dict = dict(image=IMAGE, namespace="ml", gpu_pool=POOL, poll_seconds=1.0)
    values.update(changes)
    settings = TFJobConfig(**values)
    settings.validate()
    return settings


class _Response:
    def __init__(self, data):
        self.data = json.dumps(data)


def _as_model(data: dict, model: str):
    """What the API server's schema makes of it: unknown or mistyped fields fail or vanish."""
    api = k8s.ApiClient()
    parsed = api.deserialize(_Response(data), model)
    assert api.sanitize_for_serialization(parsed) == data
    return parsed


def _manifest(spec: cluster.ClusterSpec, settings: TFJobConfig | None = None, placement=None):
    manifest = tfjob.tfjob_manifest(
        "tfx-train-abc", spec, cluster.pod_command(TASK_URI), settings or _settings(), placement
    )
    # As it is written to and read from a YAML file (kubectl apply -f).
    manifest = yaml.safe_load(yaml.safe_dump(manifest))
    crd_schema.validate(manifest)
    return manifest


def test_multi_worker_mirrored_manifest():
    placement = kubernetes_job.Placement("ml", "default-editor", OWNER)
    manifest = _manifest(
        cluster.ClusterSpec("multi_worker_mirrored", workers=3), placement=placement
    )
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "TFJob"
    assert manifest["metadata"]["namespace"] == "ml"
    assert manifest["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "trainer-pod",
            "uid": "uid-7",
            "controller": False,
            "blockOwnerDeletion": False,
        }
    ]
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert list(replicas) == ["Worker"]
    worker = replicas["Worker"]
    # ExitCode: code errors fail at once, killed pods restart.
    assert (worker["replicas"], worker["restartPolicy"]) == (3, "ExitCode")
    assert manifest["spec"]["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "backoffLimit": 3,
        "activeDeadlineSeconds": 24 * 3600,
    }
    pod = _as_model(worker["template"], "V1PodTemplateSpec")
    assert pod.metadata.annotations == {"sidecar.istio.io/inject": "false"}
    assert pod.metadata.labels["sidecar.istio.io/inject"] == "false"
    assert pod.spec.service_account_name == "default-editor"
    container = pod.spec.containers[0]
    assert container.name == "tensorflow" and container.image == IMAGE
    # The local launcher's command, with the task file on shared storage.
    assert container.command == cluster.pod_command(TASK_URI)
    assert container.resources.limits == {"cpu": "4", "memory": "16G", "nvidia.com/gpu": "1"}
    assert container.resources.requests == {"cpu": "4", "memory": "16G"}
    assert pod.spec.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert [(t.key, t.operator, t.value, t.effect) for t in pod.spec.tolerations] == [
        ("nvidia.com/gpu", "Exists", None, "NoSchedule"),
        ("dedicated", "Equal", "gpu", "NoExecute"),
    ]
    assert {"name": "TF_USE_LEGACY_KERAS", "value": "1"} in worker["template"]["spec"][
        "containers"
    ][0]["env"]


def test_parameter_server_manifest_has_chief_workers_and_ps_and_gpus_only_on_workers():
    settings = _settings(
        worker=Resources(cpu=8, memory_gb=30, gpus=2),
        pvc_name="pipeline-root",
        mount_path="/mnt/pipeline",
        active_deadline_seconds=3600,
        gang_scheduling="coscheduling",
        gang_schedule_timeout_seconds=120,
    )
    manifest = _manifest(cluster.ClusterSpec("parameter_server", workers=4, ps=2), settings)
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert {name: spec["replicas"] for name, spec in replicas.items()} == {
        "Chief": 1,
        "Worker": 4,
        "PS": 2,
    }
    run_policy = manifest["spec"]["runPolicy"]
    assert run_policy["activeDeadlineSeconds"] == 3600
    # Gang scheduling: all 7 pods or none.
    assert run_policy["schedulingPolicy"] == {"minAvailable": 7, "scheduleTimeoutSeconds": 120}
    pods = {
        name: _as_model(spec["template"], "V1PodTemplateSpec") for name, spec in replicas.items()
    }
    limits = {name: pod.spec.containers[0].resources.limits for name, pod in pods.items()}
    assert limits["Worker"]["nvidia.com/gpu"] == "2"
    assert "nvidia.com/gpu" not in limits["Chief"] and "nvidia.com/gpu" not in limits["PS"]
    # The coordinator and parameter servers need no GPU node: no pool selector or tolerations.
    for name in ("Chief", "PS"):
        assert pods[name].spec.node_selector is None and pods[name].spec.tolerations is None
    for name, pod in pods.items():
        assert pod.spec.containers[0].command == cluster.pod_command(TASK_URI)
        assert pod.spec.volumes[0].persistent_volume_claim.claim_name == "pipeline-root"
        assert pod.spec.containers[0].volume_mounts[0].mount_path == "/mnt/pipeline"
        assert replicas[name]["restartPolicy"] == "ExitCode"
        assert pod.metadata.annotations == {"sidecar.istio.io/inject": "false"}


def test_a_dry_run_manifest_leaves_namespace_and_account_to_apply_time():
    manifest = _manifest(
        cluster.ClusterSpec("multi_worker_mirrored", workers=2), _settings(namespace="")
    )
    assert "namespace" not in manifest["metadata"] and "ownerReferences" not in manifest["metadata"]
    assert (
        "serviceAccountName" not in manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    )


def test_crd_validation_catches_what_the_operator_would_not_accept():
    manifest = tfjob.tfjob_manifest(
        "x", cluster.ClusterSpec("multi_worker_mirrored", workers=2), ["python"], _settings()
    )
    manifest["spec"]["runPolicy"]["backoffLimit"] = "3"
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["gpu"] = 1
    errors = crd_schema.errors_in(manifest)
    assert any("runPolicy.backoffLimit: expected integer" in e for e in errors), errors
    assert any("Worker.template.spec.gpu: unknown field" in e for e in errors), errors


def test_settings_survive_the_trainer_custom_config():
    settings = _settings(worker=Resources(cpu=2, memory_gb=4, gpus=4), delete_policy="never")
    carried = json.loads(json.dumps({"tfjob": settings.to_dict()}))
    assert TFJobConfig.from_dict(carried["tfjob"]) == settings


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"image": ""}, "tfjob.image (--gpu_image)"),
        ({"restart_policy": "Sometimes"}, "tfjob.restart_policy"),
        ({"clean_pod_policy": "Some"}, "tfjob.clean_pod_policy"),
        ({"delete_policy": "later"}, "tfjob.delete_policy (--job_delete)"),
        ({"pvc_name": "claim"}, "tfjob.pvc_name (--pvc_name)"),
        ({"worker": Resources(gpus=-1)}, "--gpus).gpus must be >= 0"),
        ({"chief": Resources(gpus=1)}, "tfjob.chief.gpus"),
        ({"namespace": "ML"}, "tfjob.namespace (--job_namespace)"),
        ({"namespace": "a" * 64}, "tfjob.namespace (--job_namespace)"),
        ({"service_account": "runner_sa"}, "tfjob.service_account (--job_service_account)"),
        ({"active_deadline_seconds": -5}, "(--job_deadline_seconds) must be >= 1"),
        ({"gang_scheduling": "yes"}, "(--gang_scheduling)"),
        ({"gpu_pool": GpuPool(tolerations=(Toleration("k", operator="In"),))}, "gpu_pool"),
    ],
)
def test_invalid_settings_name_the_field_and_flag(changes, field):
    with pytest.raises(ConfigError, match=re.escape(field)):
        _settings(**changes)


def test_valid_kubernetes_names_pass():
    _settings(namespace="kubeflow-user-example-com", service_account="system.runner-1")
