"""Both Kubernetes launchers (TFJob, TrainJob) on the local cluster (`local_cluster`), through the
real kubernetes client, as a Trainer pod's service account bound by the shipped RBAC file
(kubeflow/tfjob-rbac.yaml, trainjob-rbac.yaml) and nothing else: a call the role lacks fails the
test with the server's 403.

Every job here is reconciled by the operator's own controller (the Training Operator v1.9,
Kubeflow Trainer v2.3 with JobSet) and its pods run `python -m components.training.run_task` in
the project's image on the node's kubelet: nothing writes a job's or a pod's status but them. The
pods run a user's run_fn (a RunFnTask with a staged module on the shared folder, as
components.tfx_components.trainer hands it), which writes one file per TF_CONFIG task, sleeps or
raises, so a job takes seconds, not a training run.

Each team is a profile namespace as multi-user Kubeflow makes it: the account `default-editor`
bound by the shipped Role, a running Trainer pod of that account, and a claim on the shared folder
(a platform team's PersistentVolume). Covered: placement in the Trainer pod's namespace with its
service account and an owner reference to that pod, progress and an unchanged state reported
once, success and deletion, a failing run_fn's reason and last log line (each operator's own
failure path), the operator's deadline and the launcher's own give-up, SIGTERM, a retried Trainer
adopting the job, a job in another namespace, the garbage collector deleting the job and its
pods with the Trainer's pod, the admission rule that blockOwnerDeletion: false avoids, and the
calls outside the role refused. Multi-worker training itself, a killed worker, image and command
failures: tests/kubeflow/test_local_cluster.py."""

from __future__ import annotations

import dataclasses
import json
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

from components import PROGRESS_LOGGER, user_code
from components.training import cluster, kubernetes_job, tfjob, trainjob
from components.training import settings as settings_lib
from components.training.run_fn_task import RunFnTask
from components.training.settings import GpuPool, TFJobConfig, TrainingConfig, TrainJobConfig
from pipeline import datasets
from tests.kubeflow.conftest import CLUSTER_PACKAGES

ROOT = datasets.PROJECT_ROOT
ACCOUNT = "default-editor"  # the subject of the shipped RoleBindings
TRAINER_POD = "tfx-pipeline-abc-trainer-123"
SPEC = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
pytestmark = [pytest.mark.slow, pytest.mark.system_packages(*CLUSTER_PACKAGES)]

# The user's module: what each pod of the job runs (components.training.run_fn_task).
USER_MODULE = textwrap.dedent(
    """
    import json
    import os
    import time


    def _task():
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        return f"{task['type']}-{task['index']}"


    def run_fn(fn_args):
        os.makedirs(fn_args.serving_model_dir, exist_ok=True)
        path = os.path.join(fn_args.serving_model_dir, _task())
        with open(path, "w") as handle:
            json.dump(fn_args.custom_config, handle)
        print("run_fn done on", _task(), flush=True)


    def wait(fn_args):
        print("run_fn waiting on", _task(), flush=True)
        time.sleep(3600)


    def fail(fn_args):
        print("loading the examples", flush=True)
        raise ValueError("shapes (3,) (4,) do not match")
    """
)


@dataclasses.dataclass(frozen=True)
class Flavor:
    """What differs between the launchers, as the operators report it."""

    kind: str
    config: type
    launcher: type
    plural: str
    pod_label: str
    rbac: str
    namespace: str
    # The operator's own words when activeDeadlineSeconds passes (Training Operator v1.9
    # pkg/controller.v1/common/job.go; Trainer v2.3 pkg/constants/constants.go:88).
    deadline_message: str


TFJOB = Flavor(
    kind="TFJob",
    config=TFJobConfig,
    launcher=tfjob.TFJobLauncher,
    plural="tfjobs",
    pod_label=tfjob.JOB_NAME_LABEL,
    rbac="tfjob-rbac.yaml",
    namespace="team-tfjob",
    deadline_message="was active longer than specified deadline",
)
TRAINJOB = Flavor(
    kind="TrainJob",
    config=TrainJobConfig,
    launcher=trainjob.TrainJobLauncher,
    plural="trainjobs",
    pod_label=trainjob.JOBSET_NAME_LABEL,
    rbac="trainjob-rbac.yaml",
    namespace="team-trainjob",
    deadline_message="TrainJob exceeded its active deadline",
)
FLAVORS = pytest.mark.parametrize("flavor", [TFJOB, TRAINJOB], ids=["tfjob", "trainjob"])


# --- the teams: profile namespaces with the shipped RBAC, a Trainer pod and the shared folder ---


@dataclasses.dataclass(frozen=True)
class Team:
    namespace: str
    token: str
    trainer_uid: str
    pvc: str


def _rbac_documents(flavor: Flavor) -> list[dict]:
    with open(os.path.join(ROOT, "kubeflow", flavor.rbac)) as handle:
        return [document for document in yaml.safe_load_all(handle) if document]


def _trainer_pod(name: str, image: str) -> dict:
    """A Trainer's pod as KFP runs it: the profile's account, running (here: waiting)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": ACCOUNT,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"]}],
        },
    }


def _create(api, document: dict, namespace: str = "") -> dict:
    """Creates `document`, or reads it back when an earlier test of the session made it."""
    from kubernetes.client.exceptions import ApiException

    try:
        return api.apply(document, namespace)
    except ApiException as error:
        assert error.status == 409, error
        where = document["metadata"].get("namespace") or namespace
        if not api.is_namespaced(document["apiVersion"], document["kind"]):
            where = ""
        return api.get(
            document["apiVersion"], document["kind"], document["metadata"]["name"], where
        )


def _namespace(api, namespace: str, local_cluster, flavor: Flavor, account_from: str = "") -> str:
    """A namespace the flavor's Role is bound in (to the account of `account_from`, default its
    own), with a claim on the shared folder; returns the claim's name."""
    _create(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    _create(
        api,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}},
        namespace,
    )
    for document in _rbac_documents(flavor):
        if document["kind"] == "RoleBinding":
            document["subjects"][0]["namespace"] = account_from or namespace
        _create(api, document, namespace)
    pvc = "shared"
    volume = f"shared-{namespace}"
    _create(
        api,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": local_cluster.shared, "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": pvc},
            },
        },
    )
    _create(
        api,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": pvc},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
        namespace,
    )
    return pvc


def _token(api, namespace: str) -> str:
    from kubernetes import client as k8s

    request = k8s.CoreV1Api(api.api_client()).create_namespaced_service_account_token(
        ACCOUNT, namespace, {"spec": {"expirationSeconds": 3600}}
    )
    return request.status.token


@pytest.fixture(scope="module")
def api(local_cluster):
    return local_cluster.api()


@pytest.fixture(scope="module")
def teams(local_cluster, api) -> dict[str, Team]:
    result = {}
    for flavor in (TFJOB, TRAINJOB):
        pvc = _namespace(api, flavor.namespace, local_cluster, flavor)
        trainer = _create(
            api, _trainer_pod(TRAINER_POD, local_cluster.info["image"]), flavor.namespace
        )
        result[flavor.kind] = Team(
            flavor.namespace, _token(api, flavor.namespace), trainer["metadata"]["uid"], pvc
        )
    return result


@pytest.fixture(scope="module")
def staged_module(local_cluster) -> user_code.UserModule:
    """The user's module staged on the shared folder, as the runner stages a module_file."""
    digest = "launcher-tests"
    folder = os.path.join(local_cluster.shared, "_user_code", digest)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "mine.py"), "w") as handle:
        handle.write(USER_MODULE)
    with open(os.path.join(folder, user_code.MANIFEST_FILE), "w") as handle:
        json.dump({"modules": ["mine"]}, handle)
    return user_code.UserModule("mine", folder, digest, "mine.py")


def _settings(local_cluster, flavor: Flavor, team: Team, **changes):
    from pipeline.launcher_flags import LOCAL_WORKER

    values = dict(
        image=local_cluster.info["image"],
        worker=LOCAL_WORKER,
        pvc_name=team.pvc,
        mount_path=local_cluster.shared,
        run_as_user=os.stat(local_cluster.shared).st_uid,
        poll_seconds=1.0,
    )
    if flavor is TRAINJOB:
        values["chief"] = LOCAL_WORKER
    values.update(changes)
    return flavor.config(**values)


def _run_fn_task(local_cluster, module, name: str, function: str = "run_fn") -> RunFnTask:
    """The task every pod runs: TFX's artifacts as the Trainer's executor passes them."""
    from tfx.types import artifact_utils, standard_artifacts

    run = os.path.join(local_cluster.shared, "launcher-runs", name, str(time.time_ns()))
    examples = standard_artifacts.Examples()
    examples.uri = os.path.join(run, "examples")
    examples.split_names = '["train", "eval"]'
    model = standard_artifacts.Model()
    model.uri = os.path.join(run, "model")
    model_run = standard_artifacts.ModelRun()
    model_run.uri = os.path.join(run, "model_run")
    return RunFnTask(
        run_fn=f"mine.{function}",
        input_dict=artifact_utils.jsonify_artifact_dict({"examples": [examples]}),
        output_dict=artifact_utils.jsonify_artifact_dict(
            {"model": [model], "model_run": [model_run]}
        ),
        exec_properties=json.dumps(
            {
                "custom_config": json.dumps({"hidden": [4]}),
                "train_args": json.dumps({"num_steps": 10}),
                "eval_args": json.dumps({"num_steps": 5}),
            }
        ),
        model_run_dir=model_run.uri,
        user_module=module.to_json(),
        settings=TrainingConfig(strategy=SPEC.strategy, workers=SPEC.workers),
    )


def _apply_runtime(api, settings, namespace: str, spec=SPEC) -> None:
    """The platform team applied the runtime (run_kubeflow.py manifests)."""
    _create(api, trainjob.runtime_manifest(spec, settings, namespace), namespace)


def _launcher(api, flavor: Flavor, team: Team, settings, tmp_path, clock=time.monotonic):
    """A launcher as it runs in the Trainer's pod (namespace file, KFP_POD_NAME), with the
    Trainer's service account token."""
    from kubernetes import client as k8s

    namespace_file = tmp_path / "namespace"
    namespace_file.write_text(team.namespace + "\n")
    if flavor is TRAINJOB:
        _apply_runtime(api, settings, settings.namespace or team.namespace)
    account = api.api_client(team.token)
    return flavor.launcher(
        settings,
        custom_api=k8s.CustomObjectsApi(account),
        core_api=k8s.CoreV1Api(account),
        clock=clock,
        namespace_file=str(namespace_file),
        environ={"KFP_POD_NAME": TRAINER_POD},
    )


def _job(api, flavor: Flavor, namespace: str, name: str) -> dict:
    launcher = flavor.launcher
    return api.get(f"{launcher.GROUP}/{launcher.VERSION}", flavor.kind, name, namespace)


def _gone(api, flavor: Flavor, namespace: str, name: str, timeout: float = 180) -> None:
    """The job and every pod of it are deleted within `timeout` (the garbage collector removes
    the dependents of a Foreground deletion first)."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    core = k8s.CoreV1Api(api.api_client())
    deadline = time.monotonic() + timeout
    while True:
        try:
            _job(api, flavor, namespace, name)
            job_left = True
        except ApiException as error:
            assert error.status == 404, error
            job_left = False
        pods = core.list_namespaced_pod(namespace, label_selector=f"{flavor.pod_label}={name}")
        if not job_left and not pods.items:
            return
        assert time.monotonic() < deadline, (job_left, [p.metadata.name for p in pods.items])
        time.sleep(1)


def _progress(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]


# --- what the operators do with the launchers' jobs -------------------------------------------


@FLAVORS
def test_success_runs_the_run_fn_in_every_pod_owns_and_deletes_the_job(
    local_cluster, api, teams, staged_module, flavor, tmp_path, caplog
):
    team = teams[flavor.kind]
    settings = _settings(local_cluster, flavor, team)
    launcher = _launcher(api, flavor, team, settings, tmp_path)
    task = _run_fn_task(local_cluster, staged_module, f"success-{flavor.kind.lower()}")
    name = kubernetes_job.job_name(task)
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        launcher.run(SPEC, task)

    # Every pod rebuilt TFX's FnArgs and called the user's function with its own TF_CONFIG.
    serving = os.path.join(os.path.dirname(task.model_run_dir), "model", "Format-Serving")
    assert sorted(os.listdir(serving)) == ["worker-0", "worker-1"]
    with open(os.path.join(serving, "worker-1")) as handle:
        assert json.load(handle) == {"hidden": [4]}
    lines = _progress(caplog)
    assert f"{flavor.kind} {team.namespace}/{name} created" in lines
    assert any(re.search(rf"{name}: (Succeeded|Complete)", line) for line in lines), lines
    # A state is reported when it changes, never twice in a row.
    reports = [line for line in lines if line.startswith(f"{flavor.kind} {name}:")]
    assert all(a != b for a, b in zip(reports, reports[1:], strict=False)), reports
    assert f"{flavor.kind} {team.namespace}/{name} deleted" in lines
    _gone(api, flavor, team.namespace, name)


@FLAVORS
def test_placement_is_the_trainer_pods_namespace_account_and_ownership(
    local_cluster, api, teams, flavor, tmp_path
):
    """What the job is created with, as the server stored it (a dry run: nothing runs)."""
    team = teams[flavor.kind]
    launcher = _launcher(api, flavor, team, _settings(local_cluster, flavor, team), tmp_path)
    placement = launcher.placement()
    manifest = launcher.manifest("tfx-train-placement", SPEC, "/unused/task.json", placement)
    job = api.apply(manifest, team.namespace, dry_run=True)
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


@FLAVORS
def test_a_failing_run_fn_fails_the_trainer_with_the_pods_reason_and_last_log_line(
    local_cluster, api, teams, staged_module, flavor, tmp_path
):
    team = teams[flavor.kind]
    launcher = _launcher(api, flavor, team, _settings(local_cluster, flavor, team), tmp_path)
    task = _run_fn_task(local_cluster, staged_module, f"fail-{flavor.kind.lower()}", "fail")
    with pytest.raises(cluster.ClusterError) as failure:
        launcher.run(SPEC, task)
    message = str(failure.value)
    assert re.search(rf"{flavor.kind} {team.namespace}/tfx-train-\w+ failed", message), message
    assert re.search(r"pod tfx-train-\S+ Error \(exit code 1\)", message), message
    assert "last output: ValueError: shapes (3,) (4,) do not match" in message, message


@FLAVORS
def test_the_operators_deadline_is_named_with_its_flag(
    local_cluster, api, teams, staged_module, flavor, tmp_path, caplog
):
    """The operator stops a job at its deadline. The Training Operator v1.9 only applies it when
    something makes it reconcile the TFJob (its timed requeue is a no-op): the launcher touches
    the job 10 s past the deadline, and the operator fails it in its own words."""
    team = teams[flavor.kind]
    settings = _settings(local_cluster, flavor, team, active_deadline_seconds=20)
    launcher = _launcher(api, flavor, team, settings, tmp_path)
    task = _run_fn_task(local_cluster, staged_module, f"deadline-{flavor.kind.lower()}", "wait")
    started = time.monotonic()
    with (
        caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER),
        pytest.raises(cluster.ClusterError) as failure,
    ):
        launcher.run(SPEC, task)
    message = str(failure.value)
    assert flavor.deadline_message in message, message
    assert "(deadline 20s, --job_deadline_seconds)" in message, message
    # Stopped by the operator, well before the launcher's own give-up (deadline + 300 s).
    assert time.monotonic() - started < 20 + kubernetes_job.DEADLINE_GRACE_SECONDS / 2
    if flavor is TFJOB:
        assert any("asking the operator to apply it" in line for line in _progress(caplog))


@FLAVORS
def test_the_launcher_stops_waiting_when_the_job_outlives_its_deadline(
    local_cluster, api, teams, staged_module, flavor, tmp_path
):
    """A job the operator has not stopped by the deadline plus the grace period (the clock is the
    launcher's own, moved on): the launcher gives up with the last state, here a pod the
    scheduler cannot place, in the scheduler's words, and deletes the job whatever the delete
    policy."""
    from components.training.settings import Resources

    team = teams[flavor.kind]
    settings = _settings(
        local_cluster, flavor, team, worker=Resources(cpu=64), active_deadline_seconds=60
    )
    if flavor is TRAINJOB:
        settings = dataclasses.replace(settings, chief=Resources(cpu=64))
    started = time.monotonic()

    def clock() -> float:
        # Real time for 20 s (the pods are created and found unschedulable), then past the
        # deadline and the grace period.
        elapsed = time.monotonic() - started
        return elapsed if elapsed < 20 else elapsed + 60 + kubernetes_job.DEADLINE_GRACE_SECONDS

    launcher = _launcher(api, flavor, team, settings, tmp_path, clock=clock)
    task = _run_fn_task(local_cluster, staged_module, f"outlived-{flavor.kind.lower()}", "wait")
    name = kubernetes_job.job_name(task)
    with pytest.raises(cluster.ClusterError) as failure:
        launcher.run(SPEC, task)
    message = str(failure.value)
    assert "did not finish within its deadline of 60s" in message, message
    assert "so the launcher deleted it" in message
    _gone(api, flavor, team.namespace, name)
    assert re.search(
        r"Pending \(unschedulable: 0/1 nodes are available: .*Insufficient cpu", message
    )


_SIGTERM_CHILD = textwrap.dedent(
    """
    import json, sys
    from components.training import cluster, kubernetes_job, trainjob
    from components.training import settings as settings_lib
    from components.training.settings import TrainJobConfig

    settings, task_file, namespace = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    placement = kubernetes_job.Placement(namespace=namespace)
    # No clients passed: the launcher loads the kubeconfig (KUBECONFIG), as on a workstation.
    launcher = trainjob.TrainJobLauncher(settings_lib.from_dict(TrainJobConfig, settings))
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
    manifest = launcher.manifest("tfx-train-sigterm", spec, task_file, placement)
    try:
        launcher.run_manifest(manifest, placement)
    except cluster.Cancelled as error:
        print("cancelled:", error, flush=True)
        sys.exit(3)
    """
)


def test_sigterm_deletes_the_job_and_its_pods_whatever_the_policy(
    local_cluster, api, teams, staged_module, tmp_path
):
    from kubernetes import client as k8s

    flavor, team = TRAINJOB, teams[TRAINJOB.kind]
    settings = _settings(local_cluster, flavor, team, delete_policy="never")
    _apply_runtime(api, settings, team.namespace)
    task = _run_fn_task(local_cluster, staged_module, "sigterm", "wait")
    task_file = os.path.join(task.model_run_dir, "task.json")
    os.makedirs(task.model_run_dir, exist_ok=True)
    task.save(task_file)
    kubeconfig = api.write_kubeconfig(str(tmp_path / "kubeconfig"), team.token, team.namespace)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SIGTERM_CHILD,
            settings_lib.dumps(settings),
            task_file,
            team.namespace,
        ],
        cwd=ROOT,
        env=dict(os.environ, KUBECONFIG=kubeconfig),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    core = k8s.CoreV1Api(api.api_client())
    selector = f"{flavor.pod_label}=tfx-train-sigterm"
    try:
        deadline = time.monotonic() + 180
        running = False
        while not running and child.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
            pods = core.list_namespaced_pod(team.namespace, label_selector=selector).items
            running = len(pods) == 2 and all(pod.status.phase == "Running" for pod in pods)
        assert child.poll() is None, child.communicate()[0]
        assert running, [(pod.metadata.name, pod.status.phase) for pod in pods]
        # Cancel it as Kubernetes cancels the Trainer's pod.
        child.send_signal(signal.SIGTERM)
        output, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 3, output
    assert "cancelled: the Trainer was cancelled (SIGTERM)" in output
    _gone(api, flavor, team.namespace, "tfx-train-sigterm")


def test_a_retried_trainer_follows_the_job_and_becomes_an_owner(
    local_cluster, api, teams, staged_module, tmp_path
):
    """The job an earlier attempt of the Trainer (its pod since failed) created is adopted, not
    created twice, and finishes under the new Trainer pod as a second owner."""
    flavor, team = TRAINJOB, teams[TRAINJOB.kind]
    settings = _settings(local_cluster, flavor, team, delete_policy="never")
    launcher = _launcher(api, flavor, team, settings, tmp_path)
    task = _run_fn_task(local_cluster, staged_module, "retried")
    name = kubernetes_job.job_name(task)
    earlier = _create(
        api, _trainer_pod("earlier-trainer", local_cluster.info["image"]), team.namespace
    )
    earlier_owner = kubernetes_job.OwnerPod(
        "earlier-trainer", earlier["metadata"]["uid"], team.namespace
    )
    task_file = os.path.join(task.model_run_dir, "task.json")
    os.makedirs(task.model_run_dir, exist_ok=True)
    task.save(task_file)
    manifest = launcher.manifest(
        name, SPEC, task_file, kubernetes_job.Placement(team.namespace, ACCOUNT, earlier_owner)
    )
    launcher._create(manifest, team.namespace, earlier_owner)
    launcher.run(SPEC, task)
    owners = _job(api, flavor, team.namespace, name)["metadata"]["ownerReferences"]
    assert [owner["uid"] for owner in owners] == [earlier["metadata"]["uid"], team.trainer_uid]
    launcher._delete(team.namespace, name)
    _gone(api, flavor, team.namespace, name)


def test_a_job_in_another_namespace_is_not_owned_by_the_trainer_pod(
    local_cluster, api, teams, staged_module, tmp_path
):
    flavor, team = TFJOB, teams[TFJOB.kind]
    other = f"{flavor.namespace}-training"
    # The platform team let the Trainer's account run jobs there too: the same Role, bound to
    # the account of the profile namespace, and a claim on the same storage.
    pvc = _namespace(api, other, local_cluster, flavor, account_from=team.namespace)
    settings = _settings(local_cluster, flavor, team, namespace=other, pvc_name=pvc)
    launcher = _launcher(api, flavor, team, settings, tmp_path)
    task = _run_fn_task(local_cluster, staged_module, "other-namespace")
    name = kubernetes_job.job_name(task)
    launcher.run(SPEC, task)  # deleted on success: read what was created from the task's pods
    serving = os.path.join(os.path.dirname(task.model_run_dir), "model", "Format-Serving")
    assert sorted(os.listdir(serving)) == ["worker-0", "worker-1"]
    manifest = launcher.manifest(name, SPEC, "/unused", launcher.placement())
    assert "ownerReferences" not in manifest["metadata"]
    # The Trainer pod's account lives in its own namespace: the job's namespace default is used.
    assert ACCOUNT not in yaml.safe_dump(manifest["spec"])
    _gone(api, flavor, other, name)


_TRAINER_IN_A_POD = textwrap.dedent(
    """
    import json, sys
    from components.training import cluster, tfjob
    from components.training import loop as training
    from components.training import settings as settings_lib
    from components.training.settings import TFJobConfig

    settings, task_file = json.loads(sys.argv[1]), sys.argv[2]
    # No clients, no namespace, no owner given: in a pod the launcher finds its service account
    # (in-cluster config), its namespace (the account's namespace file) and its own pod
    # (KFP_POD_NAME, from the downward API as KFP sets it), the job's owner.
    launcher = tfjob.TFJobLauncher(settings_lib.from_dict(TFJobConfig, settings))
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
    launcher.run(spec, training.load_task(task_file))
    """
)


def test_the_trainer_in_a_pod_owns_its_tfjob_and_deleting_that_pod_deletes_the_job(
    local_cluster, api, teams, staged_module
):
    """The Kubeflow path: the Trainer's launcher runs in a pod of the project's image as the
    profile's account; the TFJob it creates is in its namespace and owned by its pod, and
    deleting that pod (a cancelled run) deletes the job and its pods (the Trainer's SIGTERM
    handler and the garbage collector both act on it)."""
    from kubernetes import client as k8s

    flavor, team = TFJOB, teams[TFJOB.kind]
    settings = _settings(local_cluster, flavor, team, delete_policy="never")
    task = _run_fn_task(local_cluster, staged_module, "trainer-in-a-pod", "wait")
    task_file = os.path.join(task.model_run_dir, "task.json")
    os.makedirs(task.model_run_dir, exist_ok=True)
    task.save(task_file)
    trainer = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer-in-a-pod"},
        "spec": {
            "serviceAccountName": ACCOUNT,
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": settings.run_as_user},
            "containers": [
                {
                    "name": "main",
                    "image": local_cluster.info["image"],
                    "command": [
                        "python",
                        "-c",
                        _TRAINER_IN_A_POD,
                        settings_lib.dumps(settings),
                        task_file,
                    ],
                    "env": [
                        {
                            "name": kubernetes_job.POD_NAME_ENV,
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        }
                    ],
                    "volumeMounts": [{"name": "shared", "mountPath": local_cluster.shared}],
                }
            ],
            "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": team.pvc}}],
        },
    }
    pod = api.apply(trainer, team.namespace)
    name = kubernetes_job.job_name(task)
    core = k8s.CoreV1Api(api.api_client())
    selector = f"{flavor.pod_label}={name}"
    deadline = time.monotonic() + 240
    while len(core.list_namespaced_pod(team.namespace, label_selector=selector).items) < 2:
        state = core.read_namespaced_pod(pod["metadata"]["name"], team.namespace).status.phase
        assert state in ("Pending", "Running"), core.read_namespaced_pod_log(
            pod["metadata"]["name"], team.namespace
        )[-3000:]
        assert time.monotonic() < deadline, "the Trainer's job never got its pods"
        time.sleep(1)
    job = _job(api, flavor, team.namespace, name)
    assert [(owner["kind"], owner["uid"]) for owner in job["metadata"]["ownerReferences"]] == [
        ("Pod", pod["metadata"]["uid"])
    ]
    assert ACCOUNT in yaml.safe_dump(job["spec"])
    core.delete_namespaced_pod(pod["metadata"]["name"], team.namespace)
    _gone(api, flavor, team.namespace, name)


def test_deleting_the_trainer_pod_garbage_collects_the_trainjob_and_its_pods(
    local_cluster, api, teams, staged_module, tmp_path
):
    """A cancelled KFP run deletes the Trainer's pod: kube-controller-manager's garbage collector
    deletes the TrainJob it owns, and with it the JobSet, its Jobs and their pods. (TFJob:
    tests/kubeflow/test_local_cluster.py.)"""
    from kubernetes import client as k8s

    flavor, team = TRAINJOB, teams[TRAINJOB.kind]
    settings = _settings(local_cluster, flavor, team)
    launcher = _launcher(api, flavor, team, settings, tmp_path)
    pod = _create(api, _trainer_pod("trainer-gc", local_cluster.info["image"]), team.namespace)
    owner = kubernetes_job.OwnerPod(pod["metadata"]["name"], pod["metadata"]["uid"], team.namespace)
    placement = kubernetes_job.Placement(team.namespace, ACCOUNT, owner)
    task = _run_fn_task(local_cluster, staged_module, "gc", "wait")
    task_file = os.path.join(task.model_run_dir, "task.json")
    os.makedirs(task.model_run_dir, exist_ok=True)
    task.save(task_file)
    launcher._create(
        launcher.manifest("tfx-train-gc", SPEC, task_file, placement), team.namespace, owner
    )
    core = k8s.CoreV1Api(api.api_client())
    selector = f"{flavor.pod_label}=tfx-train-gc"
    deadline = time.monotonic() + 180
    while len(core.list_namespaced_pod(team.namespace, label_selector=selector).items) < 2:
        assert time.monotonic() < deadline, "the job's pods were never created"
        time.sleep(1)
    core.delete_namespaced_pod(owner.name, team.namespace)
    _gone(api, flavor, team.namespace, "tfx-train-gc")


# --- what the API server alone decides --------------------------------------------------------


@FLAVORS
def test_the_role_allows_the_launcher_and_refuses_what_it_does_not_need(api, teams, flavor):
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    team = teams[flavor.kind]
    account = api.api_client(team.token)
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


def test_owner_references_that_block_deletion_need_rights_on_the_pod(
    local_cluster, api, teams, tmp_path
):
    """Why the launcher sets blockOwnerDeletion: false (OwnerReferencesPermissionEnforcement)."""
    from kubernetes.client.exceptions import ApiException

    team = teams[TFJOB.kind]
    launcher = _launcher(api, TFJOB, team, _settings(local_cluster, TFJOB, team), tmp_path)
    placement = launcher.placement()
    assert placement.owner is not None and placement.owner.uid == team.trainer_uid
    manifest = launcher.manifest("tfx-train-blocking", SPEC, "/unused/task.json", placement)
    manifest["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = True
    with pytest.raises(ApiException) as error:
        launcher.custom_api.create_namespaced_custom_object(
            tfjob.GROUP, tfjob.VERSION, team.namespace, tfjob.PLURAL, manifest, dry_run="All"
        )
    assert error.value.status == 403 and "cannot set blockOwnerDeletion" in error.value.body


def test_gpu_pool_settings_reach_only_gpu_pods(local_cluster, api, teams, tmp_path):
    team = teams[TRAINJOB.kind]
    pool = GpuPool(node_selector=(("pool", "gpu"),))
    from components.training.settings import Resources

    # GPU workers (the flags' default); a dry run, so nothing waits for a GPU node.
    gpu_worker = Resources(cpu=4, memory_gb=16, gpus=1)
    settings = _settings(local_cluster, TRAINJOB, team, gpu_pool=pool, worker=gpu_worker)
    launcher = _launcher(api, TRAINJOB, team, settings, tmp_path)
    spec = cluster.ClusterSpec("parameter_server", workers=2, ps=1)
    manifest = launcher.manifest("tfx-train-gpu-pool", spec, "/unused", launcher.placement())
    _apply_runtime(api, launcher.settings, team.namespace, spec)
    launcher.preflight(spec, launcher.placement())
    stored = api.apply(manifest, team.namespace, dry_run=True)
    patches = {
        p["name"]: p["template"]["spec"]["template"]["spec"]
        for p in stored["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
            "replicatedJobs"
        ]
    }
    assert patches["node"]["nodeSelector"] == {"pool": "gpu"}
    assert "nodeSelector" not in patches["coordinator"] and "nodeSelector" not in patches["ps"]
