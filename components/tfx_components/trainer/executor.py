"""Trainer executor: TFX's GenericExecutor, with the user's module importable and a user's run_fn
run on every strategy.

- The project's run_fn (PROJECT_RUN_FN) reads its settings from custom_config and trains in this
  process or hands a TrainTask to the cluster launcher (components.training.trainer); the staged
  user module (the model hook's) is passed to it in custom_config.
- A user's run_fn gets TFX's own FnArgs with the user's custom_config only. Single-worker
  strategies: it runs here, as TFX runs it. Multi-worker and parameter-server strategies: every
  cluster task (local processes, TFJob or TrainJob pods) rebuilds the same FnArgs from this
  execution's artifacts and calls it with TF_CONFIG set, as TFX's Vertex AI trainer runs it in
  every replica (components.training.run_fn_task); parameter-server workers and servers serve.

Either way, a run that wrote no serving model fails with the function and the directory.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tfx.components.trainer import executor as tfx_trainer_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import path_utils

from components import user_code
from components.training.settings import (
    USER_CONFIG_KEY,
    USER_MODULE_CONFIG_KEY,
    TrainingConfig,
)

PROJECT_RUN_FN = "components.training.trainer.run_fn"
CUSTOM_CONFIG_KEY = "custom_config"


class Executor(tfx_trainer_executor.GenericExecutor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 (TFX API)
        module = user_code.from_exec_properties(exec_properties)
        user_code.activate(module)
        custom_config = json.loads(exec_properties.get(CUSTOM_CONFIG_KEY) or "null") or {}
        run_fn = exec_properties.get("run_fn") or ""
        if run_fn == PROJECT_RUN_FN:
            if module is not None:
                custom_config[USER_MODULE_CONFIG_KEY] = module.to_json()
            properties = dict(exec_properties, **{CUSTOM_CONFIG_KEY: json.dumps(custom_config)})
            self._run_and_check(input_dict, output_dict, properties, run_fn, module)
            record_training_result(output_dict)
            record_tuned_settings(input_dict, output_dict, custom_config)
            return
        _, settings = TrainingConfig.from_custom_config(custom_config)
        settings = settings.validate()
        properties = dict(
            exec_properties,
            **{CUSTOM_CONFIG_KEY: json.dumps(custom_config.get(USER_CONFIG_KEY) or {})},
        )
        if not settings.needs_cluster:
            self._run_and_check(input_dict, output_dict, properties, run_fn, module)
            return
        from components.training import cluster, launchers
        from components.training.run_fn_task import RunFnTask

        task = RunFnTask(
            run_fn=run_fn,
            input_dict=artifact_utils.jsonify_artifact_dict(input_dict),
            output_dict=artifact_utils.jsonify_artifact_dict(output_dict),
            exec_properties=json.dumps(_json_properties(properties)),
            model_run_dir=artifact_utils.get_single_uri(output_dict["model_run"]),
            user_module=module.to_json() if module else "",
            settings=settings,
        )
        launchers.create(settings).run(cluster.ClusterSpec.for_task(task), task)
        # Where TFX's FnArgs points the tasks (GenericExecutor._GetFnArgs).
        model_uri = artifact_utils.get_single_uri(output_dict[standard_component_specs.MODEL_KEY])
        check_model_written(path_utils.serving_model_dir(model_uri), run_fn, module)

    def _run_and_check(self, input_dict, output_dict, properties, run_fn, module) -> None:
        fn_args = self._GetFnArgs(input_dict, output_dict, properties)
        user_code.load_function(run_fn)(fn_args)
        check_model_written(fn_args.serving_model_dir, run_fn, module)


# What the project's training chose from the data (components.training.loop's result file),
# recorded as custom properties of the Model artifact: result key -> property name.
RECORDED_CHOICES = {
    "per_replica_batch": "per_replica_batch_size",
    "global_batch": "global_batch_size",
    "batch_from_data": "batch_size_from_data",
    "steps_per_execution": "steps_per_execution",
    "steps_per_execution_from_data": "steps_per_execution_from_data",
    "epochs": "epochs_cap",
    "epochs_run": "epochs_run",
    "early_stopping_patience": "early_stopping_patience",
    "best_epoch": "best_epoch",
    "stopped_early": "stopped_early",
    "best_val_loss": "best_eval_loss",
}
# The Model artifact's custom property with the class weights the project's training used
# (--class_weight balanced; JSON: class name -> weight), as the chief wrote them.
CLASS_WEIGHTS_PROPERTY = "class_weights"


def record_training_result(output_dict) -> None:
    """What the project's run_fn chose (batch size, epochs, where early stopping ended) and the
    class weights it used, from the chief's result file, as custom properties of the Model
    artifact, which TFX publishes to MLMD with it. Numbers are int/float properties; booleans
    0/1 (MLMD has no bool type); the class weights JSON. A run_fn that writes no result file
    (a user's own) records nothing."""
    import tensorflow as tf

    from components.training import loop

    model_run = artifact_utils.get_single_uri(output_dict["model_run"])
    # The chief's file, on the pipeline root's file system (local, gs://, a mounted volume).
    path = os.path.join(model_run, loop.RESULT_FILE)
    if not tf.io.gfile.exists(path):
        return
    with tf.io.gfile.GFile(path) as handle:
        result = json.load(handle)
    for model_artifact in output_dict[standard_component_specs.MODEL_KEY]:
        for key, name in RECORDED_CHOICES.items():
            value = result.get(key)
            if isinstance(value, float):
                model_artifact.set_float_custom_property(name, value)
            elif isinstance(value, (bool, int)):
                model_artifact.set_int_custom_property(name, int(value))
        if result.get("class_weights"):
            model_artifact.set_string_custom_property(
                CLASS_WEIGHTS_PROPERTY, json.dumps(result["class_weights"])
            )


# The Model artifact's custom property with the settings the Tuner's best point decided (JSON:
# hidden_units, learning_rate, dropout), when the Trainer had the Tuner's hyperparameters.
TUNED_SETTINGS_PROPERTY = "tuned_settings"


def record_tuned_settings(input_dict, output_dict, custom_config: dict) -> None:
    """The settings the project's run_fn trained with after applying the Tuner's best point."""
    hyperparameters = input_dict.get(standard_component_specs.HYPERPARAMETERS_KEY)
    if not hyperparameters:
        return
    import tensorflow as tf
    from tfx.utils import io_utils

    from components.training import search_space

    path = io_utils.get_only_uri_in_dir(artifact_utils.get_single_uri(hyperparameters))
    with tf.io.gfile.GFile(path) as handle:
        values = json.load(handle).get("values", {})
    _, settings = TrainingConfig.from_custom_config(custom_config)
    tuned = search_space.tuned_settings(search_space.with_hyperparameters(settings, values))
    for model_artifact in output_dict[standard_component_specs.MODEL_KEY]:
        model_artifact.set_string_custom_property(
            TUNED_SETTINGS_PROPERTY, json.dumps(tuned, sort_keys=True)
        )


def _json_properties(properties: dict[str, Any]) -> dict[str, Any]:
    """Exec properties as JSON types (TFX gives protos as their JSON text already)."""
    return {
        k: v for k, v in properties.items() if isinstance(v, (str, int, float, bool, type(None)))
    }


def check_model_written(serving_model_dir: str, run_fn: str, module) -> None:
    import tensorflow as tf

    if tf.io.gfile.exists(serving_model_dir) and tf.io.gfile.listdir(serving_model_dir):
        return
    where = (
        f" ({module.source})"
        if module is not None and run_fn.startswith(module.module + ".")
        else ""
    )
    raise RuntimeError(
        f"run_fn {run_fn}{where} wrote no model to fn_args.serving_model_dir "
        f"({serving_model_dir}): save the trained model there, e.g. "
        "tf.saved_model.save(model, fn_args.serving_model_dir, signatures=...) or "
        "model.save(fn_args.serving_model_dir, save_format='tf')"
    )


EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
