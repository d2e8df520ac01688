"""The Tuner's job on the Trainer's launchers (components.training.tuner_job): each replica's
KerasTuner role from its TF_CONFIG, the job's shape from the launcher settings, the task file
round trip through run_task's loader, and the job's name."""

from __future__ import annotations

import json

import pytest

from components.training import cluster, kubernetes_job, loop, tf_config, tuner_job
from components.training import settings as settings_lib
from components.training.settings import TFJobConfig, TrainJobConfig


def _config(hosts: list[str], index: int, kind: str = "worker") -> dict:
    return {"cluster": {"worker": hosts}, "task": {"type": kind, "index": index}}


def test_worker_zero_is_the_chief_on_all_addresses_and_the_others_dial_it():
    hosts = ["tfx-tune-1-worker-0.ml.svc:2222", "tfx-tune-1-worker-1.ml.svc:2222"]
    assert tuner_job.role(_config(hosts, 0)) == {
        "KERASTUNER_TUNER_ID": "chief",
        "KERASTUNER_ORACLE_IP": "0.0.0.0",
        "KERASTUNER_ORACLE_PORT": "2222",
    }
    assert tuner_job.role(_config(hosts, 1)) == {
        "KERASTUNER_TUNER_ID": "tuner0",
        "KERASTUNER_ORACLE_IP": "tfx-tune-1-worker-0.ml.svc",
        "KERASTUNER_ORACLE_PORT": "2222",
    }


def test_a_trainjob_pods_computed_tf_config_gives_the_same_roles():
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=3)
    roles = []
    for index in range(3):
        environ = {
            tf_config.ENV_JOBSET_NAME: "tfx-tune-abc",
            tf_config.ENV_REPLICATED_JOB: "node",
            tf_config.ENV_JOB_INDEX: "0",
            tf_config.ENV_COMPLETION_INDEX: str(index),
        }
        roles.append(tuner_job.role(json.loads(tf_config.from_environ(environ, spec))))
    assert [r["KERASTUNER_TUNER_ID"] for r in roles] == ["chief", "tuner0", "tuner1"]
    assert {r["KERASTUNER_ORACLE_IP"] for r in roles[1:]} == {"tfx-tune-abc-node-0-0.tfx-tune-abc"}
    assert {r["KERASTUNER_ORACLE_PORT"] for r in roles} == {str(tf_config.PORT)}


@pytest.mark.parametrize(
    "config, message",
    [
        ({}, "needs TF_CONFIG with cluster.worker and task.index"),
        (_config(["a:1"], 0), "an oracle chief and >= 1 tuner"),
        (_config(["a:1", "b:1"], 0, "ps"), "got task ps 0"),
        (_config(["a:1", "b:1"], 2), "got task worker 2 of 2"),
    ],
)
def test_a_replica_without_its_place_in_the_job_fails_naming_it(config, message):
    with pytest.raises(ValueError, match=message):
        tuner_job.role(config)


@pytest.mark.parametrize("kind", [TFJobConfig, TrainJobConfig])
def test_the_jobs_shape_and_task_file_round_trip(tmp_path, kind):
    launcher = kind(image="registry.example.com/x:1", namespace="ml")
    settings = tuner_job.job_settings(settings_lib.to_dict(launcher), workers=3, max_restarts=1)
    assert (settings.strategy, settings.workers, settings.max_restarts) == (
        "multi_worker_mirrored",
        4,
        1,
    )
    assert settings.launcher == launcher
    task = tuner_job.TunerJobTask(str(tmp_path / "tuner_task.json"), str(tmp_path), settings)
    task.save(str(tmp_path / "task.json"))
    assert loop.load_task(str(tmp_path / "task.json")) == task
    assert kubernetes_job.job_name(task).startswith("tfx-tune-")
    assert (
        kubernetes_job.job_name(task)[len("tfx-tune-") :]
        == (kubernetes_job.job_name_for(str(tmp_path))[len("tfx-train-") :])
    )
