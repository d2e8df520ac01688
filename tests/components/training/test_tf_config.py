"""TF_CONFIG computed inside a Trainer v2 (JobSet) pod, for every pod of a 2-worker
MultiWorkerMirrored job and a 2-worker + 1-PS job, read back by tf.distribute's
TFConfigClusterResolver the way the strategies read it."""

from __future__ import annotations

import json
import os
from unittest import mock

import pytest
import tensorflow as tf

from components.training import cluster, tf_config

JOBSET = "tfx-train-0123456789ab"


def _pods(spec: cluster.ClusterSpec):
    """(environment, host name) of every pod the runtime's JobSet runs for `spec`."""
    for task_type, index in spec.tasks():
        job = tf_config.REPLICATED_JOBS[task_type]
        environ = {
            tf_config.ENV_JOBSET_NAME: JOBSET,
            tf_config.ENV_REPLICATED_JOB: job,
            tf_config.ENV_JOB_INDEX: "0",
            tf_config.ENV_COMPLETION_INDEX: str(index),
        }
        yield task_type, index, environ, f"{JOBSET}-{job}-0-{index}.{JOBSET}"


def _resolve(config: str | None) -> dict:
    """What the resolver reads (it reads TF_CONFIG whenever asked, so ask while it is set)."""
    assert config is not None
    with mock.patch.dict(os.environ, {"TF_CONFIG": config}):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return {
            "cluster": resolver.cluster_spec().as_dict(),
            "task": (resolver.task_type, resolver.task_id),
            "master": resolver.master(),
        }


def test_multi_worker_mirrored_two_workers():
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
    expected = {"worker": [f"{JOBSET}-node-0-0.{JOBSET}:2222", f"{JOBSET}-node-0-1.{JOBSET}:2222"]}
    pods = list(_pods(spec))
    assert len(pods) == 2
    for task_type, index, environ, hostname in pods:
        resolved = _resolve(tf_config.from_environ(environ, spec))
        assert resolved["cluster"] == expected
        assert resolved["task"] == (task_type, index)
        # Each pod's own address is its stable host name.
        assert resolved["cluster"][task_type][index] == f"{hostname}:{tf_config.PORT}"
        assert resolved["master"] == f"{hostname}:{tf_config.PORT}"


def test_parameter_server_two_workers_one_ps():
    spec = cluster.ClusterSpec("parameter_server", workers=2, ps=1)
    expected = {
        "chief": [f"{JOBSET}-coordinator-0-0.{JOBSET}:2222"],
        "worker": [f"{JOBSET}-node-0-0.{JOBSET}:2222", f"{JOBSET}-node-0-1.{JOBSET}:2222"],
        "ps": [f"{JOBSET}-ps-0-0.{JOBSET}:2222"],
    }
    seen = []
    for task_type, index, environ, hostname in _pods(spec):
        resolved = _resolve(tf_config.from_environ(environ, spec))
        assert resolved["cluster"] == expected
        assert resolved["task"] == (task_type, index)
        assert resolved["cluster"][task_type][index] == f"{hostname}:{tf_config.PORT}"
        seen.append((task_type, index))
    assert seen == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]


def test_the_pure_function_matches_the_local_launchers_shape():
    spec = cluster.ClusterSpec("parameter_server", workers=3, ps=2)
    config = tf_config.tf_config(spec, JOBSET, "ps", job_index=0, pod_index=1, subdomain="net")
    assert config["task"] == {"type": "ps", "index": 1}
    assert config["cluster"]["ps"][1] == f"{JOBSET}-ps-0-1.net:2222"
    # The same task order as ClusterSpec (and so the local launcher) uses.
    assert list(config["cluster"]) == ["chief", "worker", "ps"]
    assert [len(hosts) for hosts in config["cluster"].values()] == [1, 3, 2]
    json.dumps(config)


def test_outside_a_jobset_pod_there_is_nothing_to_compute():
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
    assert tf_config.from_environ({"HOSTNAME": "x"}, spec) is None


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({tf_config.ENV_REPLICATED_JOB: "node", tf_config.ENV_JOB_INDEX: "0"}, "JOB_COMPLETION"),
        (
            {
                tf_config.ENV_REPLICATED_JOB: "launcher",
                tf_config.ENV_JOB_INDEX: "0",
                tf_config.ENV_COMPLETION_INDEX: "0",
            },
            "not one of this project's TensorFlow jobs",
        ),
        (
            {
                tf_config.ENV_REPLICATED_JOB: "node",
                tf_config.ENV_JOB_INDEX: "0",
                tf_config.ENV_COMPLETION_INDEX: "2",
            },
            "runtime and the Trainer's settings disagree",
        ),
        (
            {
                tf_config.ENV_REPLICATED_JOB: "node",
                tf_config.ENV_JOB_INDEX: "1",
                tf_config.ENV_COMPLETION_INDEX: "0",
            },
            "one Indexed Job per task type",
        ),
    ],
)
def test_a_pod_the_cluster_does_not_describe_fails_clearly(environ, message):
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
    with pytest.raises(cluster.ClusterError, match=message):
        tf_config.from_environ({tf_config.ENV_JOBSET_NAME: JOBSET, **environ}, spec)


def test_run_task_in_a_jobset_pod_serves_as_the_task_its_indexes_name(tmp_path):
    from components.training import run_task
    from components.training.loop import TrainTask
    from components.training.settings import TrainingConfig

    task = TrainTask(
        train_files=["t"],
        eval_files=["e"],
        transform_output="tg",
        serving_model_dir=str(tmp_path / "serving"),
        model_run_dir=str(tmp_path / "run"),
        label_key="species",
        settings=TrainingConfig(strategy="parameter_server", workers=2, ps=1),
    )
    task_file = str(tmp_path / "task.json")
    task.save(task_file)
    environ = {
        tf_config.ENV_JOBSET_NAME: JOBSET,
        tf_config.ENV_REPLICATED_JOB: "node",
        tf_config.ENV_JOB_INDEX: "0",
        tf_config.ENV_COMPLETION_INDEX: "1",
    }
    with (
        mock.patch.dict(os.environ, environ),
        mock.patch.object(run_task, "run_server") as run_server,
    ):
        os.environ.pop("TF_CONFIG", None)
        assert run_task.main(["--task", task_file]) == 0
        written = json.loads(os.environ["TF_CONFIG"])
    cluster_def, task_type, index, workers = run_server.call_args.args
    assert (task_type, index, workers) == ("worker", 1, 2)
    assert cluster_def == written["cluster"]
    assert cluster_def["ps"] == [f"{JOBSET}-ps-0-0.{JOBSET}:2222"]
