"""Both Kubernetes launchers (TFJob, TrainJob) against a fake Kubernetes API on a loopback port,
through the real kubernetes client: placement in the Trainer pod's namespace with its service
account and an owner reference, progress while waiting, a failed worker's reason / event / log
line, image pull errors, the deadline, and SIGTERM deleting the job. Every call they make is
granted by the RBAC manifest shipped for that launcher."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from components import PROGRESS_LOGGER
from components.training import cluster, kubernetes_job, tfjob, trainjob
from components.training.loop import TrainTask
from components.training.settings import GpuPool, TFJobConfig, TrainingConfig, TrainJobConfig
from tests.components.training import crd_schema
from tests.components.training.fake_kube import owner_pod, pod, warning

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
IMAGE = "registry.example.com/tfx-scaleout-gpu@sha256:" + "a" * 64
NAMESPACE = "team-a"
TRAINER_POD = "tfx-pipeline-abc-trainer-123"
TRAINER_UID = "0b4d5e6f-1111-2222-3333-444455556666"
SPEC = cluster.ClusterSpec("multi_worker_mirrored", workers=2)


@dataclasses.dataclass(frozen=True)
class Flavor:
    """What differs between the launchers, as the operators report it."""

    kind: str
    settings: object
    launcher: type
    plural: str
    pod_label: str
    worker_container: str
    rbac: str
    running: dict
    succeeded: dict
    failed: dict
    deadline: dict

    def pods(self, name: str, *states) -> list[dict]:
        labels = {self.pod_label: name}
        return [
            pod(f"{name}-worker-{i}", phase, labels, container=self.worker_container, **extra)
            for i, (phase, extra) in enumerate(states)
        ]


def _conditions(*conditions: dict) -> dict:
    return {"conditions": [{"status": "True", **c} for c in conditions]}


TFJOB = Flavor(
    kind="TFJob",
    settings=TFJobConfig(image=IMAGE, poll_seconds=1.0),
    launcher=tfjob.TFJobLauncher,
    plural="tfjobs",
    pod_label=tfjob.JOB_NAME_LABEL,
    worker_container=tfjob.CONTAINER_NAME,
    rbac="tfjob-rbac.yaml",
    running=_conditions({"type": "Created"}, {"type": "Running"}),
    succeeded=_conditions({"type": "Created"}, {"type": "Running"}, {"type": "Succeeded"}),
    failed=_conditions(
        {"type": "Created"},
        {
            "type": "Failed",
            "reason": "TFJobFailed",
            "message": "TFJob team-a/x has failed because 1 Worker replica(s) failed.",
        },
    ),
    # What the operator (release 1.9, common/job.go) writes when activeDeadlineSeconds passes.
    deadline=_conditions(
        {"type": "Created"},
        {
            "type": "Failed",
            "reason": "TFJobFailed",
            "message": "Job x has failed because it was active longer than specified deadline",
        },
    ),
)
TRAINJOB = Flavor(
    kind="TrainJob",
    settings=TrainJobConfig(image=IMAGE, poll_seconds=1.0),
    launcher=trainjob.TrainJobLauncher,
    plural="trainjobs",
    pod_label=trainjob.JOBSET_NAME_LABEL,
    worker_container=trainjob.TRAINER_CONTAINER,
    rbac="trainjob-rbac.yaml",
    running={"jobsStatus": [{"name": "node", "active": 2, "ready": 2, "failed": 0}]},
    succeeded=_conditions({"type": "Complete", "reason": "AllJobsCompleted"}),
    failed=_conditions(
        {
            "type": "Failed",
            "reason": "FailedJobs",
            "message": "jobset failed due to one or more job failures",
        }
    ),
    # Trainer v2.3 (trainjob_types.go, constants.go) on activeDeadlineSeconds.
    deadline=_conditions(
        {
            "type": "Failed",
            "reason": "DeadlineExceeded",
            "message": "TrainJob exceeded its active deadline",
        }
    ),
)
FLAVORS = pytest.mark.parametrize("flavor", [TFJOB, TRAINJOB], ids=["tfjob", "trainjob"])


def _task(tmp_path, flavor: Flavor) -> TrainTask:
    return TrainTask(
        train_files=["gs://bucket/t-0"],
        eval_files=["gs://bucket/e-0"],
        transform_output="gs://bucket/tg",
        serving_model_dir=str(tmp_path / "serving"),
        model_run_dir=str(tmp_path / "run"),
        label_key="species",
        settings=TrainingConfig(
            strategy=SPEC.strategy, workers=SPEC.workers, launcher=flavor.settings
        ),
    )


def _launcher(fake, flavor: Flavor, tmp_path, clock=None, **changes):
    """A launcher as it runs in the Trainer's pod (namespace file, KFP_POD_NAME)."""
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text(NAMESPACE + "\n")
    fake.owner_pods[NAMESPACE, TRAINER_POD] = owner_pod(
        NAMESPACE, TRAINER_POD, TRAINER_UID, "default-editor"
    )
    settings = dataclasses.replace(flavor.settings, **changes)
    if flavor is TRAINJOB:
        # The platform team applied the runtime (run_kubeflow.py manifests).
        runtime = trainjob.runtime_manifest(SPEC, settings, NAMESPACE)
        fake.objects["trainingruntimes", NAMESPACE, runtime["metadata"]["name"]] = runtime
    custom, core = fake.clients()
    sleeps: list[float] = []
    launcher = flavor.launcher(
        settings,
        custom_api=custom,
        core_api=core,
        sleep=sleeps.append,
        clock=clock or (lambda: 0.0),
        namespace_file=str(namespace_file),
        environ={"KFP_POD_NAME": TRAINER_POD},
    )
    return launcher, sleeps


def _created(fake, flavor: Flavor) -> dict:
    (request,) = fake.calls("create", flavor.plural)
    return request.body


def _granted(rbac_file: str) -> set[tuple[str, str, str]]:
    with open(os.path.join(ROOT, "kubeflow", rbac_file)) as handle:
        documents = list(yaml.safe_load_all(handle))
    return {
        (group, resource, verb)
        for document in documents
        if document["kind"] in ("Role", "ClusterRole")
        for rule in document["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _assert_rbac_grants_every_call(fake, flavor: Flavor) -> None:
    granted = _granted(flavor.rbac)
    made = {(r.group, r.resource, r.verb) for r in fake.requests}
    assert made <= granted, f"{flavor.rbac} lacks {sorted(made - granted)}"


@FLAVORS
def test_success_reports_progress_owns_and_deletes_the_job(fake_kube, flavor, tmp_path, caplog):
    task = _task(tmp_path, flavor)
    name = kubernetes_job.job_name(task)
    fake_kube.script(
        ({}, flavor.pods(name, ("Pending", {"unschedulable": "0/3 nodes have nvidia.com/gpu"}))),
        (flavor.running, flavor.pods(name, ("Running", {}), ("Running", {}))),
        (flavor.running, flavor.pods(name, ("Running", {}), ("Running", {}))),
        (flavor.succeeded, flavor.pods(name, ("Succeeded", {}), ("Succeeded", {}))),
    )
    launcher, sleeps = _launcher(fake_kube, flavor, tmp_path)
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        launcher.run(SPEC, task)

    job = _created(fake_kube, flavor)
    crd_schema.validate(job)
    # The Trainer pod's namespace, service account and ownership.
    assert job["metadata"]["namespace"] == NAMESPACE
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": TRAINER_POD,
            "uid": TRAINER_UID,
            "controller": False,
            "blockOwnerDeletion": False,
        }
    ]
    assert "default-editor" in yaml.safe_dump(job["spec"])
    assert TrainTask.load(str(tmp_path / "run" / flavor.kind.lower() / "task.json")) == task
    assert [r.path for r in fake_kube.calls("delete", flavor.plural)] == [
        f"/apis/{launcher.GROUP}/{launcher.VERSION}/namespaces/{NAMESPACE}/{flavor.plural}/{name}"
    ]
    assert sleeps == [1.0, 1.0, 1.0]
    lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert f"{flavor.kind} {NAMESPACE}/{name} created" in lines
    assert any("Pending (unschedulable: 0/3 nodes have nvidia.com/gpu)" in x for x in lines)
    running = [x for x in lines if f"{name}-worker-0 Running, {name}-worker-1 Running" in x]
    assert len(running) == 1  # an unchanged state is reported once
    assert any(f"{name}-worker-1 Succeeded" in x for x in lines)
    assert f"{flavor.kind} {NAMESPACE}/{name} deleted" in lines
    _assert_rbac_grants_every_call(fake_kube, flavor)


@FLAVORS
def test_failed_worker_names_pod_reason_event_and_log_line_and_keeps_the_job(
    fake_kube, flavor, tmp_path
):
    task = _task(tmp_path, flavor)
    name = kubernetes_job.job_name(task)
    failed_pod = f"{name}-worker-1"
    fake_kube.script(
        (flavor.running, flavor.pods(name, ("Running", {}), ("Running", {}))),
        (
            flavor.failed,
            flavor.pods(name, ("Running", {}), ("Failed", {"terminated": (1, "Error")})),
        ),
    )
    fake_kube.logs[failed_pod] = (
        "Traceback (most recent call last):\nValueError: shapes (3,) (4,)\n"
    )
    fake_kube.events[failed_pod] = [warning(failed_pod, "BackOff", "Back-off restarting")]
    launcher, _ = _launcher(fake_kube, flavor, tmp_path)
    with pytest.raises(cluster.ClusterError) as error:
        launcher.run(SPEC, task)
    message = str(error.value)
    assert f"{flavor.kind} {NAMESPACE}/{name} failed: " in message
    assert flavor.failed["conditions"][-1]["message"] in message
    assert f"pod {failed_pod} Error (exit code 1)" in message
    assert "event: BackOff: Back-off restarting" in message
    assert "last output: ValueError: shapes (3,) (4,)" in message
    (log_request,) = fake_kube.calls("get", "pods/log")
    assert log_request.path.endswith(f"/pods/{failed_pod}/log")
    assert log_request.query["container"] == flavor.worker_container
    # delete_policy on_success: a failed job stays for `kubectl describe`.
    assert not fake_kube.calls("delete", flavor.plural)
    _assert_rbac_grants_every_call(fake_kube, flavor)


@FLAVORS
def test_image_pull_error_fails_at_once_and_always_policy_deletes(fake_kube, flavor, tmp_path):
    task = _task(tmp_path, flavor)
    name = kubernetes_job.job_name(task)
    pull = ("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"')
    fake_kube.script(({}, flavor.pods(name, ("Pending", {"waiting": pull}))))
    fake_kube.events[f"{name}-worker-0"] = [
        warning(f"{name}-worker-0", "Failed", "Failed to pull image: 403 Forbidden")
    ]
    launcher, sleeps = _launcher(fake_kube, flavor, tmp_path, delete_policy="always")
    with pytest.raises(cluster.ClusterError) as error:
        launcher.run(SPEC, task)
    assert f"pod {name}-worker-0 ImagePullBackOff: Back-off pulling image" in str(error.value)
    assert "event: Failed: Failed to pull image: 403 Forbidden" in str(error.value)
    assert sleeps == []
    assert fake_kube.calls("delete", flavor.plural)


@FLAVORS
def test_deadline_exceeded_is_named_with_its_flag(fake_kube, flavor, tmp_path):
    task = _task(tmp_path, flavor)
    name = kubernetes_job.job_name(task)
    fake_kube.script(
        (flavor.running, flavor.pods(name, ("Running", {}), ("Running", {}))),
        (flavor.deadline, flavor.pods(name, ("Failed", {}), ("Failed", {}))),
    )
    launcher, _ = _launcher(fake_kube, flavor, tmp_path, active_deadline_seconds=600)
    with pytest.raises(cluster.ClusterError) as error:
        launcher.run(SPEC, task)
    assert flavor.deadline["conditions"][-1]["message"] in str(error.value)
    assert "(deadline 600s, --job_deadline_seconds)" in str(error.value)
    assert _created(fake_kube, flavor)["spec"].get("activeDeadlineSeconds", 600) == 600


@FLAVORS
def test_launcher_stops_waiting_when_the_operator_ignores_the_deadline(fake_kube, flavor, tmp_path):
    task = _task(tmp_path, flavor)
    name = kubernetes_job.job_name(task)
    fake_kube.script((flavor.running, flavor.pods(name, ("Running", {}))))
    times = iter([0.0, 100.0, 100.0 + 60 + kubernetes_job.DEADLINE_GRACE_SECONDS])
    launcher, _ = _launcher(
        fake_kube, flavor, tmp_path, clock=lambda: next(times), active_deadline_seconds=60
    )
    with pytest.raises(cluster.ClusterError, match=r"did not finish within its deadline of 60s"):
        launcher.run(SPEC, task)


_SIGTERM_CHILD = textwrap.dedent(
    """
    import sys
    from kubernetes import client as k8s
    from components.training import cluster, kubernetes_job, tfjob, trainjob
    from components.training.settings import TFJobConfig, TrainJobConfig

    url, kind = sys.argv[1], sys.argv[2]
    configuration = k8s.Configuration(host=url)
    api = k8s.ApiClient(configuration)
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
    placement = kubernetes_job.Placement(namespace="team-a")
    if kind == "TFJob":
        launcher = tfjob.TFJobLauncher(
            TFJobConfig(image="img", poll_seconds=0.05, delete_policy="never"),
            custom_api=k8s.CustomObjectsApi(api), core_api=k8s.CoreV1Api(api),
        )
    else:
        launcher = trainjob.TrainJobLauncher(
            TrainJobConfig(image="img", poll_seconds=0.05, delete_policy="never"),
            custom_api=k8s.CustomObjectsApi(api), core_api=k8s.CoreV1Api(api),
        )
    manifest = launcher.manifest("tfx-train-sigterm", spec, "gs://b/task.json", placement)
    try:
        launcher.run_manifest(manifest, placement)
    except cluster.Cancelled as error:
        print("cancelled:", error, flush=True)
        sys.exit(3)
    """
)


@FLAVORS
def test_sigterm_deletes_the_job_whatever_the_policy(fake_kube, flavor):
    fake_kube.script((flavor.running, []))
    child = subprocess.Popen(
        [sys.executable, "-c", _SIGTERM_CHILD, fake_kube.url, flavor.kind],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert fake_kube.created.wait(timeout=60), "the job was never created"
        # Let it wait a few polls, then cancel it as Kubernetes cancels a pod.
        deadline = time.monotonic() + 30
        while len(fake_kube.calls("get", flavor.plural)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        output, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 3, output
    assert "cancelled: the Trainer was cancelled (SIGTERM)" in output
    (delete,) = fake_kube.calls("delete", flavor.plural)
    assert delete.path.endswith(f"/namespaces/team-a/{flavor.plural}/tfx-train-sigterm")
    policy = delete.query.get("propagationPolicy") or (delete.body or {}).get("propagationPolicy")
    assert policy == "Foreground"


@FLAVORS
def test_a_retried_trainer_follows_the_job_and_becomes_an_owner(fake_kube, flavor, tmp_path):
    task = _task(tmp_path, flavor)
    name = kubernetes_job.job_name(task)
    earlier = {"apiVersion": "v1", "kind": "Pod", "name": "earlier", "uid": "uid-earlier"}
    fake_kube.objects[flavor.plural, NAMESPACE, name] = {
        "apiVersion": "x",
        "kind": flavor.kind,
        "metadata": {"name": name, "ownerReferences": [earlier]},
    }
    fake_kube.script((flavor.succeeded, []))
    launcher, _ = _launcher(fake_kube, flavor, tmp_path)
    launcher.run(SPEC, task)
    (patch,) = fake_kube.calls("patch", flavor.plural)
    owners = patch.body["metadata"]["ownerReferences"]
    assert [owner["uid"] for owner in owners] == ["uid-earlier", TRAINER_UID]
    _assert_rbac_grants_every_call(fake_kube, flavor)


@FLAVORS
def test_missing_operator_and_rejections_are_clear(fake_kube, flavor, tmp_path):
    fake_kube.plurals.discard(flavor.plural)
    launcher, _ = _launcher(fake_kube, flavor, tmp_path)
    with pytest.raises(cluster.ClusterError, match=re.escape(f"install {launcher.OPERATOR}")):
        launcher.run(SPEC, _task(tmp_path, flavor))


@FLAVORS
def test_a_job_in_another_namespace_is_not_owned_by_the_trainer_pod(fake_kube, flavor, tmp_path):
    task = _task(tmp_path, flavor)
    fake_kube.script((flavor.succeeded, []))
    launcher, _ = _launcher(fake_kube, flavor, tmp_path, namespace="training")
    if flavor is TRAINJOB:
        runtime = trainjob.runtime_manifest(SPEC, launcher.settings, "training")
        fake_kube.objects["trainingruntimes", "training", runtime["metadata"]["name"]] = runtime
    launcher.run(SPEC, task)
    job = _created(fake_kube, flavor)
    assert job["metadata"]["namespace"] == "training"
    assert "ownerReferences" not in job["metadata"]
    # The Trainer pod's account lives in its own namespace: the job's namespace default is used.
    assert "default-editor" not in yaml.safe_dump(job)


def test_gpu_pool_settings_reach_only_gpu_pods(fake_kube, tmp_path):
    pool = GpuPool(node_selector=(("pool", "gpu"),))
    launcher, _ = _launcher(fake_kube, TRAINJOB, tmp_path, gpu_pool=pool)
    spec = cluster.ClusterSpec("parameter_server", workers=2, ps=1)
    runtime = trainjob.runtime_manifest(spec, launcher.settings, NAMESPACE)
    fake_kube.objects["trainingruntimes", NAMESPACE, runtime["metadata"]["name"]] = runtime
    manifest = launcher.manifest("tfx-train-x", spec, "gs://b/t.json", launcher.placement())
    patches = {
        p["name"]: p["template"]["spec"]["template"]["spec"]
        for p in manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
            "replicatedJobs"
        ]
    }
    assert patches["node"]["nodeSelector"] == {"pool": "gpu"}
    assert "nodeSelector" not in patches["coordinator"] and "nodeSelector" not in patches["ps"]
