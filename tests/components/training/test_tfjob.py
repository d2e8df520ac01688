"""TFJob launcher: manifests for sync and async strategies (validated through the kubernetes
client's models, as the API server would read them) and the wait / progress / failure / cleanup
logic against fake CustomObjectsApi and CoreV1Api objects."""

from __future__ import annotations

import json
import logging
from unittest import mock

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from components import PROGRESS_LOGGER, ConfigError
from components.training import cluster, tfjob
from components.training.settings import GpuPool, Resources, TFJobConfig, Toleration, TrainingConfig

IMAGE = "registry.example.com/tfx-scaleout-gpu:1.0"
TASK_URI = "gs://bucket/root/Trainer/model_run/7/tfjob/task.json"
POOL = GpuPool(
    node_selector=(("cloud.google.com/gke-accelerator", "nvidia-tesla-t4"),),
    tolerations=(Toleration(key="nvidia.com/gpu"), Toleration.parse("dedicated=gpu:NoExecute")),
)


def _settings(**changes) -> TFJobConfig:
    values = dict(image=IMAGE, namespace="ml", gpu_pool=POOL, poll_seconds=1.0)
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


def _manifest(spec: cluster.ClusterSpec, settings: TFJobConfig | None = None) -> dict:
    manifest = tfjob.tfjob_manifest(
        "tfx-train-abc", spec, cluster.task_command(TASK_URI), settings or _settings()
    )
    # As it is written to and read from a YAML file (kubectl apply -f).
    return yaml.safe_load(yaml.safe_dump(manifest))


def test_multi_worker_mirrored_manifest():
    manifest = _manifest(cluster.ClusterSpec("multi_worker_mirrored", workers=3))
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "TFJob"
    assert manifest["metadata"]["namespace"] == "ml"
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert list(replicas) == ["Worker"]
    worker = replicas["Worker"]
    assert (worker["replicas"], worker["restartPolicy"]) == (3, "OnFailure")
    assert manifest["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 3}
    pod = _as_model(worker["template"], "V1PodTemplateSpec")
    container = pod.spec.containers[0]
    assert container.name == "tensorflow" and container.image == IMAGE
    # The local launcher's command, with the task file on shared storage.
    assert container.command == cluster.task_command(TASK_URI)
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


def test_parameter_server_manifest_has_chief_workers_and_ps():
    settings = _settings(
        worker=Resources(cpu=8, memory_gb=30, gpus=2),
        pvc_name="pipeline-root",
        mount_path="/mnt/pipeline",
        timeout_seconds=3600,
    )
    manifest = _manifest(cluster.ClusterSpec("parameter_server", workers=4, ps=2), settings)
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert {name: spec["replicas"] for name, spec in replicas.items()} == {
        "Chief": 1,
        "Worker": 4,
        "PS": 2,
    }
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 3600
    pods = {
        name: _as_model(spec["template"], "V1PodTemplateSpec") for name, spec in replicas.items()
    }
    limits = {name: pod.spec.containers[0].resources.limits for name, pod in pods.items()}
    assert limits["Worker"]["nvidia.com/gpu"] == "2"
    assert limits["Chief"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in limits["PS"]
    # Parameter servers need no GPU node: no GPU pool selector or tolerations.
    assert pods["PS"].spec.node_selector is None and pods["PS"].spec.tolerations is None
    for pod in pods.values():
        assert pod.spec.containers[0].command == cluster.task_command(TASK_URI)
        assert pod.spec.volumes[0].persistent_volume_claim.claim_name == "pipeline-root"
        assert pod.spec.containers[0].volume_mounts[0].mount_path == "/mnt/pipeline"
    for name in ("Chief", "Worker", "PS"):
        assert replicas[name]["restartPolicy"] == "OnFailure"


def test_settings_survive_the_trainer_custom_config():
    settings = _settings(worker=Resources(cpu=2, memory_gb=4, gpus=4), delete_policy="never")
    carried = json.loads(json.dumps({"tfjob": settings.to_dict()}))
    assert TFJobConfig.from_dict(carried["tfjob"]) == settings


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"image": ""}, "tfjob.image"),
        ({"restart_policy": "Sometimes"}, "tfjob.restart_policy"),
        ({"clean_pod_policy": "Some"}, "tfjob.clean_pod_policy"),
        ({"delete_policy": "later"}, "tfjob.delete_policy"),
        ({"pvc_name": "claim"}, "tfjob.pvc_name"),
        ({"worker": Resources(gpus=-1)}, "tfjob.worker.gpus"),
        ({"gpu_pool": GpuPool(tolerations=(Toleration("k", operator="In"),))}, "gpu_pool"),
    ],
)
def test_invalid_settings_name_the_field(changes, field):
    with pytest.raises(ConfigError, match=field):
        _settings(**changes)


# --- wait / progress / failure / cleanup -------------------------------------------------------


def _pod(name, phase, waiting=None, terminated=None, reason=None, unschedulable=None):
    state = k8s.V1ContainerState(
        waiting=k8s.V1ContainerStateWaiting(reason=waiting[0], message=waiting[1])
        if waiting
        else None,
        terminated=k8s.V1ContainerStateTerminated(
            exit_code=terminated[0], reason=terminated[1], message=terminated[2]
        )
        if terminated
        else None,
        running=k8s.V1ContainerStateRunning() if phase == "Running" else None,
    )
    conditions = None
    if unschedulable:
        conditions = [
            k8s.V1PodCondition(
                type="PodScheduled", status="False", reason="Unschedulable", message=unschedulable
            )
        ]
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name),
        status=k8s.V1PodStatus(
            phase=phase,
            reason=reason,
            conditions=conditions,
            container_statuses=None
            if phase == "Pending" and not waiting
            else [
                k8s.V1ContainerStatus(
                    name="tensorflow",
                    image=IMAGE,
                    image_id="",
                    ready=phase == "Running",
                    restart_count=0,
                    state=state,
                )
            ],
        ),
    )


def _job(state: str | None, message: str = "") -> dict:
    conditions = [{"type": "Created", "status": "True"}]
    if state:
        conditions.append({"type": state, "status": "True", "message": message})
    return {"metadata": {"name": "tfx-train-abc"}, "status": {"conditions": conditions}}


class FakeCustomObjectsApi:
    def __init__(self, states, create_error=None):
        self.states = list(states)
        self.create_error = create_error
        self.calls = []

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        self.calls.append(("create", group, version, namespace, plural, body["metadata"]["name"]))
        if self.create_error:
            raise self.create_error

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append(("get", name))
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, **kwargs):
        self.calls.append(("delete", name, kwargs.get("propagation_policy")))


class FakeCoreV1Api:
    def __init__(self, pod_lists, log="Traceback...\nValueError: shapes do not match\n"):
        self.pod_lists = list(pod_lists)
        self.log = log
        self.selectors = []
        self.log_requests = []

    def list_namespaced_pod(self, namespace, label_selector):
        self.selectors.append((namespace, label_selector))
        items = self.pod_lists.pop(0) if len(self.pod_lists) > 1 else self.pod_lists[0]
        return k8s.V1PodList(items=items)

    def read_namespaced_pod_log(self, name, namespace, container, tail_lines):
        self.log_requests.append((name, container, tail_lines))
        return self.log


def _launcher(custom, core, settings=None, clock=None):
    sleeps = []
    launcher = tfjob.TFJobLauncher(
        settings or _settings(),
        custom_api=custom,
        core_api=core,
        sleep=sleeps.append,
        clock=clock or (lambda: 0.0),
    )
    return launcher, sleeps


def _run(launcher):
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
    launcher.run_manifest(
        tfjob.tfjob_manifest("tfx-train-abc", spec, ["python"], launcher.settings)
    )


def test_waits_reports_pod_states_and_deletes_on_success(caplog):
    custom = FakeCustomObjectsApi([_job(None), _job("Running"), _job("Running"), _job("Succeeded")])
    core = FakeCoreV1Api(
        [
            [_pod("w-1", "Pending", unschedulable="0/3 nodes have nvidia.com/gpu")],
            [_pod("w-0", "Running"), _pod("w-1", "Running")],
            [_pod("w-0", "Running"), _pod("w-1", "Running")],
            [_pod("w-0", "Succeeded"), _pod("w-1", "Succeeded")],
        ]
    )
    launcher, sleeps = _launcher(custom, core)
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        _run(launcher)
    assert custom.calls[0] == ("create", "kubeflow.org", "v1", "ml", "tfjobs", "tfx-train-abc")
    assert custom.calls[-1] == ("delete", "tfx-train-abc", "Foreground")
    assert core.selectors[0] == ("ml", "training.kubeflow.org/job-name=tfx-train-abc")
    assert sleeps == [1.0, 1.0, 1.0]
    lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert "TFJob ml/tfx-train-abc created" in lines
    assert any(
        "Created; w-1 Pending (unschedulable: 0/3 nodes have nvidia.com/gpu)" in x for x in lines
    )
    assert any("Running; w-0 Running, w-1 Running" in line for line in lines)
    # An unchanged state is reported once.
    assert sum("Running; w-0 Running" in line for line in lines) == 1
    assert any("Succeeded; w-0 Succeeded" in line for line in lines)


def test_failed_pod_reason_and_log_line_become_the_error_and_job_is_kept():
    custom = FakeCustomObjectsApi([_job("Failed", "TFJob ml/tfx-train-abc has failed")])
    core = FakeCoreV1Api(
        [[_pod("w-0", "Running"), _pod("w-1", "Failed", terminated=(137, "OOMKilled", None))]]
    )
    launcher, _ = _launcher(custom, core)
    with pytest.raises(cluster.ClusterError) as error:
        _run(launcher)
    message = str(error.value)
    assert "TFJob ml/tfx-train-abc failed: TFJob ml/tfx-train-abc has failed" in message
    assert "pod w-1 OOMKilled (exit code 137)" in message
    assert "last output: ValueError: shapes do not match" in message
    assert core.log_requests == [("w-1", "tensorflow", 20)]
    # delete_policy on_success: a failed job stays for `kubectl describe`.
    assert not [call for call in custom.calls if call[0] == "delete"]


def test_image_pull_failure_fails_fast_and_always_policy_deletes():
    custom = FakeCustomObjectsApi([_job(None)])
    core = FakeCoreV1Api(
        [[_pod("w-0", "Pending", waiting=("ImagePullBackOff", "Back-off pulling image"))]]
    )
    launcher, sleeps = _launcher(custom, core, _settings(delete_policy="always"))
    with pytest.raises(cluster.ClusterError, match="pod w-0 ImagePullBackOff: Back-off pulling"):
        _run(launcher)
    assert sleeps == []
    assert custom.calls[-1][0] == "delete"


def test_timeout_names_the_last_state():
    times = iter([0.0, 5.0, 11.0])
    custom = FakeCustomObjectsApi([_job("Running")])
    core = FakeCoreV1Api([[_pod("w-0", "Running")]])
    launcher, _ = _launcher(custom, core, _settings(timeout_seconds=10), clock=lambda: next(times))
    with pytest.raises(cluster.ClusterError, match=r"did not finish within 10s; .*w-0 Running"):
        _run(launcher)


def test_existing_job_is_followed_and_rejections_are_clear():
    conflict = ApiException(status=409, reason="Conflict")
    custom = FakeCustomObjectsApi([_job("Succeeded")], create_error=conflict)
    launcher, _ = _launcher(custom, FakeCoreV1Api([[]]))
    _run(launcher)
    assert ("get", "tfx-train-abc") in custom.calls

    missing = ApiException(status=404, reason="Not Found")
    launcher, _ = _launcher(FakeCustomObjectsApi([], create_error=missing), FakeCoreV1Api([[]]))
    with pytest.raises(cluster.ClusterError, match="install the Kubeflow Training Operator"):
        _run(launcher)

    invalid = ApiException(status=422, reason="Unprocessable Entity")
    invalid.body = json.dumps({"message": "spec.tfReplicaSpecs.Worker.replicas: Invalid value"})
    launcher, _ = _launcher(FakeCustomObjectsApi([], create_error=invalid), FakeCoreV1Api([[]]))
    with pytest.raises(cluster.ClusterError, match="rejected \\(422 .*replicas: Invalid value"):
        _run(launcher)


def test_run_writes_the_task_to_shared_storage_and_uses_the_local_command(tmp_path):
    from components.training.loop import TrainTask

    task = TrainTask(
        train_files=["t"],
        eval_files=["e"],
        transform_output="tg",
        serving_model_dir=str(tmp_path / "serving"),
        model_run_dir=str(tmp_path / "run"),
        label_key="species",
        settings=TrainingConfig(strategy="parameter_server", workers=2, ps=1),
    )
    launcher, _ = _launcher(FakeCustomObjectsApi([_job("Succeeded")]), FakeCoreV1Api([[]]))
    with mock.patch.object(launcher, "run_manifest") as run_manifest:
        launcher.run(cluster.ClusterSpec.for_task(task), task)
    task_file = str(tmp_path / "run" / "tfjob" / "task.json")
    assert TrainTask.load(task_file) == task
    manifest = run_manifest.call_args.args[0]
    name = manifest["metadata"]["name"]
    assert name == tfjob.job_name(task) and name.startswith("tfx-train-") and len(name) <= 63
    for replica in manifest["spec"]["tfReplicaSpecs"].values():
        assert replica["template"]["spec"]["containers"][0]["command"] == cluster.task_command(
            task_file
        )
