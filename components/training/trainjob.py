"""TrainJob launcher: multi-worker training as a Kubeflow Trainer v2 TrainJob
(trainer.kubeflow.org/v1alpha1, Trainer v2.3), which Trainer runs as a JobSet.

Trainer v2 ships no TensorFlow runtime; this module writes one (`runtime_manifest`, a
TrainingRuntime or ClusterTrainingRuntime that a platform team applies: kubeflow/
trainjob-runtimes.yaml or `run_kubeflow.py manifests`) and the TrainJob that uses it:

  multi_worker_mirrored  replicated job "node": N worker pods (worker 0 is the chief)
  parameter_server       "coordinator" (1 pod, no GPU), "node" (N workers), "ps" (M pods, no GPU)

Each replicated job is one Indexed Job whose pods are the tasks of one TensorFlow task type; a
pod computes its TF_CONFIG from the JobSet's labels, its completion index and the JobSet's stable
host names (components.training.tf_config). What Trainer v2 lets a TrainJob set goes into the
TrainJob: the workers' image, count, resources and task file through `spec.trainer` (Trainer
applies it to the "node" job), and per-run pod settings (service account, GPU node pool,
the pipeline-root volume, the other jobs' task file) through `spec.runtimePatches`. What it
does not (the coordinator's and parameter servers' image, resources and count, restart rules,
gang scheduling) is the runtime's: the launcher reads the runtime first and fails with the first
difference from what the settings expect, instead of running a cluster of the wrong shape.

Restarts follow ExitCode semantics: a pod exiting with 1-127 (a code error) fails its Job
(podFailurePolicy FailJob), which fails the JobSet (failurePolicy rule on reason
PodFailurePolicy); any other failure (killed, preempted, evicted) fails the Job, and the JobSet
recreates every pod, up to max_restarts times (BackupAndRestore resumes).
"""

from __future__ import annotations

from components.training import cluster, tf_config
from components.training.kubernetes_job import (
    PART_OF,
    TRAINING_POD_ANNOTATIONS,
    TRAINING_POD_LABELS,
    JobStatus,
    KubernetesJobLauncher,
    Placement,
    container_env,
    true_conditions,
)
from components.training.settings import Resources, TrainJobConfig

GROUP, VERSION, PLURAL, KIND = "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"
RUNTIME_PLURALS = {
    "TrainingRuntime": "trainingruntimes",
    "ClusterTrainingRuntime": "clustertrainingruntimes",
}
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
# Trainer applies spec.trainer to the container "node" of the trainer-ancestor job, and refuses
# runtime patches that set env on it.
TRAINER_JOB = TRAINER_CONTAINER = "node"
SERVER_CONTAINER = "tensorflow"
# Owner of this launcher's runtime patch (Trainer wants a domain-prefixed path).
PATCH_MANAGER = "tfx-scaleout.io/trainjob-launcher"
# The task file every container reads: Kubernetes expands $(VAR) in the command.
TASK_ENV = "TFX_SCALEOUT_TASK"
# The image's PATH puts the project's virtual environment first (kubeflow/Dockerfile*).
RUNTIME_COMMAND = ["python", "-m", "components.training.run_task", "--task", f"$({TASK_ENV})"]
# Exit codes of a code error (Python exits 1 on an exception); 128 + N is "killed by signal N".
CODE_ERROR_EXIT_CODES = list(range(1, 128))
CODE_ERROR_RULE = "CodeError"


def runtime_name(spec: cluster.ClusterSpec, settings: TrainJobConfig) -> str:
    """The runtime a TrainJob for `spec` uses: the configured one, else the project's for the
    strategy (parameter servers are a runtime property: a TrainJob cannot change their count)."""
    if settings.runtime_name:
        return settings.runtime_name
    if spec.strategy == "parameter_server":
        return f"tfx-scaleout-tf-parameter-server-{spec.ps}ps"
    return "tfx-scaleout-tf-multi-worker"


def _counts(spec: cluster.ClusterSpec) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task_type, _ in spec.tasks():
        counts[task_type] = counts.get(task_type, 0) + 1
    return counts


def _resources(resources: Resources) -> dict:
    quantities = resources.kubernetes()
    return {key: value for key, value in quantities.items() if value}


def _downward_env() -> list[dict]:
    return [
        {"name": env, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}
        for env, label in tf_config.JOBSET_LABELS.items()
    ]


def _replicated_job(task_type: str, count: int, settings: TrainJobConfig) -> dict:
    job = tf_config.REPLICATED_JOBS[task_type]
    trainer = job == TRAINER_JOB
    container: dict = {
        "name": TRAINER_CONTAINER if trainer else SERVER_CONTAINER,
        "image": settings.image,
        "command": list(RUNTIME_COMMAND),
        "env": container_env() + _downward_env(),
        "ports": [{"name": "tf", "containerPort": tf_config.PORT}],
    }
    if not trainer:
        # The workers' resources come from the TrainJob (spec.trainer.resourcesPerNode).
        container["resources"] = _resources(getattr(settings, task_type))
    template: dict = {}
    if trainer:
        template["metadata"] = {"labels": {ANCESTOR_LABEL: "trainer"}}
    template["spec"] = {
        # Trainer sets the workers' count from the TrainJob (spec.trainer.numNodes).
        "parallelism": 1 if trainer else count,
        "completions": 1 if trainer else count,
        "completionMode": "Indexed",
        # Any failure fails the Job: the JobSet restarts all pods or fails (failurePolicy).
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {"operator": "In", "values": CODE_ERROR_EXIT_CODES},
                }
            ]
        },
        "template": {
            "metadata": {
                "labels": dict(TRAINING_POD_LABELS),
                "annotations": dict(TRAINING_POD_ANNOTATIONS),
            },
            "spec": {"restartPolicy": "Never", "containers": [container]},
        },
    }
    return {"name": job, "replicas": 1, "template": template}


def runtime_manifest(
    spec: cluster.ClusterSpec, settings: TrainJobConfig, namespace: str = ""
) -> dict:
    """The TensorFlow runtime for `spec`: a TrainingRuntime in `namespace` (empty: the one it
    is applied to) or a ClusterTrainingRuntime, per settings.runtime_kind."""
    spec.validate()
    counts = _counts(spec)
    primary = tf_config.REPLICATED_JOBS[spec.primary_tasks()[0][0]]
    metadata: dict = {
        "name": runtime_name(spec, settings),
        "labels": {FRAMEWORK_LABEL: "tensorflow", **PART_OF},
    }
    if namespace and settings.runtime_kind == "TrainingRuntime":
        metadata["namespace"] = namespace
    runtime_spec: dict = {
        "mlPolicy": {"numNodes": 1},
        "template": {
            "spec": {
                # Stable host names (<jobset>-<job>-<index>-<pod>.<jobset>), published before
                # the pods are ready: TF_CONFIG names every peer up front.
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                # Parameter servers never exit: the coordinator's success ends the JobSet (which
                # then deletes its active Jobs).
                "successPolicy": {"operator": "All", "targetReplicatedJobs": [primary]},
                "failurePolicy": {
                    "maxRestarts": settings.max_restarts,
                    "rules": [
                        {
                            "name": CODE_ERROR_RULE,
                            "action": "FailJobSet",
                            "onJobFailureReasons": ["PodFailurePolicy"],
                        }
                    ],
                },
                "replicatedJobs": [
                    _replicated_job(task_type, count, settings)
                    for task_type, count in counts.items()
                ],
            }
        },
    }
    if settings.gang_scheduling == "coscheduling":
        runtime_spec["podGroupPolicy"] = {
            "coscheduling": {"scheduleTimeoutSeconds": settings.gang_schedule_timeout_seconds}
        }
    elif settings.gang_scheduling == "volcano":
        runtime_spec["podGroupPolicy"] = {"volcano": {}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": settings.runtime_kind,
        "metadata": metadata,
        "spec": runtime_spec,
    }


def _pod_patch(task_type: str, settings: TrainJobConfig, task_uri: str, service_account: str):
    job = tf_config.REPLICATED_JOBS[task_type]
    resources = getattr(settings, task_type)
    pod: dict = {}
    if service_account:
        pod["serviceAccountName"] = service_account
    if settings.run_as_user >= 0:
        user = settings.run_as_user
        pod["securityContext"] = {"runAsUser": user, "runAsGroup": user}
    if resources.gpus and settings.gpu_pool.node_selector:
        pod["nodeSelector"] = dict(settings.gpu_pool.node_selector)
    if resources.gpus and settings.gpu_pool.tolerations:
        pod["tolerations"] = [t.kubernetes() for t in settings.gpu_pool.tolerations]
    container: dict = {}
    if job != TRAINER_JOB:
        container["env"] = [{"name": TASK_ENV, "value": task_uri}]
    if settings.pvc_name:
        pod["volumes"] = [
            {"name": "pipeline-root", "persistentVolumeClaim": {"claimName": settings.pvc_name}}
        ]
        container["volumeMounts"] = [{"name": "pipeline-root", "mountPath": settings.mount_path}]
    if container:
        name = TRAINER_CONTAINER if job == TRAINER_JOB else SERVER_CONTAINER
        pod["containers"] = [{"name": name, **container}]
    if not pod:
        return None
    return {"name": job, "template": {"spec": {"template": {"spec": pod}}}}


def trainjob_manifest(
    name: str,
    spec: cluster.ClusterSpec,
    task_uri: str,
    settings: TrainJobConfig,
    placement: Placement | None = None,
) -> dict:
    """The TrainJob as the API server takes it. Without a placement (a dry run): the configured
    namespace and service account, no owner."""
    spec.validate()
    placement = placement or Placement(settings.namespace, settings.service_account)
    metadata: dict = {
        "name": name,
        "labels": {**PART_OF, "strategy": spec.strategy.replace("_", "-")},
    }
    if placement.namespace:
        metadata["namespace"] = placement.namespace
    if placement.owner:
        metadata["ownerReferences"] = [placement.owner.reference()]
    patches = [
        patch
        for task_type in _counts(spec)
        if (patch := _pod_patch(task_type, settings, task_uri, placement.service_account))
    ]
    job_spec: dict = {
        "runtimeRef": {
            "apiGroup": GROUP,
            "kind": settings.runtime_kind,
            "name": runtime_name(spec, settings),
        },
        "trainer": {
            "image": settings.image,
            "numNodes": spec.workers,
            "resourcesPerNode": _resources(settings.worker),
            "env": [{"name": TASK_ENV, "value": task_uri}],
        },
        "activeDeadlineSeconds": settings.active_deadline_seconds,
    }
    if patches:
        job_spec["runtimePatches"] = [
            {
                "manager": PATCH_MANAGER,
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": patches}}},
            }
        ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": metadata,
        "spec": job_spec,
    }


def first_difference(expected, actual, path: str = "") -> str | None:
    """Where `actual` lacks or changes something of `expected` (extra fields in actual, such as
    server defaults, are fine); None when it holds all of it."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path or '.'}: expected an object, found {actual!r}"
        for key, value in expected.items():
            if key not in actual:
                return f"{path}.{key}: missing (expected {value!r})"[:500]
            difference = first_difference(value, actual[key], f"{path}.{key}")
            if difference:
                return difference
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return f"{path}: expected {len(expected)} item(s), found {actual!r}"[:500]
        for index, (want, have) in enumerate(zip(expected, actual, strict=True)):
            difference = first_difference(want, have, f"{path}[{index}]")
            if difference:
                return difference
        return None
    if expected != actual:
        return f"{path}: expected {expected!r}, found {actual!r}"
    return None


def job_status(job: dict) -> JobStatus:
    """Complete -> Succeeded, Failed (e.g. reason DeadlineExceeded), else Pending/Running with
    the replicated jobs' pod counts."""
    for condition in reversed(true_conditions(job)):
        kind = condition.get("type")
        if kind == "Complete":
            return JobStatus("Succeeded", "Complete")
        if kind == "Failed":
            return JobStatus(
                "Failed", "Failed", condition.get("reason", ""), condition.get("message", "")
            )
        if kind == "Suspended":
            return JobStatus("Pending", f"Suspended ({condition.get('reason', '')})")
    jobs = (job.get("status") or {}).get("jobsStatus") or []
    if not jobs:
        return JobStatus("Pending", "Created")
    parts = [
        f"{j.get('name')} {j.get('active', 0)} active/{j.get('ready', 0)} ready"
        + (f"/{j['failed']} failed" if j.get("failed") else "")
        for j in jobs
    ]
    state = "Running" if any(j.get("active") for j in jobs) else "Pending"
    return JobStatus(state, f"{state} ({', '.join(parts)})")


class TrainJobLauncher(KubernetesJobLauncher):
    """components.training.cluster.Launcher that runs the cluster as a TrainJob and waits."""

    GROUP, VERSION, PLURAL, KIND = GROUP, VERSION, PLURAL, KIND
    # Trainer names the JobSet after the TrainJob; JobSet labels every pod with its name.
    POD_LABEL = JOBSET_NAME_LABEL
    OPERATOR = "Kubeflow Trainer v2 (v2.3, with JobSet)"

    def __init__(self, settings: TrainJobConfig, **options):
        super().__init__(settings, **options)
        self.settings: TrainJobConfig = settings

    def manifest(
        self, name: str, spec: cluster.ClusterSpec, task_uri: str, placement: Placement
    ) -> dict:
        return trainjob_manifest(name, spec, task_uri, self.settings, placement)

    def status(self, job: dict) -> JobStatus:
        return job_status(job)

    def preflight(self, spec: cluster.ClusterSpec, placement: Placement) -> None:
        """The runtime exists and is the one these settings describe."""
        from kubernetes.client.exceptions import ApiException

        kind = self.settings.runtime_kind
        name = runtime_name(spec, self.settings)
        where = f"{kind} {name}" + (
            f" in namespace {placement.namespace}" if kind == "TrainingRuntime" else ""
        )
        try:
            if kind == "TrainingRuntime":
                runtime = self.custom_api.get_namespaced_custom_object(
                    GROUP, VERSION, placement.namespace, RUNTIME_PLURALS[kind], name
                )
            else:
                runtime = self.custom_api.get_cluster_custom_object(
                    GROUP, VERSION, RUNTIME_PLURALS[kind], name
                )
        except ApiException as error:
            if error.status == 404:
                raise cluster.ClusterError(
                    f"no {where}: apply it (`python kubeflow/run_kubeflow.py manifests` with the "
                    f"compile flags prints it) on a cluster with {self.OPERATOR}"
                ) from error
            raise cluster.ClusterError(
                f"cannot read {where} ({error.status} {error.reason}): the Trainer's service "
                "account needs get on it (kubeflow/trainjob-rbac.yaml)"
            ) from error
        expected = runtime_manifest(spec, self.settings)["spec"]
        difference = first_difference(expected, runtime.get("spec") or {}, "spec")
        if difference:
            raise cluster.ClusterError(
                f"{where} is not the runtime this Trainer needs ({difference}); re-apply it from "
                "`python kubeflow/run_kubeflow.py manifests` with the compile flags"
            )


# The image name in kubeflow/trainjob-runtimes.yaml (kustomize `images:` sets the real one).
SHIPPED_IMAGE = "tfx-scaleout-gpu"


def shipped_runtimes(image: str = SHIPPED_IMAGE) -> list[dict]:
    """The runtimes kubeflow/trainjob-runtimes.yaml holds: default settings, one runtime for
    multi_worker_mirrored and one for parameter_server with one parameter server."""
    settings = TrainJobConfig(image=image)
    return [
        runtime_manifest(cluster.ClusterSpec("multi_worker_mirrored", workers=1), settings),
        runtime_manifest(cluster.ClusterSpec("parameter_server", workers=1, ps=1), settings),
    ]
