"""TFJob launcher: multi-worker training as a Kubeflow Training Operator TFJob (kubeflow.org/v1).

Implements components.training.cluster.Launcher. The Trainer's run_fn writes the TrainTask JSON
next to the model run (shared storage: gs://, s3:// or a mounted volume), creates a TFJob whose
every pod runs the local launcher's command (`python -m components.training.run_task --task
URI`) with the TF_CONFIG the operator sets, then waits: pod states are reported as progress, a
failed pod's reason (and its last log lines) becomes the error, and the TFJob is deleted per
policy.

  multi_worker_mirrored  Worker x N (worker 0 is the chief)
  parameter_server       Chief x 1 (the coordinator), Worker x N, PS x M

Kubeflow Trainer v2 dropped TFJob; another launcher (e.g. a JobSet) can take this one's place
behind the same interface (components.training.launchers).
"""

from __future__ import annotations

import hashlib
import logging as std_logging
import os
import time

from components import KERAS_ENV, PROGRESS_LOGGER
from components.training import cluster
from components.training.settings import TFJobConfig

log = std_logging.getLogger("tfx_scaleout.tfjob")
progress_log = std_logging.getLogger(PROGRESS_LOGGER)

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "tfjobs", "TFJob"
# The operator runs the container with this name and labels every pod of a job.
CONTAINER_NAME = "tensorflow"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS"}
# Waiting reasons that never resolve by themselves: fail at once instead of waiting forever.
FATAL_WAITING_REASONS = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
)


def job_name(task) -> str:
    """Stable per Trainer execution (its model run directory): a retried Trainer pod finds the
    TFJob it created instead of starting a second one."""
    digest = hashlib.sha1(task.model_run_dir.encode()).hexdigest()[:12]
    return f"tfx-train-{digest}"


def _replica_counts(spec: cluster.ClusterSpec) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task_type, _ in spec.tasks():
        counts[task_type] = counts.get(task_type, 0) + 1
    return counts


def pod_template(settings: TFJobConfig, task_type: str, command: list[str]):
    """The pod of one replica type, built from the kubernetes client's models."""
    from kubernetes import client as k8s

    resources = getattr(settings, task_type)
    quantities = resources.kubernetes()
    mounts, volumes = [], []
    if settings.pvc_name:
        mounts.append(k8s.V1VolumeMount(name="pipeline-root", mount_path=settings.mount_path))
        volumes.append(
            k8s.V1Volume(
                name="pipeline-root",
                persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
                    claim_name=settings.pvc_name
                ),
            )
        )
    container = k8s.V1Container(
        name=CONTAINER_NAME,
        image=settings.image,
        command=list(command),
        # The image sets it too; a pod must never fall back to Keras 3 (see DESIGN).
        env=[k8s.V1EnvVar(name=name, value=value) for name, value in KERAS_ENV.items()],
        resources=k8s.V1ResourceRequirements(
            requests=quantities["requests"] or None, limits=quantities["limits"] or None
        ),
        volume_mounts=mounts or None,
    )
    # Only pods that request GPUs go to the GPU pool.
    pool = settings.gpu_pool if resources.gpus else None
    node_selector = dict(pool.node_selector) if pool and pool.node_selector else None
    tolerations = (
        [k8s.V1Toleration(**t.kubernetes()) for t in pool.tolerations]
        if pool and pool.tolerations
        else None
    )
    return k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(labels={"app.kubernetes.io/part-of": "tfx-scaleout"}),
        spec=k8s.V1PodSpec(
            containers=[container],
            volumes=volumes or None,
            service_account_name=settings.service_account or None,
            node_selector=node_selector,
            tolerations=tolerations,
        ),
    )


def tfjob_manifest(
    name: str, spec: cluster.ClusterSpec, command: list[str], settings: TFJobConfig
) -> dict:
    """The TFJob as the API server takes it (plain JSON types, camelCase keys)."""
    from kubernetes import client as k8s

    replica_specs = {}
    for task_type, count in _replica_counts(spec).items():
        replica_specs[REPLICA_TYPES[task_type]] = {
            "replicas": count,
            "restartPolicy": settings.restart_policy,
            "template": pod_template(settings, task_type, command),
        }
    run_policy = {
        "cleanPodPolicy": settings.clean_pod_policy,
        "backoffLimit": settings.backoff_limit,
    }
    if settings.timeout_seconds:
        run_policy["activeDeadlineSeconds"] = int(settings.timeout_seconds)
    manifest = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": k8s.V1ObjectMeta(
            name=name,
            namespace=settings.namespace,
            labels={
                "app.kubernetes.io/part-of": "tfx-scaleout",
                "strategy": spec.strategy.replace("_", "-"),
            },
        ),
        "spec": {"runPolicy": run_policy, "tfReplicaSpecs": replica_specs},
    }
    return k8s.ApiClient().sanitize_for_serialization(manifest)


def _load_kubernetes_config() -> None:
    from kubernetes import config as k8s_config

    try:
        k8s_config.load_incluster_config()  # the Trainer's pod: its service account
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()  # a workstation: KUBECONFIG / ~/.kube/config


class TFJobLauncher:
    """components.training.cluster.Launcher that runs the cluster as a TFJob and waits for it.

    custom_api / core_api: kubernetes CustomObjectsApi / CoreV1Api (or fakes in tests); by
    default built from the in-cluster service account or the kubeconfig."""

    def __init__(
        self,
        settings: TFJobConfig,
        custom_api=None,
        core_api=None,
        command=cluster.task_command,
        sleep=time.sleep,
        clock=time.monotonic,
    ):
        self.settings = settings
        if custom_api is None or core_api is None:
            from kubernetes import client as k8s

            _load_kubernetes_config()
            custom_api = custom_api or k8s.CustomObjectsApi()
            core_api = core_api or k8s.CoreV1Api()
        self.custom_api = custom_api
        self.core_api = core_api
        self.command = command
        self.sleep = sleep
        self.clock = clock

    def run(self, spec: cluster.ClusterSpec, task) -> None:
        spec.validate()
        import tensorflow as tf

        task_dir = os.path.join(task.model_run_dir, "tfjob")
        tf.io.gfile.makedirs(task_dir)
        task_uri = os.path.join(task_dir, "task.json")
        task.save(task_uri)
        name = job_name(task)
        self.run_manifest(tfjob_manifest(name, spec, self.command(task_uri), self.settings))

    def run_manifest(self, manifest: dict) -> None:
        name = manifest["metadata"]["name"]
        self._create(manifest)
        succeeded = False
        try:
            self._wait(name)
            succeeded = True
        finally:
            policy = self.settings.delete_policy
            if policy == "always" or (policy == "on_success" and succeeded):
                self._delete(name)

    def _create(self, manifest: dict) -> None:
        from kubernetes.client.exceptions import ApiException

        name, namespace = manifest["metadata"]["name"], self.settings.namespace
        try:
            self.custom_api.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, manifest
            )
        except ApiException as error:
            if error.status == 409:
                log.info("TFJob %s/%s exists (a retried Trainer); following it", namespace, name)
                return
            if error.status == 404:
                raise cluster.ClusterError(
                    f"TFJob {namespace}/{name}: the API server has no {PLURAL}.{GROUP}/{VERSION}; "
                    "install the Kubeflow Training Operator (v1)"
                ) from error
            raise cluster.ClusterError(
                f"TFJob {namespace}/{name} was rejected ({error.status} {error.reason}): "
                f"{_body_message(error)}"
            ) from error
        progress_log.info("TFJob %s/%s created", namespace, name)

    def _wait(self, name: str) -> None:
        namespace = self.settings.namespace
        started = self.clock()
        last_report = None
        while True:
            job = self.custom_api.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
            state = job_state(job)
            pods = self.core_api.list_namespaced_pod(
                namespace, label_selector=f"{JOB_NAME_LABEL}={name}"
            ).items
            report = f"TFJob {name}: {state}; " + ", ".join(
                f"{pod.metadata.name} {pod_state(pod)}" for pod in sorted_pods(pods)
            )
            if report != last_report:
                progress_log.info("%s", report.rstrip("; "))
                last_report = report
            if state == "Succeeded":
                return
            fatal = next((pod for pod in pods if _fatal_waiting(pod)), None)
            if state == "Failed" or fatal is not None:
                raise cluster.ClusterError(self._failure(name, job, pods))
            if self.settings.timeout_seconds and (
                self.clock() - started > self.settings.timeout_seconds
            ):
                raise cluster.ClusterError(
                    f"TFJob {namespace}/{name} did not finish within "
                    f"{self.settings.timeout_seconds:g}s; last state: {report}"
                )
            self.sleep(self.settings.poll_seconds)

    def _failure(self, name: str, job: dict, pods: list) -> str:
        condition = latest_condition(job) or {}
        message = f"TFJob {self.settings.namespace}/{name} failed"
        if condition.get("type") == "Failed" and condition.get("message"):
            message += f": {condition['message']}"
        for pod in sorted_pods(pods):
            reason = pod_failure(pod)
            if reason:
                message += f"; pod {pod.metadata.name} {reason}"
                tail = self._log_tail(pod.metadata.name)
                if tail:
                    message += f"; last output: {tail}"
                break
        return message

    def _log_tail(self, pod_name: str) -> str:
        from kubernetes.client.exceptions import ApiException

        try:
            text = self.core_api.read_namespaced_pod_log(
                pod_name, self.settings.namespace, container=CONTAINER_NAME, tail_lines=20
            )
        except ApiException:
            return ""
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line or "Exception" in line]
        return (errors[-1] if errors else " | ".join(lines[-2:]))[-600:]

    def _delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom_api.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                self.settings.namespace,
                PLURAL,
                name,
                propagation_policy="Foreground",
            )
            log.info("deleted TFJob %s/%s", self.settings.namespace, name)
        except ApiException as error:
            if error.status != 404:
                log.warning("could not delete TFJob %s: %s", name, error)


def latest_condition(job: dict) -> dict | None:
    conditions = [
        c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
    ]
    return conditions[-1] if conditions else None


def job_state(job: dict) -> str:
    """Created, Running, Restarting, Succeeded, Failed, or Pending before the operator saw it."""
    condition = latest_condition(job)
    return condition["type"] if condition else "Pending"


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


def _fatal_waiting(pod) -> bool:
    for container in pod.status.container_statuses or []:
        waiting = container.state.waiting if container.state else None
        if waiting and waiting.reason in FATAL_WAITING_REASONS:
            return True
    return False


def pod_failure(pod) -> str:
    """Why a pod failed: a terminated container's reason and exit code (OOMKilled, Error),
    a fatal waiting reason (image pull), or the pod's own reason (Evicted)."""
    for container in pod.status.container_statuses or []:
        state = container.last_state if container.state and container.state.running else None
        for candidate in (container.state, state):
            terminated = candidate.terminated if candidate else None
            if terminated and terminated.exit_code:
                text = f"{terminated.reason or 'terminated'} (exit code {terminated.exit_code})"
                return text + (f": {terminated.message.strip()}" if terminated.message else "")
        waiting = container.state.waiting if container.state else None
        if waiting and waiting.reason in FATAL_WAITING_REASONS:
            return f"{waiting.reason}: {waiting.message or ''}".rstrip(": ")
    if pod.status.phase == "Failed":
        return f"{pod.status.reason or 'Failed'}: {pod.status.message or ''}".rstrip(": ")
    return ""


def _body_message(error) -> str:
    import json

    try:
        return json.loads(error.body).get("message", error.body)
    except (TypeError, ValueError):
        return str(error.body)
