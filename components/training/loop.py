"""The training function every task runs, in the Trainer's process or in a cluster task process.

A TrainTask is the whole, JSON-serializable description of a training job (files, model and
strategy settings). The TFX Trainer's run_fn builds it; single-worker strategies train in the
Trainer's own process, multi-worker ones hand it to a cluster launcher that starts one process
per task (locally, or a pod per task on Kubernetes) and each of them calls train(task).
"""

from __future__ import annotations

import dataclasses
import json
import logging as std_logging
import math
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING

import tensorflow as tf
import tensorflow_transform as tft
from absl import logging

from components import PROGRESS_LOGGER, compat, user_code
from components.ml import export, features, image_preprocessing, inputs, model
from components.training import settings as settings_lib
from components.training import strategies
from components.training.settings import TrainingConfig

if TYPE_CHECKING:
    # mypy reads TensorFlow as untyped: this import only lets `keras.X` name classes (as Any).
    from tensorflow import keras
else:
    keras = tf.keras  # tf-keras under TF_USE_LEGACY_KERAS=1 (components.ml.model)
# The local runner prints records of this logger as progress lines (pipeline/local/progress.py).
progress_log = std_logging.getLogger(PROGRESS_LOGGER)

# Transformed training shards up to this size (compressed) are cached in memory after the first
# epoch; larger ones are streamed from disk every epoch.
CACHE_RECORDS_BELOW_BYTES = 256 * 1024 * 1024
# Images: a training set whose decoded pixels (8 bits at the transformed size) take at most this
# much memory (per worker) is decoded once and cached after the first epoch; larger ones are
# read and decoded every epoch (components.ml.inputs.make_image_dataset).
CACHE_DECODED_IMAGES_BELOW_BYTES = 1024 * 1024 * 1024
# Written by the chief into the model run directory: final metrics, replicas, first epoch.
RESULT_FILE = "training_result.json"


@dataclasses.dataclass(frozen=True)
class TrainTask:
    """One training job: where its data and outputs are, and how to train (the settings)."""

    train_files: list[str]
    eval_files: list[str]
    transform_output: str
    serving_model_dir: str
    model_run_dir: str
    label_key: str
    settings: TrainingConfig = TrainingConfig()
    # The user's module (a components.user_code.UserModule as JSON) holding the model hook, and
    # the user's custom_config (JSON), which the hook receives.
    user_module: str = ""
    user_config: str = ""

    @property
    def backup_dir(self) -> str:
        return os.path.join(self.model_run_dir, "backup")

    def save(self, path: str) -> None:
        with tf.io.gfile.GFile(path, "w") as handle:
            handle.write(settings_lib.dumps(self))

    @classmethod
    def load(cls, path: str) -> TrainTask:
        with tf.io.gfile.GFile(path) as handle:
            return settings_lib.from_dict(cls, json.loads(handle.read()))

    @classmethod
    def from_transform_output(
        cls,
        examples_uri: str,
        transform_graph: str,
        run_dir: str,
        label_key: str,
        settings: TrainingConfig = TrainingConfig(),
    ) -> TrainTask:
        """A task over a Transform run's outputs (its train/eval shards and transform graph),
        writing under run_dir: for running training outside the pipeline (tests, benchmarks)."""
        return cls(
            train_files=sorted(tf.io.gfile.glob(os.path.join(examples_uri, "Split-train", "*"))),
            eval_files=sorted(tf.io.gfile.glob(os.path.join(examples_uri, "Split-eval", "*"))),
            transform_output=transform_graph,
            serving_model_dir=os.path.join(run_dir, "serving"),
            model_run_dir=os.path.join(run_dir, "run"),
            label_key=label_key,
            settings=settings,
        )

    def runs_in_process(self) -> bool:
        """Single-worker strategies on the default devices train inside the Trainer's process;
        anything that needs its own TensorFlow runtime (a cluster, logical CPU devices) does not."""
        return not self.settings.needs_cluster and self.settings.cpu_devices <= 1


def load_task(path: str):
    """The task a cluster process runs: a TrainTask, a user run_fn's RunFnTask, or a replica of
    the Tuner's job (components.training.tuner_job)."""
    with tf.io.gfile.GFile(path) as handle:
        values = json.loads(handle.read())
    if "run_fn" in values:
        from components.training.run_fn_task import RunFnTask

        return RunFnTask.from_dict(values)
    if "tuner_task" in values:  # a replica of the Tuner's job (--tune_workers on a launcher)
        from components.training.tuner_job import TunerJobTask

        return TunerJobTask.from_dict(values)
    return settings_lib.from_dict(TrainTask, values)


class EpochProgress(keras.callbacks.Callback):
    """At most ~10 progress lines per run: epoch, metrics, elapsed time; and where it started
    (a run resumed by BackupAndRestore starts after epoch 0)."""

    def __init__(self, epochs: int, chief: bool = True):
        super().__init__()
        self._epochs = epochs
        # Other workers report the same numbers; their lines go to the log file only.
        self._log = progress_log if chief else std_logging.getLogger("tfx_scaleout.training")
        self._every = max(1, epochs // 10)
        self._started = time.monotonic()
        self.first_epoch: int | None = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.first_epoch is None:
            self.first_epoch = epoch
            self._log.info("training starts at epoch %d/%d", epoch + 1, self._epochs)

    def on_epoch_end(self, epoch, logs=None):
        done = epoch + 1
        if done % self._every and done != self._epochs:
            return
        metrics = ", ".join(f"{k} {float(v):.4f}" for k, v in sorted((logs or {}).items()))
        self._log.info(
            "epoch %d/%d: %s (%.1fs)", done, self._epochs, metrics, time.monotonic() - self._started
        )


class SteadyStateTimer(keras.callbacks.Callback):
    """Examples/s after the first `skip` steps (tracing, warm-up and input start-up excluded).

    With several steps per execution Keras calls the batch hooks once per call, with the index
    of the call's last step in the epoch: the steps are counted from those indices."""

    def __init__(self, global_batch: int, skip: int = 20):
        super().__init__()
        self._global_batch = global_batch
        self._skip = skip
        self._seen = 0
        self._last_in_epoch = -1
        self._start: float | None = None
        self._seen_at_start = 0
        self.examples_per_second: float | None = None

    def on_epoch_begin(self, epoch, logs=None):
        self._last_in_epoch = -1

    def on_train_batch_end(self, batch, logs=None):
        self._seen += batch - self._last_in_epoch
        self._last_in_epoch = batch
        if self._start is None and self._seen >= self._skip:
            self._start, self._seen_at_start = time.monotonic(), self._seen

    def on_train_end(self, logs=None):
        if self._start is not None and self._seen > self._seen_at_start:
            seconds = time.monotonic() - self._start
            steps = self._seen - self._seen_at_start
            self.examples_per_second = steps * self._global_batch / seconds


@tf.autograph.experimental.do_not_convert
def _plus_one(count: tf.Tensor, _record: tf.Tensor) -> tf.Tensor:
    return count + 1


def count_records(files: list[str]) -> int:
    """The records in `files`: one pass per compression over all its files (each pass traces
    its reduce function, without AutoGraph, which would parse this module's source)."""
    by_compression: dict[str, list[str]] = {}
    for path in files:
        by_compression.setdefault(inputs.compression_of(path), []).append(path)
    return sum(
        int(
            tf.data.TFRecordDataset(paths, compression_type=compression)
            .reduce(tf.constant(0, tf.int64), _plus_one)
            .numpy()
        )
        for compression, paths in by_compression.items()
    )


def cache_decoded_images(files: list[str], image_size: int, num_images: int | None = None) -> bool:
    """Whether the decoded training images fit the in-memory cache (every worker's pipeline reads
    at most all the files): CACHE_DECODED_IMAGES_BELOW_BYTES. Files larger than that on disk are
    not counted (an ImageNet-sized set would be read once just to say no)."""
    if num_images is None:
        on_disk = sum(tf.io.gfile.stat(path).length for path in files)
        if on_disk > CACHE_DECODED_IMAGES_BELOW_BYTES:
            return False
    count = count_records(files) if num_images is None else num_images
    return inputs.decoded_bytes(count, image_size) <= CACHE_DECODED_IMAGES_BELOW_BYTES


def shard_policy_for(task: TrainTask, num_files: int, num_workers: int, images: bool = False):
    """FILE when every worker gets at least one file, else DATA (each worker reads everything
    and keeps its share); a forced FILE with too few files is an error. images: the Trainer
    reads ExampleGen's shards (Transform writes none for images), so the error names
    --example_shards."""
    policy = tf.data.experimental.AutoShardPolicy
    if task.settings.shard_policy == "data":
        return policy.DATA
    if task.settings.shard_policy == "file":
        if num_files < num_workers:
            more = (
                "ExampleGen shards (--example_shards)"
                if images
                else "Transform shards (--transform_shards)"
            )
            raise ValueError(
                f"shard_policy 'file' needs at least as many files as workers: {num_files} "
                f"file(s) for {num_workers} worker(s); write more {more} or use shard_policy "
                "'data'"
            )
        return policy.FILE
    return policy.FILE if num_files >= num_workers else policy.DATA


def _with_shard_policy(dataset: tf.data.Dataset, shard_policy) -> tf.data.Dataset:
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = shard_policy
    return dataset.with_options(options)


def _configure_precision(settings: TrainingConfig) -> None:
    if settings.mixed_precision:
        keras.mixed_precision.set_global_policy(settings.mixed_precision)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How one task trains: batch, epochs and steps, input sharding and caching."""

    global_batch: int
    # Whether the batch was chosen from the training rows (no --batch_size).
    batch_from_data: bool
    parameter_server: bool
    num_workers: int
    epochs: int
    steps_per_epoch: int
    # Steps per call of the compiled train/eval function; whether chosen from the steps of an
    # epoch (no --steps_per_execution).
    steps_per_execution: int
    steps_per_execution_from_data: bool
    # Validation steps: --eval_steps, else None (the whole eval split) or, with several steps
    # per call (Keras must then know the count), the eval split's batches.
    eval_steps: int | None
    # Early stopping on the eval split's loss (0: off); epochs is then the cap.
    patience: int
    cache_decoded: bool
    shard_policy: tf.data.experimental.AutoShardPolicy


def train(task: TrainTask) -> dict:
    """Trains under the task's strategy; the chief exports the serving model. Returns final
    metrics and where training started (for resumed runs). No dataset of the run has tf.data's
    autotuning model: its thread can hold up an iterator's deletion for as long as the iterator
    lived (inputs.without_autotune_thread, also given to the per-device datasets of a
    MultiDeviceIterator: compat.per_device_datasets_finished_by). Their prefetch is sized by the
    MultiDeviceIterator, so they have nothing to tune."""
    with compat.per_device_datasets_finished_by(inputs.without_autotune_thread):
        return _train(task)


def _train(task: TrainTask) -> dict:
    strategy = _start_runtime(task.settings)
    user_code.activate(user_code.UserModule.from_json(task.user_module))
    tf_transform_output = tft.TFTransformOutput(task.transform_output)
    chief = strategies.is_chief(strategy)
    plan = _plan(task, strategy, tf_transform_output)
    if plan.num_workers > 1 and chief:
        _log_sharding(task, plan)
    weights = class_weights(task.settings, tf_transform_output)
    train_data, eval_data = _datasets(task, plan, tf_transform_output, weights)
    keras_model = _build_model(task, strategy, tf_transform_output, plan)
    progress = EpochProgress(plan.epochs, chief)
    # Batch-level callbacks are not supported with ParameterServerStrategy in tf-keras.
    timer = None if plan.parameter_server else SteadyStateTimer(plan.global_batch)
    stopping = _early_stopping(plan)
    callbacks = _callbacks(
        task,
        strategy,
        chief,
        [progress] + ([timer] if timer else []) + ([stopping] if stopping else []),
    )
    _log_training_start(strategy, plan, chief, _compiled_steps_per_execution(keras_model))
    fit_started = time.monotonic()
    history = _fit(keras_model, train_data, eval_data, plan, task.settings, callbacks)
    train_seconds = time.monotonic() - fit_started
    final = {name: float(values[-1]) for name, values in history.history.items()}
    logging.info("Final metrics: %s", final)
    epochs_run = len(history.history.get("loss", ()))
    stopped = _stopping_summary(stopping, progress.first_epoch or 0, epochs_run, plan, chief)
    _export(keras_model, tf_transform_output, task, chief)
    result = {
        "metrics": final,
        "first_epoch": progress.first_epoch,
        "epochs": plan.epochs,
        "steps_per_epoch": plan.steps_per_epoch,
        "replicas": strategy.num_replicas_in_sync,
        "global_batch": plan.global_batch,
        "per_replica_batch": plan.global_batch // strategy.num_replicas_in_sync,
        "batch_from_data": plan.batch_from_data,
        # What the model was compiled with (a hook may compile with its own).
        "steps_per_execution": _compiled_steps_per_execution(keras_model),
        "steps_per_execution_from_data": plan.steps_per_execution_from_data,
        "early_stopping_patience": plan.patience,
        **stopped,
        "strategy": type(strategy).__name__,
        # Wall time of fit(), trace and validation included; steps run in this attempt.
        "train_seconds": train_seconds,
        "steps_run": epochs_run * plan.steps_per_epoch,
        "steady_examples_per_second": timer.examples_per_second if timer else None,
        # --class_weight balanced: class name -> the weight of its training rows.
        "class_weights": _named_weights(weights, tf_transform_output),
    }
    if chief:
        _write_result(task, result)
    return result


def _start_runtime(settings: TrainingConfig) -> tf.distribute.Strategy:
    """The strategy first: multi-worker strategies configure collective ops, which must happen
    before anything else initializes TensorFlow's runtime in this process. Then the seed and
    the precision policy."""
    strategy = strategies.make_strategy(settings.strategy)
    keras.utils.set_random_seed(settings.seed)
    _configure_precision(settings)
    return strategy


def _plan(task: TrainTask, strategy, tf_transform_output) -> _Plan:
    """Global batch, epochs x steps (the train files counted unless train_steps is set), the
    decoded-image cache and the input shard policy."""
    settings = task.settings
    is_ps = isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)
    num_workers = settings.workers if settings.needs_cluster else 1
    image_size = image_preprocessing.image_size_of(tf_transform_output)
    batch_from_data = settings.per_replica_batch_size is None
    # The rows decide the steps of an epoch and, without --batch_size, the batch.
    num_train = None
    if not settings.train_steps or batch_from_data:
        num_train = count_records(task.train_files)
    per_replica = settings.batch_size_for(num_train, strategy.num_replicas_in_sync)
    global_batch = strategies.global_batch_size(per_replica, strategy)
    if settings.train_steps:
        epochs, steps_per_epoch = 1, settings.train_steps
    else:
        assert num_train is not None
        epochs, steps_per_epoch = settings.epochs, max(1, math.ceil(num_train / global_batch))
    cache_decoded = image_size is not None and cache_decoded_images(
        task.train_files, image_size, num_train
    )
    shard_policy = shard_policy_for(
        task, len(task.train_files), num_workers, images=image_size is not None
    )
    # Early stopping needs epochs to compare and the eval split's loss, which parameter-server
    # training does not compute in fit() (the Evaluator evaluates its model).
    patience = settings.early_stopping_patience if epochs > 1 and not is_ps else 0
    # Several steps per call unless set: not with multi_worker_mirrored, whose workers end an
    # evaluation of unevenly sharded files together only when Keras runs it to the end of the
    # data, one step per call.
    multi_worker_sync = num_workers > 1 and not is_ps
    if settings.steps_per_execution is None and multi_worker_sync:
        steps_per_execution = 1
    else:
        steps_per_execution = settings.steps_per_execution_for(steps_per_epoch)
    eval_steps = settings.eval_steps
    if eval_steps is None and steps_per_execution > 1 and not is_ps:
        eval_steps = max(1, math.ceil(count_records(task.eval_files) / global_batch))
    return _Plan(
        steps_per_execution=steps_per_execution,
        steps_per_execution_from_data=settings.steps_per_execution is None,
        eval_steps=eval_steps,
        global_batch=global_batch,
        batch_from_data=batch_from_data,
        parameter_server=is_ps,
        num_workers=num_workers,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        patience=patience,
        cache_decoded=cache_decoded,
        shard_policy=shard_policy,
    )


def _log_sharding(task: TrainTask, plan: _Plan) -> None:
    logging.info(
        "Input sharding across %d worker(s): %s (%d file(s))",
        plan.num_workers,
        plan.shard_policy.name,
        len(task.train_files),
    )
    progress_log.info(
        "%d workers, input sharded by %s over %d file(s), global batch %d",
        plan.num_workers,
        plan.shard_policy.name,
        len(task.train_files),
        plan.global_batch,
    )


def label_counts(tf_transform_output) -> list[int]:
    """Each class's rows in the training split, in class-index order: Transform's label
    vocabulary with counts (components.ml.vocabularies: `COUNT CLASS` lines)."""
    try:
        lines = tf_transform_output.vocabulary_by_name(features.LABEL_COUNTS)
    except (ValueError, tf.errors.NotFoundError):
        raise ValueError(
            f"--class_weight balanced needs the training split's label counts, which the "
            f"project's tabular preprocessing writes ({features.LABEL_COUNTS}); this transform "
            "graph has none (images, or your own preprocessing_fn): drop --class_weight"
        ) from None
    return [int(line.split(b" ", 1)[0]) for line in lines]


def class_weights(settings: TrainingConfig, tf_transform_output) -> list[float] | None:
    """--class_weight balanced: rows / (classes x the class's rows) per class index, as
    scikit-learn's compute_class_weight("balanced") (a class seen n times weighs as much in
    all as any other); None for --class_weight none."""
    if settings.class_weight != "balanced":
        return None
    counts = label_counts(tf_transform_output)
    present = [count for count in counts if count > 0]
    total = sum(present)
    return [total / (len(present) * count) if count else 0.0 for count in counts]


def _named_weights(weights: list[float] | None, tf_transform_output) -> dict[str, float]:
    if weights is None:
        return {}
    names = [v.decode() for v in tf_transform_output.vocabulary_by_name(features.LABEL_VOCABULARY)]
    return dict(zip(names, weights, strict=True))


def _weighted(dataset: tf.data.Dataset, weights: list[float] | None) -> tf.data.Dataset:
    """(features, label) batches -> (features, label, each row's class weight). In the dataset,
    not fit(class_weight=): tf-keras ignores class_weight for a DatasetCreator (parameter-server
    training; tf_keras/src/engine/data_adapter.py, _ClusterCoordinatorDataHandler)."""
    if weights is None:
        return dataset
    table = tf.constant(weights, tf.float32)

    def weigh(batch, label):
        return batch, label, tf.gather(table, tf.reshape(tf.cast(label, tf.int64), [-1]))

    return dataset.map(weigh, num_parallel_calls=tf.data.AUTOTUNE)


def _datasets(task: TrainTask, plan: _Plan, tf_transform_output, weights=None) -> tuple:
    """(train data, eval data). Parameter-server training: a DatasetCreator whose every worker
    builds its own pipeline, and no eval data (the Evaluator component evaluates the exported
    model). Otherwise: datasets under the plan's shard policy. weights: per class index, the
    weight of each training row (--class_weight), None: all alike."""
    settings = task.settings

    def make_train_dataset(files, batch_size):
        dataset = inputs.make_dataset(
            files,
            tf_transform_output,
            task.label_key,
            batch_size,
            shuffle=settings.shuffle,
            repeat=True,
            seed=settings.seed,
            cache_decoded_images=plan.cache_decoded,
        )
        return _weighted(dataset, weights)

    if plan.parameter_server:
        # Each worker builds its own pipeline; shard by input pipeline id.
        def dataset_fn(input_context: tf.distribute.InputContext):
            batch = input_context.get_per_replica_batch_size(plan.global_batch)
            files = task.train_files
            pipelines, index = input_context.num_input_pipelines, input_context.input_pipeline_id
            if plan.shard_policy == tf.data.experimental.AutoShardPolicy.FILE and pipelines > 1:
                return make_train_dataset(files[index::pipelines], batch)
            return make_train_dataset(files, batch).shard(pipelines, index)

        return keras.utils.experimental.DatasetCreator(dataset_fn), None
    train_data = _with_shard_policy(
        make_train_dataset(task.train_files, plan.global_batch), plan.shard_policy
    )
    eval_data = _with_shard_policy(
        inputs.make_dataset(
            task.eval_files,
            tf_transform_output,
            task.label_key,
            plan.global_batch,
            shuffle=False,
            repeat=False,
        ),
        plan.shard_policy,
    )
    return train_data, eval_data


def _build_model(task: TrainTask, strategy, tf_transform_output, plan: _Plan):
    """The model hook (settings.model_fn: the project's build_model or the user's) inside the
    strategy's scope, on what the transform output says about the features and the label; the
    settings it gets hold the plan's steps per execution."""
    model_inputs = model.ModelInputs.of(
        tf_transform_output,
        task.label_key,
        dataclasses.replace(task.settings, steps_per_execution=plan.steps_per_execution),
        json.loads(task.user_config) if task.user_config else {},
    )
    hook = user_code.load_function(task.settings.model_fn)
    with strategy.scope():
        keras_model = hook(model_inputs)
    model.check_hook_model(keras_model, model_inputs, task.settings.model_fn)
    return keras_model


def _callbacks(task: TrainTask, strategy, chief: bool, callbacks: list) -> list:
    """The given callbacks, then BackupAndRestore where a restarted task can resume, then (on
    the chief) TensorBoard."""
    callbacks = list(callbacks)
    if not task.runs_in_process() and isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    ):
        # BackupAndRestore: a restarted worker resumes from the last backup, not from step 0.
        # Only the cluster launcher restarts tasks within one Trainer execution (same backup
        # directory); in the Trainer's own process a backup could never be resumed. (tf-keras
        # supports it for these strategies only; parameter-server training tolerates worker
        # failures by itself.)
        callbacks.append(
            keras.callbacks.BackupAndRestore(
                task.backup_dir,
                save_freq=task.settings.checkpoint_every_steps or "epoch",
                delete_checkpoint=True,
            )
        )
    if chief:
        callbacks.append(
            keras.callbacks.TensorBoard(
                log_dir=task.model_run_dir, update_freq="epoch", profile_batch=0
            )
        )
    return callbacks


def _compiled_steps_per_execution(keras_model) -> int:
    """The steps per call keras_model.compile() set (tf-keras keeps it in a variable)."""
    variable = getattr(keras_model, "_steps_per_execution", None)
    return 1 if variable is None else int(variable.numpy())


def _log_training_start(strategy, plan: _Plan, chief: bool, per_call: int) -> None:
    batch = "chosen from the training rows" if plan.batch_from_data else "--batch_size"
    epochs = (
        f"at most {plan.epochs} epoch(s) (early stopping on the eval loss, patience "
        f"{plan.patience})"
        if plan.patience
        else f"{plan.epochs} epoch(s)"
    )
    if per_call != plan.steps_per_execution:
        per_call_source = "as the model hook compiled it"
    elif plan.steps_per_execution_from_data:
        per_call_source = "chosen from the steps"
    else:
        per_call_source = "--steps_per_execution"
    line = "%s: %d replica(s), global batch %d (%s), %s x %d step(s), %d step(s) per call (%s)"
    values = (
        type(strategy).__name__,
        strategy.num_replicas_in_sync,
        plan.global_batch,
        batch,
        epochs,
        plan.steps_per_epoch,
        per_call,
        per_call_source,
    )
    if chief:
        progress_log.info(line, *values)
    logging.info("Training with " + line, *values)


def _early_stopping(plan: _Plan):
    """Stops when the eval loss has not improved for `patience` epochs; at the end of training
    (stopped or at the --epochs cap) the best epoch's weights are restored, so the exported
    model is the best one seen."""
    if not plan.patience:
        return None
    return keras.callbacks.EarlyStopping(
        monitor="val_loss", patience=plan.patience, restore_best_weights=True
    )


def _stopping_summary(stopping, first_epoch: int, epochs_run: int, plan: _Plan, chief: bool):
    """Where training ended and which epoch's weights the model keeps (1-based epochs)."""
    if stopping is None or stopping.best_weights is None:
        return {"epochs_run": epochs_run, "best_epoch": None, "stopped_early": False}
    # Keras numbers epochs from 0 across a resumed run (BackupAndRestore's initial epoch).
    summary = {
        "epochs_run": epochs_run,
        "best_epoch": stopping.best_epoch + 1,
        "best_val_loss": float(stopping.best),
        "stopped_early": stopping.stopped_epoch > 0,
    }
    last = first_epoch + epochs_run
    if chief:
        progress_log.info(
            "%s at epoch %d/%d: keeping the weights of epoch %d (eval loss %.4f)",
            "early stopping" if summary["stopped_early"] else "training ended",
            last,
            plan.epochs,
            summary["best_epoch"],
            summary["best_val_loss"],
        )
    return summary


def _fit(keras_model, train_data, eval_data, plan: _Plan, settings: TrainingConfig, callbacks):
    return keras_model.fit(
        train_data,
        epochs=plan.epochs,
        steps_per_epoch=plan.steps_per_epoch,
        validation_data=eval_data,
        validation_steps=plan.eval_steps,
        # Without early stopping, validate once, after the last epoch: per-epoch validation
        # under a distribution strategy re-creates the distributed eval iterator every epoch.
        validation_freq=1 if plan.patience else plan.epochs,
        callbacks=callbacks,
        verbose=0,
    )


def _write_result(task: TrainTask, result: dict) -> None:
    with tf.io.gfile.GFile(os.path.join(task.model_run_dir, RESULT_FILE), "w") as handle:
        handle.write(json.dumps(result, indent=2))


def _export(keras_model, tf_transform_output, task: TrainTask, chief: bool) -> None:
    """Only the chief writes the serving model. Other multi-worker tasks save to a scratch
    directory they delete: saving may need every worker's participation (variables with
    cross-worker aggregation), so they must not skip it."""
    if chief:
        export.export_serving_model(
            keras_model, tf_transform_output, task.label_key, task.serving_model_dir
        )
        logging.info("Exported serving model to %s", task.serving_model_dir)
        return
    scratch = tempfile.mkdtemp(prefix="non-chief-export-")
    try:
        export.export_serving_model(keras_model, tf_transform_output, task.label_key, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
