"""The Tuner's parallel trials (--tune_workers N) as a job of the Trainer's launchers: a TFJob or
a TrainJob (or, in tests, the local launcher's processes) of N + 1 replicas of the
multi_worker_mirrored shape, each running the same task command as a training cluster
(`python -m components.training.run_task --task URI`).

KerasTuner's distributed mode needs one oracle chief that every tuner worker reaches
(KERASTUNER_ORACLE_IP / _PORT) and a tuner id per worker (KERASTUNER_TUNER_ID). Both come from
the replica's TF_CONFIG, which the operator sets (TFJob) or the pod computes from the JobSet's
labels (TrainJob, components.training.tf_config): worker 0 is the chief and serves the oracle on
its cluster port on every address of its pod; worker i (i >= 1) is tuner i-1 and dials worker
0's address, the stable host name the job gives it. The replica index is the tuner id, so a
replica the operator restarts (a killed pod) comes back as the same tuner, and the oracle gives
it back its unfinished trial; finished trials stay with the chief.

Every replica reads the search's TunerTask (components.tfx_components.tuner.search) from
shared storage; the chief writes TFX's best_hyperparameters and tuner_results and the search's
summary there, and the Tuner's executor reads them back once the job succeeded.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import ClassVar

from components.training import settings as settings_lib
from components.training.settings import TrainingConfig

TUNER_ID_ENV = "KERASTUNER_TUNER_ID"
ORACLE_IP_ENV = "KERASTUNER_ORACLE_IP"
ORACLE_PORT_ENV = "KERASTUNER_ORACLE_PORT"
CHIEF = "chief"
# The chief's oracle listens on every address of its pod (its peers dial the pod's host name).
ALL_ADDRESSES = "0.0.0.0"


@dataclasses.dataclass(frozen=True)
class TunerJobTask:
    """What every replica of the Tuner's job reads: the search's TunerTask file and the job's
    shape (settings: multi_worker_mirrored with tune_workers + 1 workers, the launcher).
    model_run_dir: the folder the launcher writes this file into (the search's own folder),
    named as the Trainer's task names it for the launchers."""

    tuner_task: str
    model_run_dir: str
    settings: TrainingConfig = TrainingConfig()
    # The job's name prefix (components.training.kubernetes_job.job_name).
    JOB_PREFIX: ClassVar[str] = "tfx-tune"

    def save(self, path: str) -> None:
        import tensorflow as tf

        with tf.io.gfile.GFile(path, "w") as handle:
            handle.write(settings_lib.dumps(self))

    @classmethod
    def from_dict(cls, values: dict) -> TunerJobTask:
        return settings_lib.from_dict(cls, values)

    def runs_in_process(self) -> bool:
        return False


def job_settings(launcher: dict, workers: int, max_restarts: int) -> TrainingConfig:
    """The Tuner's job: `workers` tuner replicas and the chief's, on the Trainer's launcher
    (`launcher`: its settings as the Trainer's custom_config holds them)."""
    return settings_lib.from_dict(
        TrainingConfig,
        {
            "strategy": "multi_worker_mirrored",
            "workers": workers + 1,
            "max_restarts": max_restarts,
            "launcher": launcher,
        },
    ).validate()


def role(tf_config: dict) -> dict[str, str]:
    """KerasTuner's environment for the replica this TF_CONFIG describes."""
    try:
        workers = tf_config["cluster"]["worker"]
        index = int(tf_config["task"]["index"])
        kind = tf_config["task"]["type"]
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"a replica of the Tuner's job needs TF_CONFIG with cluster.worker and task.index "
            f"(set by the launcher), got {json.dumps(tf_config)[:300]}"
        ) from None
    if kind != "worker" or not 0 <= index < len(workers) or len(workers) < 2:
        raise ValueError(
            f"the Tuner's job has workers only (an oracle chief and >= 1 tuner), got task "
            f"{kind} {index} of {len(workers)} worker(s)"
        )
    host, _, port = workers[0].rpartition(":")
    if index == 0:
        return {TUNER_ID_ENV: CHIEF, ORACLE_IP_ENV: ALL_ADDRESSES, ORACLE_PORT_ENV: port}
    return {TUNER_ID_ENV: f"tuner{index - 1}", ORACLE_IP_ENV: host, ORACLE_PORT_ENV: port}


def run(task: TunerJobTask) -> dict:
    """One replica: the oracle chief until every trial is done, or a tuner worker until the
    oracle stops it (components.tfx_components.tuner.search.main)."""
    from components import KERAS_ENV
    from components.tfx_components.tuner import search

    env = role(json.loads(os.environ.get("TF_CONFIG") or "{}"))
    os.environ.update(KERAS_ENV)
    os.environ.update(env)
    search.main(task.tuner_task)
    return {"tuner_id": env[TUNER_ID_ENV]}
