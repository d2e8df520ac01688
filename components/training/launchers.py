"""The launcher registry: a launcher config's kind -> the Launcher that runs a cluster's tasks.

Every launcher implements cluster.Launcher (run(spec, task)) and runs the same training task
(`python -m components.training.run_task`) in each task's process or pod. A new place for
clusters is one settings dataclass with a KIND in settings.LauncherConfig and one entry here.
Launchers that need a client library import it only when chosen.

  local     processes on this machine (or in the Trainer's pod)
  tfjob     a Kubeflow Training Operator v1 TFJob (components.training.tfjob)
  trainjob  a Kubeflow Trainer v2 TrainJob on this project's TensorFlow runtime
            (components.training.trainjob)
"""

from __future__ import annotations

from collections.abc import Callable

from components import ConfigError
from components.training import cluster
from components.training.settings import TFJobConfig, TrainingConfig, TrainJobConfig


def _local(settings: TrainingConfig) -> cluster.Launcher:
    return cluster.LocalProcessLauncher(max_restarts=settings.max_restarts)


def _require(settings: TrainingConfig, expected: type) -> None:
    if not isinstance(settings.launcher, expected):
        raise ConfigError(
            f"the {expected.KIND} launcher needs a {expected.__name__}, got "  # type: ignore[attr-defined]
            f"{type(settings.launcher).__name__}"
        )


def _tfjob(settings: TrainingConfig) -> cluster.Launcher:
    from components.training import tfjob

    _require(settings, TFJobConfig)
    assert isinstance(settings.launcher, TFJobConfig)
    return tfjob.TFJobLauncher(settings.launcher)


def _trainjob(settings: TrainingConfig) -> cluster.Launcher:
    from components.training import trainjob

    _require(settings, TrainJobConfig)
    assert isinstance(settings.launcher, TrainJobConfig)
    return trainjob.TrainJobLauncher(settings.launcher)


LAUNCHERS: dict[str, Callable[[TrainingConfig], cluster.Launcher]] = {
    "local": _local,
    "tfjob": _tfjob,
    "trainjob": _trainjob,
}


def create(settings: TrainingConfig) -> cluster.Launcher:
    """The launcher for settings.launcher (its kind picks the factory)."""
    return LAUNCHERS[type(settings.launcher).KIND](settings)


def dry_run_manifests(settings: TrainingConfig, model_run_dir: str) -> list[dict]:
    """Every Kubernetes object the launcher of `settings` would create for a Trainer execution
    writing to `model_run_dir` (the job; for a TrainJob its runtime first, which a platform
    team applies once); none for the local launcher or a single-worker strategy. Namespace and
    service account are the configured ones: empty ones are the Trainer pod's at run time."""
    import os

    launcher = settings.launcher
    if not settings.needs_cluster or not isinstance(launcher, (TFJobConfig, TrainJobConfig)):
        return []
    from components.training import kubernetes_job

    spec = cluster.ClusterSpec(settings.strategy, settings.workers, settings.ps).validate()
    task_uri = os.path.join(model_run_dir, launcher.KIND, "task.json")
    name = kubernetes_job.job_name_for(model_run_dir)
    if isinstance(launcher, TFJobConfig):
        from components.training import tfjob

        return [tfjob.tfjob_manifest(name, spec, cluster.pod_command(task_uri), launcher)]
    from components.training import trainjob

    return [
        trainjob.runtime_manifest(spec, launcher, launcher.namespace),
        trainjob.trainjob_manifest(name, spec, task_uri, launcher),
    ]
