"""TFJob launcher: multi-worker training as a Kubeflow Training Operator v1 TFJob (kubeflow.org/v1).

The Training Operator v1 lives on as its legacy 1.9 branch (its successor, Kubeflow Trainer v2,
has no TFJob: components.training.trainjob). Every pod runs the local launcher's command
(`python -m components.training.run_task --task URI`) with the TF_CONFIG the operator sets; the
shared machinery (placement, owner reference, SIGTERM cleanup, waiting, failure reporting) is
components.training.kubernetes_job.

  multi_worker_mirrored  Worker x N (worker 0 is the chief)
  parameter_server       Chief x 1 (the coordinator, no GPU), Worker x N, PS x M (no GPU)

Hardening: pods without Istio sidecars, restartPolicy ExitCode (a code error fails the job at
once, a killed pod is restarted), runPolicy.activeDeadlineSeconds, optional gang scheduling
(runPolicy.schedulingPolicy: the operator creates a PodGroup for the gang scheduler it was
started with, --gang-scheduler-name), and an ownerReference to the Trainer's pod.
"""

from __future__ import annotations

from components.training import cluster
from components.training.kubernetes_job import (
    TRAINING_POD_ANNOTATIONS,
    TRAINING_POD_LABELS,
    JobStatus,
    KubernetesJobLauncher,
    OwnerPod,
    Placement,
    container_env,
    true_conditions,
)
from components.training.settings import TFJobConfig

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "tfjobs", "TFJob"
# The operator runs the container with this name and labels every pod of a job.
CONTAINER_NAME = "tensorflow"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS"}


def _replica_counts(spec: cluster.ClusterSpec) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task_type, _ in spec.tasks():
        counts[task_type] = counts.get(task_type, 0) + 1
    return counts


def pod_template(
    settings: TFJobConfig, task_type: str, command: list[str], service_account: str = ""
):
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
        env=[k8s.V1EnvVar(**env) for env in container_env()],
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
        metadata=k8s.V1ObjectMeta(
            labels=dict(TRAINING_POD_LABELS), annotations=dict(TRAINING_POD_ANNOTATIONS)
        ),
        spec=k8s.V1PodSpec(
            containers=[container],
            volumes=volumes or None,
            service_account_name=service_account or None,
            security_context=_security_context(settings),
            node_selector=node_selector,
            tolerations=tolerations,
        ),
    )


def _security_context(settings: TFJobConfig):
    from kubernetes import client as k8s

    if settings.run_as_user < 0:
        return None
    user = settings.run_as_user
    return k8s.V1PodSecurityContext(run_as_user=user, run_as_group=user)


def tfjob_manifest(
    name: str,
    spec: cluster.ClusterSpec,
    command: list[str],
    settings: TFJobConfig,
    placement: Placement | None = None,
) -> dict:
    """The TFJob as the API server takes it (plain JSON types, camelCase keys). Without a
    placement (a dry run): the configured namespace and service account, no owner."""
    from kubernetes import client as k8s

    placement = placement or Placement(settings.namespace, settings.service_account)
    counts = _replica_counts(spec)
    replica_specs = {}
    for task_type, count in counts.items():
        replica_specs[REPLICA_TYPES[task_type]] = {
            "replicas": count,
            "restartPolicy": settings.restart_policy,
            "template": pod_template(settings, task_type, command, placement.service_account),
        }
    run_policy: dict[str, object] = {
        "cleanPodPolicy": settings.clean_pod_policy,
        "backoffLimit": settings.backoff_limit,
        "activeDeadlineSeconds": settings.active_deadline_seconds,
    }
    if settings.gang_scheduling != "none":
        run_policy["schedulingPolicy"] = {
            # Every task or none: a half-scheduled cluster would hold its GPUs and never train.
            "minAvailable": sum(counts.values()),
            "scheduleTimeoutSeconds": settings.gang_schedule_timeout_seconds,
        }
    manifest = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": k8s.V1ObjectMeta(
            name=name,
            namespace=placement.namespace or None,
            labels={"app.kubernetes.io/part-of": "tfx-scaleout", "strategy": _label(spec)},
            owner_references=_owner_references(placement.owner),
        ),
        "spec": {"runPolicy": run_policy, "tfReplicaSpecs": replica_specs},
    }
    return k8s.ApiClient().sanitize_for_serialization(manifest)


def _label(spec: cluster.ClusterSpec) -> str:
    return spec.strategy.replace("_", "-")


def _owner_references(owner: OwnerPod | None):
    from kubernetes import client as k8s

    if owner is None:
        return None
    reference = owner.reference()
    return [
        k8s.V1OwnerReference(
            api_version=reference["apiVersion"],
            kind=reference["kind"],
            name=reference["name"],
            uid=reference["uid"],
            controller=reference["controller"],
            block_owner_deletion=reference["blockOwnerDeletion"],
        )
    ]


def job_status(job: dict) -> JobStatus:
    """The operator's latest true condition: Created, Running, Restarting, Succeeded, Failed
    (Pending before the operator saw the job)."""
    conditions = true_conditions(job)
    if not conditions:
        return JobStatus("Pending")
    latest = conditions[-1]
    kind = latest.get("type", "")
    state = kind if kind in ("Succeeded", "Failed") else "Running"
    return JobStatus(
        state=state,
        detail=kind,
        reason=latest.get("reason", "") if kind == "Failed" else "",
        message=latest.get("message", "") if kind == "Failed" else "",
    )


class TFJobLauncher(KubernetesJobLauncher):
    """components.training.cluster.Launcher that runs the cluster as a TFJob and waits for it."""

    GROUP, VERSION, PLURAL, KIND = GROUP, VERSION, PLURAL, KIND
    POD_LABEL = JOB_NAME_LABEL
    OPERATOR = "the Kubeflow Training Operator v1 (release 1.9)"

    def __init__(self, settings: TFJobConfig, command=cluster.pod_command, **options):
        super().__init__(settings, **options)
        self.settings: TFJobConfig = settings
        self.command = command

    def manifest(
        self, name: str, spec: cluster.ClusterSpec, task_uri: str, placement: Placement
    ) -> dict:
        return tfjob_manifest(name, spec, self.command(task_uri), self.settings, placement)

    def status(self, job: dict) -> JobStatus:
        return job_status(job)
