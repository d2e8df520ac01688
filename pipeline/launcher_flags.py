"""The multi-worker launcher flags both runners share (where multi_worker_mirrored and
parameter_server train: local processes, a Training Operator v1 TFJob or a Kubeflow Trainer v2
TrainJob), and the TFJobConfig / TrainJobConfig they describe.

run_local.py adds what a workstation needs to train on a cluster from outside it (`--kubeconfig`,
the image, the volume the pods mount, the pods' user): where the cluster publishes defaults for
them (kubeflow.local_cluster does, components.training.kubernetes_job.CLUSTER_INFO), they come
from there, and an output root the pods cannot see is refused before the pipeline starts.
"""

from __future__ import annotations

import argparse
import os

from components import ConfigError
from components.training.settings import (
    DELETE_POLICIES,
    GANG_SCHEDULERS,
    LAUNCHER_CONFIGS,
    RUNTIME_KINDS,
    Resources,
    TFJobConfig,
    TrainJobConfig,
)

LAUNCHERS = tuple(LAUNCHER_CONFIGS)


def add_launcher_flags(parser: argparse.ArgumentParser, default: str) -> argparse._ArgumentGroup:
    """Where multi-worker strategies train (README: "Multi-worker training on Kubernetes")."""
    job = TFJobConfig()
    group = parser.add_argument_group(
        "multi-worker launcher (multi_worker_mirrored, parameter_server)"
    )
    group.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default=default,
        help="tfjob: a Training Operator v1 (1.9) TFJob; trainjob: a Kubeflow Trainer v2 (2.3) "
        "TrainJob on this project's TensorFlow runtime; local: processes on this machine (or in "
        f"the Trainer's pod on Kubeflow); default: {default}",
    )
    group.add_argument(
        "--job_namespace",
        "--tfjob_namespace",
        dest="job_namespace",
        default=job.namespace,
        help="namespace of the job (default: the Trainer pod's own, e.g. the Kubeflow profile; "
        "outside a cluster, the kubeconfig context's)",
    )
    group.add_argument(
        "--job_service_account",
        "--tfjob_service_account",
        dest="job_service_account",
        default=job.service_account,
        help="service account of the job's pods (default: the Trainer pod's own, which holds "
        "the pipeline root's storage credentials)",
    )
    group.add_argument(
        "--job_delete",
        "--tfjob_delete",
        dest="job_delete",
        choices=DELETE_POLICIES,
        default=job.delete_policy,
        help="delete the job after success, always, or never (a cancelled run always deletes)",
    )
    group.add_argument(
        "--job_deadline_seconds",
        type=int,
        default=job.active_deadline_seconds,
        help="the job fails and frees its nodes after this long (activeDeadlineSeconds)",
    )
    group.add_argument(
        "--gang_scheduling",
        choices=GANG_SCHEDULERS,
        default=job.gang_scheduling,
        help="schedule all pods at once or none (TFJob: the operator's gang scheduler; "
        "TrainJob: the runtime's podGroupPolicy)",
    )
    group.add_argument(
        "--gang_schedule_timeout_seconds", type=int, default=job.gang_schedule_timeout_seconds
    )
    group.add_argument("--worker_cpu", type=float, default=job.worker.cpu, help="per worker pod")
    group.add_argument(
        "--worker_memory_gb", type=float, default=job.worker.memory_gb, help="per worker pod"
    )
    group.add_argument(
        "--trainjob_runtime",
        default="",
        help="(Cluster)TrainingRuntime name (default: this project's for the strategy)",
    )
    group.add_argument(
        "--trainjob_runtime_kind",
        choices=RUNTIME_KINDS,
        default=TrainJobConfig().runtime_kind,
    )
    return group


# run_local.py's pods are small: a workstation's cluster is one machine (parameter_server: 4 pods
# beside the operators on 2 cores), and a pod's CPU limit
# equals its request (components.training.settings.Resources.kubernetes).
LOCAL_WORKER = Resources(cpu=0.3, memory_gb=2)


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """run_local.py: a cluster reached from this machine."""
    group = add_launcher_flags(parser, default="local")
    parser.set_defaults(worker_cpu=LOCAL_WORKER.cpu, worker_memory_gb=LOCAL_WORKER.memory_gb)
    group.add_argument(
        "--kubeconfig",
        default="",
        help="the cluster of --launcher tfjob/trainjob (default: $KUBECONFIG, ~/.kube/config); "
        "`python -m kubeflow.local_cluster status` prints the local cluster's",
    )
    group.add_argument(
        "--image",
        default="",
        help="the project's image the job's pods run (default: the one the cluster names, e.g. "
        "the local cluster's)",
    )
    group.add_argument("--gpus", type=int, default=0, help="GPUs per worker pod")
    group.add_argument(
        "--pvc_name",
        default="",
        help="the claim the pods mount at --mount_path, which must hold --output_root (default: "
        "the cluster's shared volume)",
    )
    group.add_argument("--mount_path", default="", help="where the pods mount --pvc_name")
    group.add_argument(
        "--job_run_as_user",
        type=int,
        default=None,
        help="uid the pods run as (default: the owner of the cluster's shared folder, else the "
        "image's user)",
    )


def kubernetes_job(
    args: argparse.Namespace,
    training,
    image: str,
    *,
    kubeconfig: str = "",
    run_as_user: int = -1,
    all_tasks: Resources | None = None,
) -> TFJobConfig | TrainJobConfig:
    """The TFJob or TrainJob settings the launcher flags ask for (validated: errors name the
    flag). `all_tasks`: resources for the chief and parameter servers too (default: the
    settings' own)."""
    shared = dict(
        namespace=args.job_namespace,
        service_account=args.job_service_account,
        worker=Resources(cpu=args.worker_cpu, memory_gb=args.worker_memory_gb, gpus=args.gpus),
        delete_policy=args.job_delete,
        active_deadline_seconds=args.job_deadline_seconds,
        gang_scheduling=args.gang_scheduling,
        gang_schedule_timeout_seconds=args.gang_schedule_timeout_seconds,
        pvc_name=args.pvc_name,
        mount_path=args.mount_path,
        # Validated with the image filled in by KubeflowConfig.kubernetes_job on Kubeflow.
        image=image,
        kubeconfig=kubeconfig,
        run_as_user=run_as_user,
    )
    if all_tasks is not None:
        shared.update(chief=all_tasks, ps=all_tasks)
    job: TFJobConfig | TrainJobConfig
    if args.launcher == TFJobConfig.KIND:
        job = TFJobConfig(**shared, backoff_limit=training.max_restarts + 1)
    else:
        job = TrainJobConfig(
            **shared,
            runtime_name=args.trainjob_runtime,
            runtime_kind=args.trainjob_runtime_kind,
            max_restarts=training.max_restarts,
        )
    job.validate()
    return job


def cluster_job(args: argparse.Namespace, training, output_root: str):
    """run_local.py: the job settings for a cluster reached through a kubeconfig, with the
    cluster's published defaults for what the flags leave out; refuses an output root the pods
    cannot see (the data, the task file and the model all live there)."""
    from components.training import kubernetes_job as kube

    kubeconfig = os.path.abspath(args.kubeconfig) if args.kubeconfig else ""
    if kubeconfig and not os.path.exists(kubeconfig):
        raise ConfigError(f"--kubeconfig {args.kubeconfig}: no such file")
    try:
        info = kube.cluster_info(kubeconfig)
    except Exception as error:  # noqa: BLE001 (any failure to reach the cluster, named)
        raise ConfigError(
            f"--launcher {args.launcher}: cannot reach the cluster of "
            f"{kubeconfig or '$KUBECONFIG / ~/.kube/config'}: {str(error).splitlines()[0]}"
        ) from None
    image = args.image or info.get("image", "")
    if not image:
        raise ConfigError(
            f"--launcher {args.launcher}: name the project's image the pods run (--image): this "
            "cluster publishes none"
        )
    if not args.pvc_name and info.get("pvc"):
        args.pvc_name, args.mount_path = info["pvc"], info.get("shared", "")
    run_as_user = args.job_run_as_user
    if run_as_user is None:
        run_as_user = int(info["run_as_user"]) if info.get("run_as_user") else -1
    root = os.path.abspath(output_root)
    where = f"--output_root {output_root}"
    if "://" in output_root:
        pass  # an object store the pods reach with their own credentials
    elif not args.pvc_name:
        raise ConfigError(
            f"{where} is a folder of this machine, which the job's pods cannot see: give "
            "--pvc_name and --mount_path (the volume holding it), or use an object store"
        )
    elif os.path.commonpath([root, os.path.abspath(args.mount_path)]) != os.path.abspath(
        args.mount_path
    ):
        raise ConfigError(
            f"{where} is not on the volume the job's pods mount (--pvc_name {args.pvc_name} at "
            f"{args.mount_path}): the pods could not read the data or write the model; use an "
            f"--output_root under {args.mount_path}"
        )
    worker = Resources(cpu=args.worker_cpu, memory_gb=args.worker_memory_gb)
    return kubernetes_job(
        args,
        training,
        image,
        kubeconfig=kubeconfig,
        run_as_user=run_as_user,
        all_tasks=worker,
    )
