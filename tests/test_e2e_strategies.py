"""Distributed training on this CPU machine: every strategy through the pipeline's Trainer,
sync strategies against one_device, and a worker killed mid-training."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import threading
import time

import pytest

from components.training import cluster
from components.training import loop as training
from components.training.settings import TrainingConfig
from pipeline import run_local as local_runner
from pipeline.mlmd import connection, records
from tests.docs import pages
from tests.test_e2e_local import explain

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A sandbox where the README's penguin run has run: the strategy runs of training.md, in
    the same ./tfx_output, reuse its ingestion and Transform from the cache."""
    sandbox = pages.Sandbox(tmp_path_factory.mktemp("strategies"))
    result = sandbox.run(pages.command("README.md", ".venv/bin/python pipeline/run_local.py"))
    assert result.returncode == 0, explain(result)
    return sandbox


@pytest.fixture(scope="module")
def base_run(sandbox):
    return str(sandbox.output_root)


def latest_outputs(output_root: str, component: str) -> dict:
    store = connection.open_store(os.path.join(output_root, "penguins-pipeline", "metadata.sqlite"))
    runs = records.Store(store).node_states_by_run()
    node_context = store.get_context_by_type_and_name("node", f"penguins-pipeline.{component}")
    executions = [e for e in store.get_executions_by_context(node_context.id)]
    latest = max(executions, key=lambda e: e.id)
    return {"runs": runs, "outputs": records.Store(store).outputs_by_type(latest.id)}


def eval_accuracy(stdout: str) -> float:
    return float(re.search(r"sparse_categorical_accuracy (\d\.\d+)", stdout).group(1))


# Replicas in sync per strategy of training.md's commands (parameter-server training has none).
REPLICAS = {"mirrored": 2, "multi_worker_mirrored": 2, "parameter_server": None}
# training.md's three commands (the README's multi-worker one among them), as the page shows them.
STRATEGY_COMMANDS = pages.block("docs/training.md", "--strategy mirrored --cpu_devices 2")


@pytest.mark.parametrize(
    "command",
    STRATEGY_COMMANDS,
    ids=[c.words()[c.words().index("--strategy") + 1] for c in STRATEGY_COMMANDS],
)
def test_strategy_trains_through_the_pipeline(sandbox, base_run, command):
    assert len(STRATEGY_COMMANDS) == 3
    replicas = REPLICAS[command.words()[command.words().index("--strategy") + 1]]
    result = sandbox.run(command)
    # Trained and evaluated; not blessed when worse than the previous pushed model (exit 3).
    assert result.returncode in (0, local_runner.EXIT_NOT_PUSHED), explain(result)
    assert "(6/9) Trainer executed" in result.stdout
    assert "(5/9) Transform cached" in result.stdout
    assert eval_accuracy(result.stdout) >= 0.9

    outputs = latest_outputs(base_run, "Trainer")["outputs"]
    [model_artifact] = outputs["Model"]
    [model_run] = outputs["ModelRun"]
    exported = glob.glob(os.path.join(model_artifact.uri, "**", "saved_model.pb"), recursive=True)
    assert len(exported) == 1, exported  # only the chief exported
    assert not glob.glob(os.path.join(model_run.uri, "**", "saved_model.pb"), recursive=True)
    with open(os.path.join(model_run.uri, training.RESULT_FILE)) as handle:
        summary = json.load(handle)
    if replicas is not None:
        assert summary["replicas"] == replicas
        assert summary["global_batch"] == 32 * replicas


def transform_outputs(base_run: str) -> tuple[str, str]:
    outputs = latest_outputs(base_run, "Transform")["outputs"]
    return outputs["Examples"][0].uri, outputs["TransformGraph"][0].uri


def run_task(tmp_path, name, examples_uri, transform_graph, **settings):
    task = training.TrainTask.from_transform_output(
        examples_uri,
        transform_graph,
        str(tmp_path / name),
        "species",
        settings=TrainingConfig(**settings),
    )
    launcher = cluster.LocalProcessLauncher(max_restarts=0)
    launcher.run(cluster.ClusterSpec.for_task(task), task)
    with open(os.path.join(task.model_run_dir, training.RESULT_FILE)) as handle:
        return json.load(handle)


# Sync strategies compute the same gradient of the same global batch (mean over 32 examples);
# only the order of floating-point reductions differs. Tolerance on the loss after K steps:
SYNC_LOSS_RTOL = 1e-3


def test_sync_strategies_match_one_device(base_run, tmp_path):
    examples_uri, transform_graph = transform_outputs(base_run)
    common = dict(train_steps=15, shuffle=False, shard_policy="data", seed=7)
    reference = run_task(
        tmp_path,
        "one_device",
        examples_uri,
        transform_graph,
        strategy="one_device",
        per_replica_batch_size=32,
        **common,
    )
    mirrored = run_task(
        tmp_path,
        "mirrored",
        examples_uri,
        transform_graph,
        strategy="mirrored",
        cpu_devices=2,
        per_replica_batch_size=16,
        **common,
    )
    multi_worker = run_task(
        tmp_path,
        "mwms",
        examples_uri,
        transform_graph,
        strategy="multi_worker_mirrored",
        workers=2,
        per_replica_batch_size=16,
        **common,
    )
    assert reference["global_batch"] == mirrored["global_batch"] == multi_worker["global_batch"]
    loss = reference["metrics"]["loss"]
    for other in (mirrored, multi_worker):
        assert other["replicas"] == 2
        assert other["metrics"]["loss"] == pytest.approx(loss, rel=SYNC_LOSS_RTOL), (
            other["strategy"],
            other["metrics"]["loss"],
            loss,
        )


def test_killed_worker_resumes_from_backup(base_run, tmp_path):
    examples_uri, transform_graph = transform_outputs(base_run)
    task = training.TrainTask.from_transform_output(
        examples_uri,
        transform_graph,
        str(tmp_path / "fault"),
        "species",
        # Early stopping on (validation every epoch, the best weights kept across the restart)
        # with a patience that cannot end training before the kill.
        settings=TrainingConfig(
            strategy="multi_worker_mirrored",
            workers=2,
            epochs=60,
            per_replica_batch_size=16,
            early_stopping_patience=60,
        ),
    )
    launcher = cluster.LocalProcessLauncher(max_restarts=1)
    errors = []

    def launch():
        try:
            launcher.run(cluster.ClusterSpec.for_task(task), task)
        except Exception as error:  # surfaced by the assertion below
            errors.append(error)

    thread = threading.Thread(target=launch)
    thread.start()
    deadline = time.monotonic() + 300
    while not glob.glob(os.path.join(task.backup_dir, "**", "checkpoint"), recursive=True):
        assert time.monotonic() < deadline, "no backup was written"
        assert thread.is_alive(), errors
        time.sleep(0.2)
    time.sleep(2)  # a few more epochs, so that the backup is mid-training, not at epoch 0
    victim = launcher.processes["worker-1"].popen
    os.killpg(victim.pid, signal.SIGKILL)
    thread.join(timeout=600)
    assert not thread.is_alive()
    assert not errors, errors
    assert launcher.attempts == 2
    with open(os.path.join(task.model_run_dir, training.RESULT_FILE)) as handle:
        result = json.load(handle)
    assert result["first_epoch"] > 0  # resumed from the backup, not from step 0
    # Early stopping restarted with the resumed attempt: its best epoch is one that attempt ran.
    assert result["first_epoch"] < result["best_epoch"] <= 60
    assert result["epochs_run"] == 60 - result["first_epoch"]
    assert os.path.exists(os.path.join(task.serving_model_dir, "saved_model.pb"))
