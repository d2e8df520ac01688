"""TF_CONFIG for a pod of a Kubeflow Trainer v2 TrainJob, computed inside the pod.

Trainer v2 runs a TrainJob as a JobSet and sets no TF_CONFIG (it ships no TensorFlow runtime).
This project's runtime (components.training.trainjob.runtime_manifest) gives each TensorFlow task
type its own replicated job with one Indexed Job of N pods, and turns on the JobSet's DNS host
names, so every pod's address is known before any pod starts:

    <jobset>-<replicated job>-<job index>-<pod index>.<subdomain>:<port>

(the JobSet is named after the TrainJob and its subdomain is the JobSet's name; Trainer v2
computes the same endpoints, jobset plugin IdentifyPodNetwork). A pod learns which task it is
from the downward API (the JobSet's labels) and Kubernetes' JOB_COMPLETION_INDEX; the cluster's
shape comes from the TrainTask every pod reads. `tf_config` is the pure function; `from_environ`
reads the pod's environment the runtime sets up.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from components.training import cluster

# The port every task's gRPC server listens on (the Training Operator's TFJob default too).
PORT = 2222
# TensorFlow task type -> the runtime's replicated job. Trainer v2 applies a TrainJob's trainer
# settings (image, node count, resources, env) to the replicated job named "node" (its
# trainjob-ancestor-step: trainer): the workers.
REPLICATED_JOBS = {"chief": "coordinator", "worker": "node", "ps": "ps"}
TASK_TYPES = {job: task_type for task_type, job in REPLICATED_JOBS.items()}

# Set in the runtime's containers through the downward API (JobSet labels every pod with these).
ENV_JOBSET_NAME = "TFX_SCALEOUT_JOBSET_NAME"
ENV_REPLICATED_JOB = "TFX_SCALEOUT_REPLICATED_JOB"
ENV_JOB_INDEX = "TFX_SCALEOUT_JOB_INDEX"
# Set by Kubernetes in every pod of an Indexed Job.
ENV_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
JOBSET_LABELS = {
    ENV_JOBSET_NAME: "jobset.sigs.k8s.io/jobset-name",
    ENV_REPLICATED_JOB: "jobset.sigs.k8s.io/replicatedjob-name",
    ENV_JOB_INDEX: "jobset.sigs.k8s.io/job-index",
}


def host(jobset: str, replicated_job: str, job_index: int, pod_index: int, subdomain: str) -> str:
    """A JobSet pod's stable DNS name (within its namespace)."""
    return f"{jobset}-{replicated_job}-{job_index}-{pod_index}.{subdomain}"


def cluster_def(
    spec: cluster.ClusterSpec, jobset: str, subdomain: str = "", port: int = PORT
) -> dict[str, list[str]]:
    """The TF_CONFIG cluster of a JobSet that runs `spec`: one host per task, in task order."""
    subdomain = subdomain or jobset
    addresses = {
        (
            task_type,
            index,
        ): f"{host(jobset, REPLICATED_JOBS[task_type], 0, index, subdomain)}:{port}"
        for task_type, index in spec.tasks()
    }
    return spec.cluster_def(addresses)


def tf_config(
    spec: cluster.ClusterSpec,
    jobset: str,
    replicated_job: str,
    job_index: int,
    pod_index: int,
    subdomain: str = "",
    port: int = PORT,
) -> dict:
    """TF_CONFIG of the pod `pod_index` of Job `job_index` of `replicated_job` in `jobset`."""
    spec.validate()
    if replicated_job not in TASK_TYPES:
        raise cluster.ClusterError(
            f"replicated job {replicated_job!r} is not one of this project's TensorFlow jobs "
            f"{sorted(TASK_TYPES)}"
        )
    if job_index != 0:
        raise cluster.ClusterError(
            f"replicated job {replicated_job} has a Job with index {job_index}: the runtime "
            "runs one Indexed Job per task type (replicas: 1), its pods are the tasks"
        )
    task_type = TASK_TYPES[replicated_job]
    cluster_spec = cluster_def(spec, jobset, subdomain, port)
    count = len(cluster_spec.get(task_type, []))
    if not 0 <= pod_index < count:
        raise cluster.ClusterError(
            f"pod index {pod_index} of {replicated_job} is outside the cluster's {count} "
            f"{task_type} task(s) ({spec.strategy}, workers={spec.workers}, ps={spec.ps}): the "
            "TrainJob's runtime and the Trainer's settings disagree"
        )
    return {"cluster": cluster_spec, "task": {"type": task_type, "index": pod_index}}


def from_environ(environ: Mapping[str, str], spec: cluster.ClusterSpec) -> str | None:
    """TF_CONFIG (JSON) for this pod from the environment the runtime sets, or None outside a
    JobSet pod of this project's runtime."""
    if ENV_JOBSET_NAME not in environ:
        return None
    missing = [
        name
        for name in (ENV_REPLICATED_JOB, ENV_JOB_INDEX, ENV_COMPLETION_INDEX)
        if not environ.get(name)
    ]
    if missing:
        raise cluster.ClusterError(
            f"a JobSet pod needs {missing} in its environment to compute TF_CONFIG"
        )
    config = tf_config(
        spec,
        jobset=environ[ENV_JOBSET_NAME],
        replicated_job=environ[ENV_REPLICATED_JOB],
        job_index=int(environ[ENV_JOB_INDEX]),
        pod_index=int(environ[ENV_COMPLETION_INDEX]),
    )
    return json.dumps(config)
