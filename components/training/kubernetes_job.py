"""What the Kubernetes launchers share (tfjob.TFJobLauncher, trainjob.TrainJobLauncher).

A launcher writes the TrainTask next to the model run (shared storage), creates one job object
(a TFJob or a TrainJob) whose pods run `python -m components.training.run_task`, and waits:
pod states are reported as progress, a failed pod's reason, its last Warning event and its last
log line become the error, and the job is deleted per policy. Around that:

- Placement (resolved in the Trainer's pod when the job is launched): the job's namespace is the
  configured one, else the Trainer pod's own (its service account's namespace file; in
  multi-user Kubeflow that is the profile namespace, the only one its RBAC covers). The pods'
  service account is the configured one, else the Trainer pod's own (read from its pod object),
  which carries the pipeline root's storage credentials.
- Ownership: the job gets an ownerReference to the Trainer's pod, so Kubernetes
  garbage-collects it when that pod is deleted (a cancelled KFP run, Argo's pod GC). The pod is
  found by name: KFP_POD_NAME (KFP v2's driver sets it from the downward API in every executor
  pod), else the host name (a pod's host name is its name unless its spec sets a hostname, which
  KFP does not); its uid comes from that pod object. Kubernetes owners must share the
  dependent's namespace: a job in another namespace gets no owner reference and relies on the
  SIGTERM cleanup.
- Cancellation: SIGTERM (what Kubernetes sends the Trainer's container when the run is
  cancelled) deletes the job whatever the delete policy, then fails the Trainer.
- A deadline: the job's own activeDeadlineSeconds (the operator stops it); the launcher stops
  waiting a grace period later in case the operator does not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging as std_logging
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator, Mapping

from components import KERAS_ENV, PROGRESS_LOGGER
from components.training import cluster
from components.training.settings import KubernetesJobConfig

log = std_logging.getLogger("tfx_scaleout.kubernetes")
progress_log = std_logging.getLogger(PROGRESS_LOGGER)

SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
POD_NAME_ENV = "KFP_POD_NAME"
PART_OF = {"app.kubernetes.io/part-of": "tfx-scaleout"}
# Istio's sidecar never exits: a training pod with one would stay Running after training ends.
# The label is what current Istio reads; older releases read the annotation.
ISTIO_INJECT = "sidecar.istio.io/inject"
TRAINING_POD_LABELS = {**PART_OF, ISTIO_INJECT: "false"}
TRAINING_POD_ANNOTATIONS = {ISTIO_INJECT: "false"}
# Waiting reasons that never resolve by themselves: fail at once instead of waiting forever.
FATAL_WAITING_REASONS = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
)
# Terminations of a container whose program never ran (containerd: StartError; Docker:
# ContainerCannotRun), e.g. a command the image does not have.
FATAL_TERMINATED_REASONS = ("StartError", "ContainerCannotRun")
# How long past the job's deadline the launcher keeps waiting for the operator to stop it.
DEADLINE_GRACE_SECONDS = 300
# Past the deadline by this much, the launcher touches the job (an annotation) so that the
# operator reconciles it and applies the deadline: the Training Operator v1.9 schedules that
# check on a work queue its reconciler never reads (pkg/controller.v1/tensorflow/
# tfjob_controller.go:84 sets a FakeWorkQueue, :401 calls AddAfter on it), so a TFJob whose pods
# do not change is never stopped at its deadline (seen on the local cluster).
DEADLINE_CHECK_MARGIN_SECONDS = 10
DEADLINE_CHECK_ANNOTATION = "tfx-scaleout.io/deadline-check"


def job_name(task) -> str:
    """Stable per Trainer execution (its model run directory): a retried Trainer pod finds the
    job it created instead of starting a second one."""
    return job_name_for(task.model_run_dir, getattr(task, "JOB_PREFIX", "tfx-train"))


def job_name_for(model_run_dir: str, prefix: str = "tfx-train") -> str:
    """prefix: tfx-train, or tfx-tune for the Tuner's job (components.training.tuner_job)."""
    digest = hashlib.sha1(model_run_dir.encode()).hexdigest()[:12]
    return f"{prefix}-{digest}"


@dataclasses.dataclass(frozen=True)
class OwnerPod:
    """The Trainer's pod: the job's owner."""

    name: str
    uid: str
    namespace: str
    service_account: str = ""

    def reference(self) -> dict:
        # blockOwnerDeletion stays off: setting it needs update rights on the pod's finalizers.
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": self.name,
            "uid": self.uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a job goes, as whom, owned by which pod (None: no owner reference)."""

    namespace: str
    service_account: str = ""
    owner: OwnerPod | None = None


def read_pod_namespace(namespace_file: str = SERVICE_ACCOUNT_NAMESPACE_FILE) -> str:
    """The namespace of the pod this process runs in ("" outside a pod)."""
    try:
        with open(namespace_file) as handle:
            return handle.read().strip()
    except FileNotFoundError:
        return ""


def _kubeconfig_namespace() -> str:
    from kubernetes import config as k8s_config

    try:
        # KUBECONFIG as it is now (the client reads its default once, at import).
        _, context = k8s_config.list_kube_config_contexts(os.environ.get("KUBECONFIG"))
    except (k8s_config.ConfigException, OSError):
        return "default"
    return (context or {}).get("context", {}).get("namespace") or "default"


def find_owner_pod(core_api, namespace: str, pod_name: str) -> OwnerPod | None:
    """The pod named `pod_name` in `namespace` (the Trainer's), or None when it cannot be read."""
    from kubernetes.client.exceptions import ApiException

    try:
        pod = core_api.read_namespaced_pod(pod_name, namespace)
    except ApiException as error:
        log.warning(
            "cannot read the Trainer's pod %s/%s (%s %s): the job gets no owner reference",
            namespace,
            pod_name,
            error.status,
            error.reason,
        )
        return None
    return OwnerPod(
        name=pod.metadata.name,
        uid=pod.metadata.uid,
        namespace=namespace,
        service_account=(pod.spec.service_account_name or "") if pod.spec else "",
    )


def resolve_placement(
    settings: KubernetesJobConfig,
    core_api,
    namespace_file: str = SERVICE_ACCOUNT_NAMESPACE_FILE,
    environ: Mapping[str, str] | None = None,
    hostname: str | None = None,
) -> Placement:
    environ = os.environ if environ is None else environ
    pod_namespace = read_pod_namespace(namespace_file)
    namespace = settings.namespace or pod_namespace or _kubeconfig_namespace()
    owner = None
    if pod_namespace:
        pod_name = environ.get(POD_NAME_ENV) or hostname or socket.gethostname()
        owner = find_owner_pod(core_api, pod_namespace, pod_name)
    if owner and owner.namespace != namespace:
        log.warning(
            "the job goes to namespace %s, the Trainer's pod runs in %s: no owner reference "
            "(Kubernetes owners share the namespace); it is deleted on SIGTERM only",
            namespace,
            owner.namespace,
        )
        owner = None
    service_account = settings.service_account or (owner.service_account if owner else "")
    return Placement(namespace=namespace, service_account=service_account, owner=owner)


def container_env() -> list[dict[str, str]]:
    # The image sets it too; a pod must never fall back to Keras 3 (see DESIGN).
    return [{"name": name, "value": value} for name, value in KERAS_ENV.items()]


def load_kubernetes_config(kubeconfig: str = "") -> None:
    """An explicit kubeconfig file, else the pod's service account, else $KUBECONFIG or
    ~/.kube/config."""
    from kubernetes import config as k8s_config

    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig)
        return
    try:
        k8s_config.load_incluster_config()  # the Trainer's pod: its service account
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()  # a workstation: KUBECONFIG / ~/.kube/config


# A cluster may say what its pods can mount and run (kubeflow.local_cluster writes it): a
# ConfigMap with `shared` (a host folder every pod can mount, at the same path), `pvc` (the claim
# on it, in namespace default), `image` (the project's image as its pods name it) and
# `run_as_user` (the owner of the shared folder).
CLUSTER_INFO = ("kube-public", "tfx-scaleout-cluster")


def cluster_info(kubeconfig: str = "") -> dict[str, str]:
    """The cluster's ConfigMap CLUSTER_INFO ({} when it has none)."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException

    api = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=kubeconfig or None))
    try:
        found = api.read_namespaced_config_map(CLUSTER_INFO[1], CLUSTER_INFO[0])
    except ApiException as error:
        if error.status == 404:
            return {}
        raise
    return dict(found.data or {})


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """A job object's state: Pending, Running, Succeeded or Failed, and what the operator says."""

    state: str
    detail: str = ""
    reason: str = ""
    message: str = ""


def true_conditions(job: dict) -> list[dict]:
    return [
        c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
    ]


@contextlib.contextmanager
def sigterm_cancels() -> Iterator[None]:
    """SIGTERM raises cluster.Cancelled in the main thread while the block runs (once: a second
    signal during cleanup is ignored); the previous handler comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        log.warning("not the main thread: SIGTERM cannot delete the job (owner reference only)")
        yield
        return

    def cancel(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise cluster.Cancelled(f"the Trainer was cancelled ({signal.Signals(signum).name})")

    previous = signal.signal(signal.SIGTERM, cancel)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class KubernetesJobLauncher:
    """cluster.Launcher for one custom job object: create it, follow it, clean it up.

    Subclasses name the resource (GROUP, VERSION, PLURAL, KIND), the pods' label, and build the
    manifest. custom_api / core_api: kubernetes CustomObjectsApi / CoreV1Api (tests pass clients
    for a fake API server); by default built from the in-cluster service account or kubeconfig."""

    GROUP = VERSION = PLURAL = KIND = ""
    # The label every pod of a job carries: KEY=<job name>.
    POD_LABEL = ""
    # What to install when the API server does not know the resource.
    OPERATOR = ""

    def __init__(
        self,
        settings: KubernetesJobConfig,
        custom_api=None,
        core_api=None,
        sleep=time.sleep,
        clock=time.monotonic,
        namespace_file: str = SERVICE_ACCOUNT_NAMESPACE_FILE,
        environ: Mapping[str, str] | None = None,
    ):
        self.settings = settings
        if custom_api is None or core_api is None:
            from kubernetes import client as k8s

            load_kubernetes_config(settings.kubeconfig)
            custom_api = custom_api or k8s.CustomObjectsApi()
            core_api = core_api or k8s.CoreV1Api()
        self.custom_api = custom_api
        self.core_api = core_api
        self.sleep = sleep
        self.clock = clock
        self.namespace_file = namespace_file
        self.environ = environ

    # --- what a subclass provides -------------------------------------------------------------

    def manifest(
        self, name: str, spec: cluster.ClusterSpec, task_uri: str, placement: Placement
    ) -> dict:
        raise NotImplementedError

    def status(self, job: dict) -> JobStatus:
        raise NotImplementedError

    def preflight(self, spec: cluster.ClusterSpec, placement: Placement) -> None:
        """Checks before the job is created (e.g. that its runtime exists)."""

    # --- the run ------------------------------------------------------------------------------

    def placement(self) -> Placement:
        return resolve_placement(
            self.settings, self.core_api, self.namespace_file, environ=self.environ
        )

    def run(self, spec: cluster.ClusterSpec, task) -> None:
        spec.validate()
        import tensorflow as tf

        from components.training import staging

        name = job_name(task)
        # KFP's launcher's local copies (a minio:// or s3:// root) onto the job's volume.
        with staging.staged_task(
            task, name, self.settings.mount_path, self.settings.pvc_name, self.KIND
        ) as job_task:
            task_dir = os.path.join(job_task.model_run_dir, self.KIND.lower())
            tf.io.gfile.makedirs(task_dir)
            task_uri = os.path.join(task_dir, "task.json")
            job_task.save(task_uri)
            placement = self.placement()
            self.preflight(spec, placement)
            self.run_manifest(self.manifest(name, spec, task_uri, placement), placement)

    def run_manifest(self, manifest: dict, placement: Placement) -> None:
        name = manifest["metadata"]["name"]
        namespace = placement.namespace
        outcome = "failed"
        with sigterm_cancels():
            try:
                self._create(manifest, namespace, placement.owner)
                self._wait(namespace, name)
                outcome = "succeeded"
            except cluster.Cancelled:
                outcome = "cancelled"
                raise
            finally:
                policy = self.settings.delete_policy
                if (
                    outcome == "cancelled"
                    or policy == "always"
                    or (policy == "on_success" and outcome == "succeeded")
                ):
                    self._delete(namespace, name)

    def _create(self, manifest: dict, namespace: str, owner: OwnerPod | None) -> None:
        from kubernetes.client.exceptions import ApiException

        name = manifest["metadata"]["name"]
        what = f"{self.KIND} {namespace}/{name}"
        try:
            self.custom_api.create_namespaced_custom_object(
                self.GROUP, self.VERSION, namespace, self.PLURAL, manifest
            )
        except ApiException as error:
            if error.status == 409:
                if self.status(self._get(namespace, name)).state == "Failed":
                    # A retry should retry: an earlier Trainer's failed job is replaced.
                    progress_log.info("%s exists and failed (an earlier Trainer's): replaced", what)
                    self._delete(namespace, name)
                    self._wait_deleted(namespace, name)
                    self._create(manifest, namespace, owner)
                    return
                log.info("%s exists (a retried Trainer); following it", what)
                self._adopt(namespace, name, owner)
                return
            if error.status == 404:
                raise cluster.ClusterError(
                    f"{what}: the API server has no {self.PLURAL}.{self.GROUP}/{self.VERSION}; "
                    f"install {self.OPERATOR}"
                ) from error
            raise cluster.ClusterError(
                f"{what} was rejected ({error.status} {error.reason}): {body_message(error)}"
            ) from error
        progress_log.info("%s created", what)

    def _wait_deleted(self, namespace: str, name: str, timeout: float = 120) -> None:
        from kubernetes.client.exceptions import ApiException

        deadline = self.clock() + timeout
        while self.clock() < deadline:
            try:
                self.custom_api.get_namespaced_custom_object(
                    self.GROUP, self.VERSION, namespace, self.PLURAL, name
                )
            except ApiException as error:
                if error.status == 404:
                    return
                raise
            self.sleep(1.0)
        raise cluster.ClusterError(
            f"{self.KIND} {namespace}/{name} was not deleted in {timeout:.0f}s"
        )

    def _adopt(self, namespace: str, name: str, owner: OwnerPod | None) -> None:
        """A job an earlier Trainer pod created: this pod becomes an owner too, so the earlier
        pod's deletion does not garbage-collect the job this one follows."""
        if owner is None:
            return
        job = self.custom_api.get_namespaced_custom_object(
            self.GROUP, self.VERSION, namespace, self.PLURAL, name
        )
        references = list((job.get("metadata") or {}).get("ownerReferences") or [])
        if any(reference.get("uid") == owner.uid for reference in references):
            return
        self._patch_metadata(namespace, name, {"ownerReferences": [*references, owner.reference()]})

    def _patch_metadata(self, namespace: str, name: str, metadata: dict) -> None:
        self.custom_api.patch_namespaced_custom_object(
            self.GROUP, self.VERSION, namespace, self.PLURAL, name, {"metadata": metadata}
        )

    def _get(self, namespace: str, name: str) -> dict:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom_api.get_namespaced_custom_object(
                self.GROUP, self.VERSION, namespace, self.PLURAL, name
            )
        except ApiException as error:
            if error.status == 404:
                raise cluster.ClusterError(
                    f"{self.KIND} {namespace}/{name} was deleted while the Trainer waited"
                ) from error
            raise

    def _wait(self, namespace: str, name: str) -> None:
        started = self.clock()
        deadline = self.settings.active_deadline_seconds
        give_up_after = deadline + DEADLINE_GRACE_SECONDS
        checked = False
        last_report = None
        restarts = _Restarts()
        while True:
            job = self._get(namespace, name)
            status = self.status(job)
            pods = sorted_pods(
                self.core_api.list_namespaced_pod(
                    namespace, label_selector=f"{self.POD_LABEL}={name}"
                ).items
            )
            report = f"{self.KIND} {name}: {status.detail or status.state}"
            if pods:
                report += "; " + ", ".join(f"{pod.metadata.name} {pod_state(pod)}" for pod in pods)
            if report != last_report:
                progress_log.info("%s", report)
                last_report = report
            self._report_restarts(namespace, name, pods, restarts)
            if status.state == "Succeeded":
                return
            fatal = next((pod for pod in pods if fatal_waiting(pod)), None)
            if status.state == "Failed" or fatal is not None:
                raise cluster.ClusterError(self._failure(namespace, name, status, pods, restarts))
            waited = self.clock() - started
            if not checked and waited > deadline + DEADLINE_CHECK_MARGIN_SECONDS:
                checked = self._ask_for_deadline_check(namespace, name)
            if waited > give_up_after:
                # Whatever the delete policy: its pods would otherwise run on past the deadline.
                self._delete(namespace, name)
                raise cluster.ClusterError(
                    f"{self.KIND} {namespace}/{name} did not finish within its deadline of "
                    f"{self.settings.active_deadline_seconds}s (--job_deadline_seconds) and the "
                    f"operator did not stop it, so the launcher deleted it; last state: {report}"
                )
            self.sleep(self.settings.poll_seconds)

    def _ask_for_deadline_check(self, namespace: str, name: str) -> bool:
        """Touches the job so that its operator reconciles it now and applies the deadline."""
        from kubernetes.client.exceptions import ApiException

        progress_log.info(
            "%s %s: past its deadline of %ds (--job_deadline_seconds); asking the operator to "
            "apply it",
            self.KIND,
            name,
            self.settings.active_deadline_seconds,
        )
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        try:
            self._patch_metadata(
                namespace, name, {"annotations": {DEADLINE_CHECK_ANNOTATION: stamp}}
            )
        except ApiException as error:
            log.warning("could not annotate %s %s for its deadline: %s", self.KIND, name, error)
        return True

    def _report_restarts(self, namespace: str, name: str, pods: list, restarts: _Restarts) -> None:
        """A pod the operator recreated (or a container it restarted) is reported, and once it
        trains, the epoch it resumed at (the line `training starts at epoch N/M` its task logs):
        a resume from the last backup, or a start from epoch 1 that the output shows."""
        for pod in pods:
            change = restarts.observe(pod)
            if change:
                progress_log.info("%s %s: pod %s %s", self.KIND, name, pod.metadata.name, change)
            if pod.metadata.uid not in restarts.failures:
                failure = self._pod_failure_text(namespace, pod)
                if failure:
                    # Read now: the operator may delete and recreate this pod before the job's
                    # state says Failed, and its log and events go with it.
                    restarts.failures[pod.metadata.uid] = failure
        for pod in pods:
            if pod.metadata.uid not in restarts.pending or pod.status.phase != "Running":
                continue
            text = self._log_text(namespace, pod.metadata.name, "")
            found = RESUME_LINE.search(text or "")
            if found:
                restarts.pending.discard(pod.metadata.uid)
                epoch, epochs = int(found.group(1)), int(found.group(2))
                how = (
                    "resumed from the last backup"
                    if epoch > 1
                    else "started from epoch 1 (no backup yet)"
                )
                progress_log.info(
                    "%s %s: pod %s %s: training starts at epoch %d/%d",
                    self.KIND,
                    name,
                    pod.metadata.name,
                    how,
                    epoch,
                    epochs,
                )

    def _log_text(self, namespace: str, pod_name: str, container: str) -> str:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.core_api.read_namespaced_pod_log(
                pod_name, namespace, container=container or None, tail_lines=200
            )
        except ApiException:
            return ""

    def _failure(
        self, namespace: str, name: str, status: JobStatus, pods: list, restarts: _Restarts
    ) -> str:
        message = f"{self.KIND} {namespace}/{name} failed"
        if status.reason or status.message:
            message += f": {': '.join(x for x in (status.reason, status.message) if x)}"
        if status.reason == "DeadlineExceeded" or "deadline" in status.message.lower():
            message += (
                f" (deadline {self.settings.active_deadline_seconds}s, --job_deadline_seconds)"
            )
        # _report_restarts recorded every failed pod of this poll, and of earlier ones.
        for pod in pods:
            failure = restarts.failures.get(pod.metadata.uid)
            if failure:
                return message + failure
        if restarts.failures:
            # Every failed pod was already replaced (a retryable exit, then the backoff limit):
            # the last failure seen while waiting is the cause.
            return message + list(restarts.failures.values())[-1] + " (that pod was since replaced)"
        events = self._job_events(namespace, name)
        if events:
            message += "; events: " + " | ".join(events)
        return message

    def _pod_failure_text(self, namespace: str, pod) -> str:
        """`; pod NAME why; event: ...; last output: ...` for a failed pod, "" otherwise."""
        container, reason = pod_failure(pod)
        if not reason:
            return ""
        text = f"; pod {pod.metadata.name} {reason}"
        event = self._last_warning(namespace, pod.metadata.name, pod.metadata.uid)
        if event:
            text += f"; event: {event}"
        tail = self._log_tail(namespace, pod.metadata.name, container)
        if tail:
            text += f"; last output: {tail}"
        return text

    def _job_events(self, namespace: str, name: str, keep: int = 3) -> list[str]:
        """The last Warning events, and the operator's `ExitedWithCode` notes, of the job and of
        every object named after it (its pods, a TrainJob's JobSet and Jobs): they outlive pods
        the operator deleted before the launcher saw them fail."""
        from kubernetes.client.exceptions import ApiException

        try:
            events = self.core_api.list_namespaced_event(namespace).items or []
        except ApiException:
            return []
        found = [
            event
            for event in events
            if (event.type == "Warning" or event.reason == "ExitedWithCode")
            and event.involved_object is not None
            and (event.involved_object.name or "").startswith(name)
        ]
        found.sort(key=_event_time)
        texts: list[str] = []
        for event in found:
            text = f"{event.involved_object.name} {event.reason}: {(event.message or '').strip()}"
            if text not in texts:
                texts.append(text[-300:])
        return texts[-keep:]

    def _last_warning(self, namespace: str, pod_name: str, pod_uid: str = "") -> str:
        """The pod's last Warning event: this pod's (by uid), not an earlier pod's of the same
        name (the operators name a job's pods by job and index)."""
        from kubernetes.client.exceptions import ApiException

        selector = f"involvedObject.name={pod_name}"
        if pod_uid:
            selector += f",involvedObject.uid={pod_uid}"
        try:
            events = self.core_api.list_namespaced_event(namespace, field_selector=selector).items
        except ApiException:
            return ""
        warnings = [event for event in events or [] if event.type == "Warning"]
        if not warnings:
            return ""
        last = warnings[-1]
        return f"{last.reason}: {(last.message or '').strip()}"[-400:]

    def _log_tail(self, namespace: str, pod_name: str, container: str) -> str:
        from kubernetes.client.exceptions import ApiException

        try:
            text = self.core_api.read_namespaced_pod_log(
                pod_name, namespace, container=container or None, tail_lines=20
            )
        except ApiException:
            return ""
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line or "Exception" in line]
        return (errors[-1] if errors else " | ".join(lines[-2:]))[-600:]

    def _delete(self, namespace: str, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom_api.delete_namespaced_custom_object(
                self.GROUP,
                self.VERSION,
                namespace,
                self.PLURAL,
                name,
                propagation_policy="Foreground",
            )
            progress_log.info("%s %s/%s deleted", self.KIND, namespace, name)
        except ApiException as error:
            if error.status != 404:
                log.warning("could not delete %s %s: %s", self.KIND, name, error)


# What a training task logs when its first epoch begins (components.training.loop.EpochProgress).
RESUME_LINE = re.compile(r"training starts at epoch (\d+)/(\d+)")


class _Restarts:
    """Each pod name's last uid and container restart count, across the launcher's polls."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, int]] = {}
        # pod uid -> its failure, its last Warning event and last log line, read when first seen
        self.failures: dict[str, str] = {}
        # uids of pods that were recreated or restarted, until their resume line is read
        self.pending: set[str] = set()

    def observe(self, pod) -> str:
        uid = pod.metadata.uid
        count = sum(c.restart_count or 0 for c in pod.status.container_statuses or [])
        before = self.seen.get(pod.metadata.name)
        self.seen[pod.metadata.name] = (uid, count)
        if before is None:
            return ""
        if before[0] != uid:
            self.pending.add(uid)
            return "was recreated by the operator"
        if count > before[1]:
            self.pending.add(uid)
            return f"restarted (restart {count})"
        return ""


def _event_time(event) -> float:
    when = event.last_timestamp or event.event_time or event.first_timestamp
    return when.timestamp() if when is not None else 0.0


def sorted_pods(pods: list) -> list:
    return sorted(pods, key=lambda pod: pod.metadata.name)


def pod_state(pod) -> str:
    """Phase, with the container's waiting reason or an unschedulable note when there is one."""
    status = pod.status
    for container in status.container_statuses or []:
        waiting = container.state.waiting if container.state else None
        if waiting and waiting.reason and waiting.reason != "ContainerCreating":
            return f"{status.phase} ({waiting.reason})"
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return f"{status.phase} (unschedulable: {condition.message or condition.reason})"
    return status.phase or "Unknown"


def fatal_waiting(pod) -> bool:
    """A container that waits for what never comes (an image that cannot be pulled), or whose
    program could not even start (a command the image does not have): restarting it cannot
    help."""
    for container in pod.status.container_statuses or []:
        waiting = container.state.waiting if container.state else None
        if waiting and waiting.reason in FATAL_WAITING_REASONS:
            return True
        for state in (container.state, container.last_state):
            terminated = state.terminated if state else None
            if terminated and terminated.reason in FATAL_TERMINATED_REASONS:
                return True
    return False


def pod_failure(pod) -> tuple[str, str]:
    """(container, why) a pod failed: a terminated container's reason and exit code (OOMKilled,
    Error), a fatal waiting reason (image pull), or the pod's own reason (Evicted); why is ""
    when it did not fail."""
    first = ""
    for container in pod.status.container_statuses or []:
        first = first or container.name
        state = container.last_state if container.state and container.state.running else None
        for candidate in (container.state, state):
            terminated = candidate.terminated if candidate else None
            if terminated and terminated.exit_code:
                text = f"{terminated.reason or 'terminated'} (exit code {terminated.exit_code})"
                message = terminated.message.strip() if terminated.message else ""
                return container.name, text + (f": {message}" if message else "")
        waiting = container.state.waiting if container.state else None
        if waiting and waiting.reason in FATAL_WAITING_REASONS:
            return container.name, f"{waiting.reason}: {waiting.message or ''}".rstrip(": ")
    if pod.status.phase == "Failed":
        why = f"{pod.status.reason or 'Failed'}: {pod.status.message or ''}".rstrip(": ")
        return first, why
    return first, ""


def body_message(error) -> str:
    try:
        return json.loads(error.body).get("message", error.body)
    except (TypeError, ValueError, AttributeError):
        return str(error.body)
