"""The training loop on real transformed penguin rows (the session's transform_run): the batch
size chosen from the data unless given, early stopping on the eval loss under the --epochs cap,
and what the result file records."""

from __future__ import annotations

import glob
import math
import os

import pytest

from components import ConfigError
from components.training import loop
from components.training.settings import (
    MAX_AUTO_BATCH,
    MAX_AUTO_STEPS_PER_EXECUTION,
    MIN_AUTO_BATCH,
    TrainingConfig,
    auto_batch_size,
)


def test_auto_batch_keeps_small_tables_at_32_and_bounds_the_steps_of_large_ones():
    assert auto_batch_size(260) == MIN_AUTO_BATCH == 32
    assert auto_batch_size(6_400) == 32  # exactly 200 steps
    assert auto_batch_size(6_401) == 64
    assert auto_batch_size(225_000) == MAX_AUTO_BATCH
    assert auto_batch_size(10**9) == MAX_AUTO_BATCH
    # The global batch counts: 2 replicas reach the same steps with half the per-replica batch.
    assert auto_batch_size(50_000, replicas=2) == auto_batch_size(50_000) // 2
    for rows in (1, 999, 50_000, 200_000):
        batch = auto_batch_size(rows)
        assert batch == MIN_AUTO_BATCH or math.ceil(rows / (batch // 2)) > 200


def test_an_explicit_batch_size_wins_over_the_data():
    assert TrainingConfig(per_replica_batch_size=16).batch_size_for(10**6) == 16
    assert TrainingConfig().batch_size_for(10**6) == MAX_AUTO_BATCH
    assert TrainingConfig().batch_size_for(None) == MIN_AUTO_BATCH


def test_count_records_reads_gzip_and_plain_files_together(tmp_path):
    import tensorflow as tf

    counts = {"a.gz": 5, "b.gz": 0, "c.tfrecord": 7, "d.gz": 3}
    paths = []
    for name, rows in counts.items():
        path = str(tmp_path / name)
        options = tf.io.TFRecordOptions(compression_type="GZIP" if name.endswith(".gz") else "")
        with tf.io.TFRecordWriter(path, options) as writer:
            for row in range(rows):
                writer.write(f"record {row}".encode())
        paths.append(path)
    assert loop.count_records(paths) == 15
    assert loop.count_records(paths[2:3]) == 7
    assert loop.count_records([]) == 0


def test_steps_per_call_from_the_epoch_unless_given():
    assert TrainingConfig().steps_per_execution_for(8) == 8  # penguins: an epoch per call
    assert TrainingConfig().steps_per_execution_for(110) == MAX_AUTO_STEPS_PER_EXECUTION == 50
    assert TrainingConfig().steps_per_execution_for(0) == 1
    assert TrainingConfig(steps_per_execution=1).steps_per_execution_for(110) == 1
    assert TrainingConfig(steps_per_execution=64).steps_per_execution_for(8) == 64


@pytest.mark.parametrize(
    "settings, flag",
    [
        (dict(per_replica_batch_size=0), "--batch_size"),
        (dict(early_stopping_patience=-1), "--early_stopping_patience"),
        (dict(steps_per_execution=0), "--steps_per_execution"),
    ],
)
def test_bad_batch_or_patience_names_the_flag(settings, flag):
    with pytest.raises(ConfigError, match=flag):
        TrainingConfig(**settings).validate()


def penguin_task(transform_run, tmp_path, **settings) -> loop.TrainTask:
    files = sorted(glob.glob(transform_run["transformed_files"]))
    transform_dir = os.path.dirname(transform_run["output"].transform_savedmodel_dir)
    return loop.TrainTask(
        # The 58 rows' two shards: one to train on, one to stop on.
        train_files=files[:1],
        eval_files=files[1:],
        transform_output=transform_dir,
        serving_model_dir=str(tmp_path / "serving"),
        model_run_dir=str(tmp_path / "run"),
        label_key="species",
        settings=TrainingConfig(strategy="one_device", hidden_units=(8,), **settings),
    )


@pytest.mark.slow
def test_batch_from_the_rows_without_the_flag(transform_run, tmp_path):
    task = penguin_task(transform_run, tmp_path, epochs=2, early_stopping_patience=0)
    rows = loop.count_records(task.train_files)
    result = loop.train(task)
    assert result["per_replica_batch"] == auto_batch_size(rows) == 32
    assert result["batch_from_data"] is True
    assert result["steps_per_epoch"] == math.ceil(rows / 32)
    # An epoch per call of the compiled step (fewer steps than the cap), as the model compiled it.
    assert result["steps_per_execution"] == result["steps_per_epoch"]
    assert result["steps_per_execution_from_data"] is True
    # No early stopping: every epoch runs and no best epoch is kept.
    assert result["epochs_run"] == 2 and result["best_epoch"] is None
    assert os.path.isfile(os.path.join(task.model_run_dir, loop.RESULT_FILE))


@pytest.mark.slow
def test_early_stopping_ends_before_the_cap_and_keeps_the_best_epoch(transform_run, tmp_path):
    # A learning rate far too high: the eval loss stops improving within a few epochs.
    cap = 40
    task = penguin_task(
        transform_run,
        tmp_path,
        epochs=cap,
        early_stopping_patience=2,
        learning_rate=3.0,
        per_replica_batch_size=4,
        steps_per_execution=3,
    )
    result = loop.train(task)
    # --batch_size and --steps_per_execution win over the data; 3 steps a call do not divide an
    # epoch (a shorter last call), and early stopping works as with one.
    assert result["per_replica_batch"] == 4 and result["batch_from_data"] is False
    assert result["steps_per_epoch"] % 3
    assert result["steps_per_execution"] == 3
    assert result["steps_per_execution_from_data"] is False
    assert result["steps_per_epoch"] == math.ceil(loop.count_records(task.train_files) / 4)
    assert result["stopped_early"] is True
    assert result["epochs_run"] < cap
    # Stopped `patience` epochs after the best one, whose loss the last epoch did not beat.
    assert result["best_epoch"] == result["epochs_run"] - 2
    assert not result["metrics"]["val_loss"] < result["best_val_loss"]
    assert result["early_stopping_patience"] == 2
