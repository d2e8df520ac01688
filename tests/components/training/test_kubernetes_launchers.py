"""Both Kubernetes launchers (TFJob, TrainJob) against a real kube-apiserver with the vendored
CRDs (the `kube` fixture), through the real kubernetes client, as the Trainer pod's service
account bound by the shipped RBAC file (kubeflow/tfjob-rbac.yaml, trainjob-rbac.yaml) and
nothing else: a call the role lacks fails the test with the server's 403.

No operator and no kubelet run: the test writes what they would, as the cluster admin and
through the status subresources whose schemas the CRDs define (the job's conditions, its pods
and their container states, Warning events), one step each time the launcher sleeps between
polls. Covered: placement in the Trainer pod's namespace with its service account and an owner
reference to that real Pod object, progress, a failed worker's reason and event, image pull
errors, the deadline (the operator's and the launcher's own), SIGTERM deleting the job from a
launcher that found its credentials in a kubeconfig, a retried Trainer adopting the job, a job
in another namespace, the garbage collector (kube-controller-manager's) deleting the job with
the Trainer's pod, the admission rule that blockOwnerDeletion: false avoids, and the calls
outside the role refused.

A failed worker's reason, event and log line, an image pull error, and the success, SIGTERM and
garbage-collection paths with real pods run on the local cluster, where the operators and the
kubelet write what happened (tests/kubeflow/test_local_cluster.py). A cluster without the CRDs
(the missing operator message) runs against the fake API (fake_kube.py) at the end of the file."""

from __future__ import annotations

import dataclasses
import datetime
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
from components.training import loop as training_loop
from components.training.loop import TrainTask
from components.training.settings import GpuPool, TFJobConfig, TrainingConfig, TrainJobConfig
from tests.components.training.fake_kube import owner_pod, pod, warning

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
IMAGE = "registry.example.com/tfx-scaleout-gpu@sha256:" + "a" * 64
ACCOUNT = "default-editor"  # the subject of the shipped RoleBindings
TRAINER_POD = "tfx-pipeline-abc-trainer-123"
SPEC = cluster.ClusterSpec("multi_worker_mirrored", workers=2)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, reason: str = "", message: str = "") -> dict:
    """A true condition with every field the CRDs' status schemas require."""
    return {
        "type": kind,
        "status": "True",
        "reason": reason or kind,
        "message": message or kind,
        "lastTransitionTime": _now(),
    }


def _tfjob_status(*conditions: dict, active: int = 0, failed: int = 0) -> dict:
    # What the Training Operator 1.9 writes: conditions and per-replica-type counts.
    return {
        "conditions": list(conditions),
        "replicaStatuses": {"Worker": {"active": active, "failed": failed}},
        "startTime": _now(),
    }


def _jobs_status(active: int, ready: int, failed: int = 0, succeeded: int = 0) -> list[dict]:
    return [
        {
            "name": "node",
            "active": active,
            "ready": ready,
            "failed": failed,
            "succeeded": succeeded,
            "suspended": 0,
        }
    ]


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
    namespace: str
    running: dict
    succeeded: dict
    failed: dict
    deadline: dict


TFJOB = Flavor(
    kind="TFJob",
    settings=TFJobConfig(image=IMAGE, poll_seconds=1.0),
    launcher=tfjob.TFJobLauncher,
    plural="tfjobs",
    pod_label=tfjob.JOB_NAME_LABEL,
    worker_container=tfjob.CONTAINER_NAME,
    rbac="tfjob-rbac.yaml",
    namespace="team-tfjob",
    running=_tfjob_status(_condition("Created"), _condition("Running"), active=2),
    succeeded=_tfjob_status(_condition("Created"), _condition("Running"), _condition("Succeeded")),
    failed=_tfjob_status(
        _condition("Created"),
        _condition(
            "Failed",
            "TFJobFailed",
            "TFJob team-tfjob/x has failed because 1 Worker replica(s) failed.",
        ),
        failed=1,
    ),
    # What the operator (release 1.9, common/job.go) writes when activeDeadlineSeconds passes.
    deadline=_tfjob_status(
        _condition("Created"),
        _condition(
            "Failed",
            "TFJobFailed",
            "Job x has failed because it was active longer than specified deadline",
        ),
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
    namespace="team-trainjob",
    running={"jobsStatus": _jobs_status(active=2, ready=2)},
    succeeded={
        "conditions": [_condition("Complete", "AllJobsCompleted", "jobset completed")],
        "jobsStatus": _jobs_status(active=0, ready=0, succeeded=2),
    },
    failed={
        "conditions": [
            _condition("Failed", "FailedJobs", "jobset failed due to one or more job failures")
        ],
        "jobsStatus": _jobs_status(active=1, ready=1, failed=1),
    },
    # Trainer v2.3 (trainjob_types.go, constants.go) on activeDeadlineSeconds.
    deadline={
        "conditions": [
            _condition("Failed", "DeadlineExceeded", "TrainJob exceeded its active deadline")
        ]
    },
)
FLAVORS = pytest.mark.parametrize("flavor", [TFJOB, TRAINJOB], ids=["tfjob", "trainjob"])


# --- the cluster a Trainer pod finds ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Team:
    """A profile namespace: the service account the shipped RBAC file binds, its token, and the
    Trainer's Pod object."""

    namespace: str
    token: str
    trainer_uid: str


def _rbac_documents(flavor: Flavor) -> list[dict]:
    with open(os.path.join(ROOT, "kubeflow", flavor.rbac)) as handle:
        return [document for document in yaml.safe_load_all(handle) if document]


def _trainer_pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": ACCOUNT,
            "containers": [{"name": "main", "image": "registry.example.com/tfx-scaleout:1"}],
        },
    }


def _token(kube, namespace: str) -> str:
    from kubernetes import client as k8s

    request = k8s.CoreV1Api(kube.api_client()).create_namespaced_service_account_token(
        ACCOUNT, namespace, {"spec": {"expirationSeconds": 3600}}
    )
    return request.status.token


@pytest.fixture(scope="module")
def teams(kube) -> dict[str, Team]:
    """Per launcher: its namespace, the account bound by its RBAC file (`kubectl apply -n`),
    and the Trainer's pod; for TrainJob the runtime the platform team applied."""
    result = {}
    for flavor in (TFJOB, TRAINJOB):
        namespace = flavor.namespace
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        kube.apply(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}},
            namespace,
        )
        for document in _rbac_documents(flavor):
            kube.apply(document, namespace)
        trainer = kube.apply(_trainer_pod(TRAINER_POD), namespace)
        result[flavor.kind] = Team(namespace, _token(kube, namespace), trainer["metadata"]["uid"])
    return result


class Operator:
    """Writes what the operator, JobSet and the kubelet would, as the cluster admin: the job's
    status, its pods and their states, Warning events. A step runs each time the launcher
    sleeps; the last state stays."""

    def __init__(self, kube, flavor: Flavor, namespace: str, name: str):
        from kubernetes import client as k8s

        admin = kube.api_client()
        self.custom = k8s.CustomObjectsApi(admin)
        self.core = k8s.CoreV1Api(admin)
        self.flavor, self.namespace, self.name = flavor, namespace, name
        self.steps: list = []
        self.sleeps: list[float] = []
        self.job: dict = {}  # as the server returned it after the last status write

    def script(self, *steps) -> None:
        """Steps of (the job's status or None, [(a worker pod's phase, its state), ...]), or of
        a function to call (e.g. an event)."""
        self.steps = list(steps)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.steps:
            step = self.steps.pop(0)
            if callable(step):
                step()
            else:
                self.write(*step)

    def write(self, status: dict | None, pods: list[tuple[str, dict]]) -> None:
        if status is not None:
            self.job = self.custom.patch_namespaced_custom_object_status(
                trainjob.GROUP if self.flavor is TRAINJOB else tfjob.GROUP,
                trainjob.VERSION if self.flavor is TRAINJOB else tfjob.VERSION,
                self.namespace,
                self.flavor.plural,
                self.name,
                {"status": status},
            )
        for index, (phase, state) in enumerate(pods):
            self.pod(f"{self.name}-worker-{index}", phase, **state)

    def pod(self, name: str, phase: str, **state) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.read_namespaced_pod(name, self.namespace)
        except ApiException as error:
            assert error.status == 404, error
            self.core.create_namespaced_pod(
                self.namespace,
                {
                    "metadata": {"name": name, "labels": {self.flavor.pod_label: self.name}},
                    "spec": {
                        "serviceAccountName": ACCOUNT,
                        "containers": [{"name": self.flavor.worker_container, "image": IMAGE}],
                    },
                },
            )
        status = pod(name, phase, {}, container=self.flavor.worker_container, **state)["status"]
        # A status patch merges: once scheduled, the scheduler's condition says so.
        status.setdefault("conditions", [{"type": "PodScheduled", "status": "True"}])
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    def warn(self, pod_name: str, reason: str, message: str) -> None:
        event = warning(pod_name, reason, message)
        event["involvedObject"]["namespace"] = self.namespace
        event["source"] = {"component": "kubelet"}
        self.core.create_namespaced_event(self.namespace, event)


def _task(tmp_path, flavor: Flavor, settings=None) -> TrainTask:
    return TrainTask(
        train_files=["gs://bucket/t-0"],
        eval_files=["gs://bucket/e-0"],
        transform_output="gs://bucket/tg",
        serving_model_dir=str(tmp_path / "serving"),
        model_run_dir=str(tmp_path / "run"),
        label_key="species",
        settings=TrainingConfig(
            strategy=SPEC.strategy, workers=SPEC.workers, launcher=settings or flavor.settings
        ),
    )


def _apply_runtime(kube, settings, namespace: str, spec=SPEC) -> None:
    """The platform team applied the runtime (run_kubeflow.py manifests)."""
    from kubernetes.client.exceptions import ApiException

    try:
        kube.apply(trainjob.runtime_manifest(spec, settings, namespace), namespace)
    except ApiException as error:
        assert error.status == 409, error  # applied by an earlier test


def _launcher(kube, team: Team, flavor: Flavor, tmp_path, clock=None, **changes):
    """A launcher as it runs in the Trainer's pod (namespace file, KFP_POD_NAME), with the
    Trainer's service account token; and the operator that follows its job."""
    from kubernetes import client as k8s

    namespace_file = tmp_path / "namespace"
    namespace_file.write_text(team.namespace + "\n")
    settings = dataclasses.replace(flavor.settings, **changes)
    if flavor is TRAINJOB:
        _apply_runtime(kube, settings, settings.namespace or team.namespace)
    task = _task(tmp_path, flavor, settings)
    operator = Operator(
        kube, flavor, settings.namespace or team.namespace, kubernetes_job.job_name(task)
    )
    account = kube.api_client(team.token)
    launcher = flavor.launcher(
        settings,
        custom_api=k8s.CustomObjectsApi(account),
        core_api=k8s.CoreV1Api(account),
        sleep=operator.sleep,
        clock=clock or (lambda: 0.0),
        namespace_file=str(namespace_file),
        environ={"KFP_POD_NAME": TRAINER_POD},
    )
    return launcher, operator, task


def _job(kube, flavor: Flavor, namespace: str, name: str) -> dict:
    from kubernetes import client as k8s

    launcher = flavor.launcher
    return k8s.CustomObjectsApi(kube.api_client()).get_namespaced_custom_object(
        launcher.GROUP, launcher.VERSION, namespace, flavor.plural, name
    )


def _deleted(kube, flavor: Flavor, namespace: str, name: str) -> bool:
    """Deleted with propagationPolicy Foreground: gone once the garbage collector removed its
    dependents and its finalizer; without one the server keeps it, marked for deletion."""
    from kubernetes.client.exceptions import ApiException

    try:
        metadata = _job(kube, flavor, namespace, name)["metadata"]
    except ApiException as error:
        assert error.status == 404, error
        return True
    return bool(metadata.get("deletionTimestamp")) and "foregroundDeletion" in (
        metadata.get("finalizers") or []
    )


@FLAVORS
@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_success_reports_progress_owns_and_deletes_the_job(kube, teams, flavor, tmp_path, caplog):
    team = teams[flavor.kind]
    launcher, operator, task = _launcher(kube, team, flavor, tmp_path)
    unschedulable = {"unschedulable": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}
    operator.script(
        (None, [("Pending", unschedulable), ("Pending", unschedulable)]),
        (flavor.running, [("Running", {}), ("Running", {})]),
        (flavor.running, [("Running", {}), ("Running", {})]),
        (flavor.succeeded, [("Succeeded", {}), ("Succeeded", {})]),
    )
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        launcher.run(SPEC, task)

    name = operator.name
    job = operator.job
    # The Trainer pod's namespace, service account and ownership, as the server stored them.
    assert job["metadata"]["namespace"] == team.namespace
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": TRAINER_POD,
            "uid": team.trainer_uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }
    ]
    assert ACCOUNT in yaml.safe_dump(job["spec"])
    assert TrainTask.load(str(tmp_path / "run" / flavor.kind.lower() / "task.json")) == task
    assert _deleted(kube, flavor, team.namespace, name)
    assert operator.sleeps == [1.0, 1.0, 1.0, 1.0]
    lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert f"{flavor.kind} {team.namespace}/{name} created" in lines
    assert any("Pending (unschedulable: 0/3 nodes are available" in x for x in lines), lines
    running = [x for x in lines if f"{name}-worker-0 Running, {name}-worker-1 Running" in x]
    assert len(running) == 1  # an unchanged state is reported once
    assert any(f"{name}-worker-1 Succeeded" in x for x in lines)
    assert f"{flavor.kind} {team.namespace}/{name} deleted" in lines


@FLAVORS
@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_deadline_exceeded_is_named_with_its_flag(kube, teams, flavor, tmp_path):
    team = teams[flavor.kind]
    launcher, operator, task = _launcher(kube, team, flavor, tmp_path, active_deadline_seconds=600)
    operator.script(
        (flavor.running, [("Running", {}), ("Running", {})]),
        (flavor.deadline, [("Failed", {}), ("Failed", {})]),
    )
    with pytest.raises(cluster.ClusterError) as error:
        launcher.run(SPEC, task)
    assert flavor.deadline["conditions"][-1]["message"] in str(error.value)
    assert "(deadline 600s, --job_deadline_seconds)" in str(error.value)
    spec = _job(kube, flavor, team.namespace, operator.name)["spec"]
    deadline = spec.get("activeDeadlineSeconds") or spec["runPolicy"]["activeDeadlineSeconds"]
    assert deadline == 600


@FLAVORS
@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_launcher_stops_waiting_when_the_operator_ignores_the_deadline(
    kube, teams, flavor, tmp_path
):
    team = teams[flavor.kind]
    times = iter([0.0, 100.0, 100.0 + 60 + kubernetes_job.DEADLINE_GRACE_SECONDS])
    launcher, operator, task = _launcher(
        kube, team, flavor, tmp_path, clock=lambda: next(times), active_deadline_seconds=60
    )
    operator.script((flavor.running, [("Running", {})]))
    with pytest.raises(cluster.ClusterError, match=r"did not finish within its deadline of 60s"):
        launcher.run(SPEC, task)


_SIGTERM_CHILD = textwrap.dedent(
    """
    import sys
    from components.training import cluster, kubernetes_job, tfjob, trainjob
    from components.training.settings import TFJobConfig, TrainJobConfig

    kind, namespace = sys.argv[1], sys.argv[2]
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
    placement = kubernetes_job.Placement(namespace=namespace)
    # No clients passed: the launcher loads the kubeconfig (KUBECONFIG), as on a workstation.
    if kind == "TFJob":
        launcher = tfjob.TFJobLauncher(
            TFJobConfig(image="img", poll_seconds=0.05, delete_policy="never")
        )
    else:
        launcher = trainjob.TrainJobLauncher(
            TrainJobConfig(image="img", poll_seconds=0.05, delete_policy="never")
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
@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_sigterm_deletes_the_job_whatever_the_policy(kube, teams, flavor, tmp_path):
    from kubernetes.client.exceptions import ApiException

    team = teams[flavor.kind]
    kubeconfig = kube.write_kubeconfig(str(tmp_path / "kubeconfig"), team.token, team.namespace)
    child = subprocess.Popen(
        [sys.executable, "-c", _SIGTERM_CHILD, flavor.kind, team.namespace],
        cwd=ROOT,
        env=dict(os.environ, KUBECONFIG=kubeconfig),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        job = None
        while job is None and time.monotonic() < deadline and child.poll() is None:
            try:
                job = _job(kube, flavor, team.namespace, "tfx-train-sigterm")
            except ApiException as error:
                assert error.status == 404, error
                time.sleep(0.1)
        assert job is not None, "the job was never created"
        # Let it wait a few polls, then cancel it as Kubernetes cancels a pod.
        time.sleep(1.0)
        child.send_signal(signal.SIGTERM)
        output, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 3, output
    assert "cancelled: the Trainer was cancelled (SIGTERM)" in output
    assert _deleted(kube, flavor, team.namespace, "tfx-train-sigterm")


@FLAVORS
@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_a_retried_trainer_follows_the_job_and_becomes_an_owner(kube, teams, flavor, tmp_path):
    team = teams[flavor.kind]
    launcher, operator, task = _launcher(kube, team, flavor, tmp_path)
    # An earlier Trainer pod (since deleted) created the job.
    earlier = kube.apply(_trainer_pod("earlier-trainer"), team.namespace)
    earlier_owner = kubernetes_job.OwnerPod(
        "earlier-trainer", earlier["metadata"]["uid"], team.namespace
    )
    manifest = launcher.manifest(
        operator.name,
        SPEC,
        "gs://b/task.json",
        kubernetes_job.Placement(team.namespace, ACCOUNT, earlier_owner),
    )
    kube.apply(manifest, team.namespace)
    operator.write(flavor.succeeded, [])
    launcher.run(SPEC, task)
    owners = _job(kube, flavor, team.namespace, operator.name)["metadata"]["ownerReferences"]
    assert [owner["uid"] for owner in owners] == [earlier["metadata"]["uid"], team.trainer_uid]


@FLAVORS
@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_a_job_in_another_namespace_is_not_owned_by_the_trainer_pod(kube, teams, flavor, tmp_path):
    team = teams[flavor.kind]
    other = f"{flavor.namespace}-training"
    # The platform team let the Trainer's account run jobs there too: the same Role, bound to
    # the account of the profile namespace.
    from kubernetes.client.exceptions import ApiException

    try:
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
        for document in _rbac_documents(flavor):
            if document["kind"] == "RoleBinding":
                document["subjects"][0]["namespace"] = team.namespace
            kube.apply(document, other)
    except ApiException as error:
        assert error.status == 409, error
    launcher, operator, task = _launcher(kube, team, flavor, tmp_path, namespace=other)
    operator.script((flavor.succeeded, []))
    launcher.run(SPEC, task)
    job = _job(kube, flavor, other, operator.name)
    assert "ownerReferences" not in job["metadata"]
    # The Trainer pod's account lives in its own namespace: the job's namespace default is used.
    assert ACCOUNT not in yaml.safe_dump(job["spec"])


@FLAVORS
@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_the_role_allows_the_launcher_and_refuses_what_it_does_not_need(kube, teams, flavor):
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    team = teams[flavor.kind]
    account = kube.api_client(team.token)
    core = k8s.CoreV1Api(account)
    custom = k8s.CustomObjectsApi(account)
    # What the launcher reads is allowed ...
    assert core.read_namespaced_pod(TRAINER_POD, team.namespace).metadata.uid == team.trainer_uid
    core.list_namespaced_pod(team.namespace, label_selector=f"{flavor.pod_label}=x")
    core.list_namespaced_event(team.namespace, field_selector="involvedObject.name=x")
    # ... and what it does not need is refused, in its namespace and elsewhere.
    other = TRAINJOB if flavor is TFJOB else TFJOB
    refused = [
        lambda: core.delete_namespaced_pod(TRAINER_POD, team.namespace),
        lambda: core.delete_namespaced_pod(TRAINER_POD, other.namespace),
        lambda: core.list_namespaced_secret(team.namespace),
        lambda: core.list_namespaced_pod(other.namespace),
        lambda: custom.list_namespaced_custom_object(
            flavor.launcher.GROUP, flavor.launcher.VERSION, team.namespace, flavor.plural
        ),
        lambda: custom.create_namespaced_custom_object(
            other.launcher.GROUP,
            other.launcher.VERSION,
            team.namespace,
            other.plural,
            {"apiVersion": f"{other.launcher.GROUP}/{other.launcher.VERSION}", "kind": other.kind},
        ),
        lambda: custom.create_namespaced_custom_object(
            flavor.launcher.GROUP,
            flavor.launcher.VERSION,
            other.namespace,
            flavor.plural,
            {
                "apiVersion": f"{flavor.launcher.GROUP}/{flavor.launcher.VERSION}",
                "kind": flavor.kind,
            },
        ),
    ]
    for call in refused:
        with pytest.raises(ApiException) as error:
            call()
        assert error.value.status == 403, error.value.body
        assert f"system:serviceaccount:{team.namespace}:{ACCOUNT}" in error.value.body


@FLAVORS
@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_deleting_the_trainer_pod_garbage_collects_its_job(kube, teams, flavor, tmp_path):
    """A cancelled KFP run deletes the Trainer's pod: kube-controller-manager's garbage
    collector deletes the job that pod owns (the fixture runs it)."""
    from kubernetes import client as k8s

    team = teams[flavor.kind]
    launcher, operator, _ = _launcher(kube, team, flavor, tmp_path)
    pod = kube.apply(_trainer_pod(f"trainer-gc-{flavor.kind.lower()}"), team.namespace)
    owner = kubernetes_job.OwnerPod(pod["metadata"]["name"], pod["metadata"]["uid"], team.namespace)
    placement = kubernetes_job.Placement(team.namespace, ACCOUNT, owner)
    launcher._create(
        launcher.manifest(operator.name, SPEC, "gs://b/task.json", placement),
        team.namespace,
        owner,
    )
    assert not _deleted(kube, flavor, team.namespace, operator.name)
    k8s.CoreV1Api(kube.api_client()).delete_namespaced_pod(owner.name, team.namespace)
    deadline = time.monotonic() + 60
    while not _deleted(kube, flavor, team.namespace, operator.name):
        assert time.monotonic() < deadline, "the garbage collector left the job"
        time.sleep(0.2)


@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_owner_references_that_block_deletion_need_rights_on_the_pod(kube, teams, tmp_path):
    """Why the launcher sets blockOwnerDeletion: false (OwnerReferencesPermissionEnforcement)."""
    from kubernetes.client.exceptions import ApiException

    team = teams[TFJOB.kind]
    launcher, operator, _ = _launcher(kube, team, TFJOB, tmp_path)
    placement = launcher.placement()
    assert placement.owner is not None and placement.owner.uid == team.trainer_uid
    manifest = launcher.manifest(operator.name, SPEC, "gs://b/task.json", placement)
    manifest["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = True
    with pytest.raises(ApiException) as error:
        launcher.custom_api.create_namespaced_custom_object(
            tfjob.GROUP, tfjob.VERSION, team.namespace, tfjob.PLURAL, manifest
        )
    assert error.value.status == 403 and "cannot set blockOwnerDeletion" in error.value.body


@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_gpu_pool_settings_reach_only_gpu_pods(kube, teams, tmp_path):
    team = teams[TRAINJOB.kind]
    pool = GpuPool(node_selector=(("pool", "gpu"),))
    launcher, operator, _ = _launcher(kube, team, TRAINJOB, tmp_path, gpu_pool=pool)
    spec = cluster.ClusterSpec("parameter_server", workers=2, ps=1)
    manifest = launcher.manifest(operator.name, spec, "gs://b/t.json", launcher.placement())
    _apply_runtime(kube, launcher.settings, team.namespace, spec)
    launcher.preflight(spec, launcher.placement())
    stored = kube.apply(manifest, team.namespace, dry_run=True)
    patches = {
        p["name"]: p["template"]["spec"]["template"]["spec"]
        for p in stored["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
            "replicatedJobs"
        ]
    }
    assert patches["node"]["nodeSelector"] == {"pool": "gpu"}
    assert "nodeSelector" not in patches["coordinator"] and "nodeSelector" not in patches["ps"]


# --- against the fake API: what the real control plane here cannot show -----------------------


def _fake_launcher(fake, flavor: Flavor, tmp_path, **changes):
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text(flavor.namespace + "\n")
    fake.owner_pods[flavor.namespace, TRAINER_POD] = owner_pod(
        flavor.namespace, TRAINER_POD, "uid-trainer", ACCOUNT
    )
    settings = dataclasses.replace(flavor.settings, **changes)
    if flavor is TRAINJOB:
        runtime = trainjob.runtime_manifest(SPEC, settings, flavor.namespace)
        fake.objects["trainingruntimes", flavor.namespace, runtime["metadata"]["name"]] = runtime
    custom, core = fake.clients()
    return flavor.launcher(
        settings,
        custom_api=custom,
        core_api=core,
        sleep=lambda seconds: None,
        namespace_file=str(namespace_file),
        environ={"KFP_POD_NAME": TRAINER_POD},
    )


@FLAVORS
def test_a_failed_pods_last_log_line_is_in_the_error(fake_kube, flavor, tmp_path):
    """The log comes from the pod's kubelet, which this project's control plane does not run."""
    task = _task(tmp_path, flavor)
    name = kubernetes_job.job_name(task)
    failed_pod = f"{name}-worker-1"
    labels = {flavor.pod_label: name}
    failed = {
        "conditions": [dict(c, status="True") for c in flavor.failed.get("conditions", [])]
        or [{"type": "Failed", "status": "True"}]
    }
    fake_kube.script(
        (
            failed,
            [
                pod(f"{name}-worker-0", "Running", labels, container=flavor.worker_container),
                pod(
                    failed_pod,
                    "Failed",
                    labels,
                    container=flavor.worker_container,
                    terminated=(1, "Error"),
                ),
            ],
        )
    )
    fake_kube.logs[failed_pod] = (
        "Traceback (most recent call last):\nValueError: shapes (3,) (4,)\n"
    )
    launcher = _fake_launcher(fake_kube, flavor, tmp_path)
    with pytest.raises(cluster.ClusterError) as error:
        launcher.run(SPEC, task)
    assert "last output: ValueError: shapes (3,) (4,)" in str(error.value)
    (log_request,) = fake_kube.calls("get", "pods/log")
    assert log_request.path.endswith(f"/pods/{failed_pod}/log")
    assert log_request.query["container"] == flavor.worker_container


@FLAVORS
def test_missing_operator_says_what_to_install(fake_kube, flavor, tmp_path):
    """A cluster without the CRD (the real control plane here has them all)."""
    fake_kube.plurals.discard(flavor.plural)
    launcher = _fake_launcher(fake_kube, flavor, tmp_path)
    with pytest.raises(cluster.ClusterError, match=re.escape(f"install {launcher.OPERATOR}")):
        launcher.run(SPEC, _task(tmp_path, flavor))


@FLAVORS
@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_a_user_run_fn_runs_in_every_pod_of_the_job(kube, teams, flavor, tmp_path):
    """A user's run_fn on a multi-worker strategy (components.tfx_components.trainer): the same
    job, every pod running the task entry point on a RunFnTask, which carries the staged user
    module and TFX's artifacts, so each pod rebuilds FnArgs and calls the function."""
    import json

    from components import user_code
    from components.training.run_fn_task import RunFnTask

    team = teams[flavor.kind]
    launcher, operator, train_task = _launcher(kube, team, flavor, tmp_path)
    module = user_code.UserModule("mine", "gs://bucket/root/_user_code/abc", "abc", "mine.py")
    task = RunFnTask(
        run_fn="mine.run_fn",
        input_dict=json.dumps({"examples": []}),
        output_dict=json.dumps({"model": []}),
        exec_properties=json.dumps({"custom_config": '{"hidden": [4]}'}),
        model_run_dir=train_task.model_run_dir,
        user_module=module.to_json(),
        settings=train_task.settings,
    )
    operator.script(
        (flavor.running, [("Running", {}), ("Running", {})]),
        (flavor.succeeded, [("Succeeded", {}), ("Succeeded", {})]),
    )
    launcher.run(SPEC, task)

    task_file = str(tmp_path / "run" / flavor.kind.lower() / "task.json")
    assert training_loop.load_task(task_file) == task
    # Every pod reads that file: the TFJob's command names it, the TrainJob's pods get it in
    # TASK_ENV for the runtime's command (components.training.run_task).
    stored = yaml.safe_dump(operator.job)
    assert task_file in stored
    if flavor is TFJOB:
        assert "components.training.run_task" in stored
