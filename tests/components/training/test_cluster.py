"""Cluster shapes, TF_CONFIG, input sharding choice and the local launcher's failure handling."""

from __future__ import annotations

import json
import logging
import sys

import pytest
import tensorflow as tf

from components import PROGRESS_LOGGER
from components.training import cluster
from components.training import loop as training
from components.training.settings import TrainingConfig


def test_multi_worker_mirrored_tasks_and_tf_config():
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=3).validate()
    assert spec.tasks() == [("worker", 0), ("worker", 1), ("worker", 2)]
    assert spec.primary_tasks() == spec.tasks()
    addresses = {task: f"localhost:{1000 + i}" for i, task in enumerate(spec.tasks())}
    cluster_def = spec.cluster_def(addresses)
    assert cluster_def == {"worker": ["localhost:1000", "localhost:1001", "localhost:1002"]}
    assert json.loads(spec.tf_config(cluster_def, "worker", 1)) == {
        "cluster": cluster_def,
        "task": {"type": "worker", "index": 1},
    }


def test_parameter_server_tasks():
    spec = cluster.ClusterSpec("parameter_server", workers=2, ps=1).validate()
    assert spec.tasks() == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
    assert spec.primary_tasks() == [("chief", 0)]


def test_single_worker_task_gets_no_tf_config():
    spec = cluster.ClusterSpec("mirrored").validate()
    assert spec.tasks() == [("worker", 0)]
    assert spec.tf_config({"worker": ["localhost:1"]}, "worker", 0) is None


@pytest.mark.parametrize(
    "spec, message",
    [
        (cluster.ClusterSpec("magic"), "unknown strategy 'magic'"),
        (cluster.ClusterSpec("parameter_server", workers=2, ps=0), "at least one parameter"),
        (cluster.ClusterSpec("multi_worker_mirrored", workers=2, ps=1), "ps=1 is only valid"),
        (cluster.ClusterSpec("multi_worker_mirrored", workers=0), "workers must be >= 1"),
    ],
)
def test_invalid_cluster_shapes(spec, message):
    with pytest.raises(cluster.ClusterError, match=message):
        spec.validate()


def make_task(**settings):
    return training.TrainTask(
        train_files=[],
        eval_files=[],
        transform_output="",
        serving_model_dir="",
        model_run_dir="",
        label_key="y",
        settings=TrainingConfig(**settings),
    )


def test_shard_policy_choice():
    policy = tf.data.experimental.AutoShardPolicy
    assert training.shard_policy_for(make_task(), num_files=4, num_workers=2) == policy.FILE
    assert training.shard_policy_for(make_task(), num_files=1, num_workers=2) == policy.DATA
    assert training.shard_policy_for(make_task(shard_policy="data"), 8, 2) == policy.DATA
    with pytest.raises(ValueError, match="needs at least as many files as workers: 1 file") as e:
        training.shard_policy_for(make_task(shard_policy="file"), num_files=1, num_workers=2)
    assert "--transform_shards" in str(e.value)
    # Images: the Trainer reads ExampleGen's shards, so the flag to raise is ExampleGen's.
    with pytest.raises(ValueError, match=r"more ExampleGen shards \(--example_shards\)"):
        training.shard_policy_for(make_task(shard_policy="file"), 1, 2, images=True)


def test_task_round_trips_through_json(tmp_path):
    task = make_task(strategy="parameter_server", workers=2, ps=1, hidden_units=(8, 4))
    task.save(str(tmp_path / "task.json"))
    assert training.TrainTask.load(str(tmp_path / "task.json")) == task
    assert not task.runs_in_process()
    assert make_task(strategy="mirrored").runs_in_process()
    assert not make_task(strategy="mirrored", cpu_devices=2).runs_in_process()


def python_task(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_launcher_relays_progress_and_succeeds(caplog):
    launcher = cluster.LocalProcessLauncher(max_restarts=0)
    code = (
        "import os, json; t = json.loads(os.environ['TF_CONFIG'])['task'];"
        f"print('{cluster.PROGRESS_PREFIX}' + 'hello from ' + t['type'] + str(t['index']))"
    )
    with caplog.at_level(logging.INFO, logger="tfx_scaleout"):
        launcher.run_command(
            cluster.ClusterSpec("multi_worker_mirrored", workers=2), python_task(code)
        )
    progress = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert sorted(progress) == ["[worker-0] hello from worker0", "[worker-1] hello from worker1"]
    assert launcher.attempts == 1


def test_launcher_restarts_then_fails_with_the_task_and_its_error():
    launcher = cluster.LocalProcessLauncher(max_restarts=1)
    code = (
        "import os, json, sys; t = json.loads(os.environ['TF_CONFIG'])['task'];"
        "sys.exit(0) if t['index'] == 0 else (print('boom: disk full'), sys.exit(3))"
    )
    with pytest.raises(cluster.ClusterError) as error:
        launcher.run_command(
            cluster.ClusterSpec("multi_worker_mirrored", workers=2), python_task(code)
        )
    assert launcher.attempts == 2
    message = str(error.value)
    assert "failed after 2 attempt(s)" in message
    assert "task worker-1 exited with code 3: boom: disk full" in message


def test_launcher_reports_a_killed_task():
    launcher = cluster.LocalProcessLauncher(max_restarts=0)
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    with pytest.raises(cluster.ClusterError, match="task worker-0 was killed by SIGKILL"):
        launcher.run_command(
            cluster.ClusterSpec("multi_worker_mirrored", workers=1), python_task(code)
        )


def test_parameter_servers_are_stopped_when_the_chief_finishes():
    launcher = cluster.LocalProcessLauncher(max_restarts=0)
    code = (
        "import os, json, time; t = json.loads(os.environ['TF_CONFIG'])['task'];"
        "time.sleep(0.5) if t['type'] == 'chief' else time.sleep(600)"
    )
    launcher.run_command(
        cluster.ClusterSpec("parameter_server", workers=1, ps=1), python_task(code)
    )
    assert all(p.popen.poll() is not None for p in launcher.processes.values())
