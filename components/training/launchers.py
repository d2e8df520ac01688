"""The launcher registry: a launcher config's kind -> the Launcher that runs a cluster's tasks.

Every launcher implements cluster.Launcher (run(spec, task)) and runs the same task command
(cluster.task_command) in each task's process or pod. A new place for clusters (a Kubeflow
Trainer TrainJob, say) is one settings dataclass with a KIND in settings.LauncherConfig and one
entry here. Launchers that need a client library import it only when chosen.
"""

from __future__ import annotations

from collections.abc import Callable

from components import ConfigError
from components.training import cluster
from components.training.settings import TFJobConfig, TrainingConfig


def _local(settings: TrainingConfig) -> cluster.Launcher:
    return cluster.LocalProcessLauncher(max_restarts=settings.max_restarts)


def _tfjob(settings: TrainingConfig) -> cluster.Launcher:
    from components.training import tfjob

    if not isinstance(settings.launcher, TFJobConfig):
        raise ConfigError(
            f"the tfjob launcher needs a TFJobConfig, got {type(settings.launcher).__name__}"
        )
    return tfjob.TFJobLauncher(settings.launcher)


LAUNCHERS: dict[str, Callable[[TrainingConfig], cluster.Launcher]] = {
    "local": _local,
    "tfjob": _tfjob,
}


def create(settings: TrainingConfig) -> cluster.Launcher:
    """The launcher for settings.launcher (its kind picks the factory)."""
    return LAUNCHERS[type(settings.launcher).KIND](settings)
