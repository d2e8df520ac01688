"""Tuner executor: TFX's Tuner (tuner_fn -> TunerFnResult, then KerasTuner's search and TFX's
best_hyperparameters / tuner_results files), with

- the user's staged module importable (a module's tuner_fn) and the user's custom_config as
  fn_args.custom_config, as the Trainer's executor gives a user's run_fn;
- --max_trials over the tuner's own max_trials when given (TUNING_CONFIG_KEY);
- --tune_workers N > 1: KerasTuner's distributed mode on this machine (or in the Tuner's pod),
  one oracle chief process and N tuner worker processes (components.tfx_components.tuner
  .distributed), a killed worker restarted with its tuner id; or, with the Trainer's TFJob or
  TrainJob launcher (the tuning config's "launcher"), the chief and the workers as the replicas
  of one job (components.training.tuner_job);
- the trial count, the best score and the workers recorded as custom properties of the
  HyperParameters artifact, which TFX publishes to MLMD with it.
"""

from __future__ import annotations

import json
import logging as std_logging
import os
from typing import Any

from absl import logging
from tfx.components.tuner import executor as tfx_tuner_executor
from tfx.dsl.components.base import base_executor, executor_spec
from tfx.types import standard_component_specs

from components import PROGRESS_LOGGER, user_code
from components.tfx_components.tuner.search import search, summary
from components.training.settings import USER_CONFIG_KEY

progress_log = std_logging.getLogger(PROGRESS_LOGGER)
CUSTOM_CONFIG_KEY = "custom_config"
# The Tuner's custom_config key with the runner's settings: max_trials (None: the tuner's
# own), workers, max_restarts (per worker).
TUNING_CONFIG_KEY = "tuning"
PROJECT_TUNER_FN = "components.training.tuning.tuner_fn"
# Custom properties of the HyperParameters artifact.
TRIALS_PROPERTY = "trials"
BEST_SCORE_PROPERTY = "best_score"
OBJECTIVE_PROPERTY = "objective"
WORKERS_PROPERTY = "tune_workers"
RESTARTS_PROPERTY = "worker_restarts"
# Where the parallel workers ran: processes (beside the chief), tfjob or trainjob (a job of the
# Trainer's launcher, its worker 0 the chief).
LAUNCHER_PROPERTY = "tune_launcher"
# The KerasTuner project folder: in the executor's temporary folder, or for a launcher's job in
# the TunerResults output (storage the job's pods share), where the finished trials stay.
SEARCH_DIR = "search"


def split_properties(exec_properties: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the exec properties tuner_fn sees, the runner's tuning settings): a user's tuner_fn gets
    the user's custom_config only, the project's its whole custom_config."""
    custom_config = json.loads(exec_properties.get(CUSTOM_CONFIG_KEY) or "null") or {}
    tuning = custom_config.pop(TUNING_CONFIG_KEY, None) or {}
    if exec_properties.get("tuner_fn") != PROJECT_TUNER_FN:
        custom_config = custom_config.get(USER_CONFIG_KEY) or {}
    return dict(exec_properties, **{CUSTOM_CONFIG_KEY: json.dumps(custom_config)}), tuning


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 (TFX API)
        if tfx_tuner_executor.get_tune_args(exec_properties):
            raise ValueError("TuneArgs is not supported by this Tuner's Executor.")
        user_code.activate(user_code.from_exec_properties(exec_properties))
        properties, tuning = split_properties(exec_properties)
        workers = int(tuning.get("workers") or 1)
        max_trials = tuning.get("max_trials")
        working_dir = os.path.join(self._get_tmp_dir(), SEARCH_DIR)
        restarts: int | None = 0
        launcher = "processes" if workers > 1 else ""
        if workers <= 1:
            tuner = search(input_dict, properties, working_dir, max_trials)
            tfx_tuner_executor.write_best_hyperparameters(tuner, output_dict)
            result = summary(tuner)
        elif tuning.get("launcher"):
            from components.tfx_components.tuner import distributed

            # The job's pods share the Tuner's outputs (the executor's temporary folder may be
            # the launching pod's own); the finished trials stay there with TFX's results.
            [results] = output_dict[standard_component_specs.TUNER_RESULTS_KEY]
            result = distributed.run_on_launcher(
                input_dict,
                output_dict,
                properties,
                os.path.join(results.uri, SEARCH_DIR),
                workers=workers,
                max_trials=max_trials,
                launcher=tuning["launcher"],
                max_restarts=int(tuning.get("max_restarts", 2)),
            )
            restarts = None
            launcher = str(tuning["launcher"].get("kind", ""))
        else:
            from components.tfx_components.tuner import distributed

            result = distributed.run(
                input_dict,
                output_dict,
                properties,
                working_dir,
                workers=workers,
                max_trials=max_trials,
                max_restarts=int(tuning.get("max_restarts", 2)),
            )
            restarts = result["restarts"]
        _record(output_dict, result, workers, restarts, launcher)
        progress_log.info(
            "%d trial(s), best %s %s: %s",
            result["trials"],
            result["objective"],
            "none" if result["best_score"] is None else f"{result['best_score']:.4f}",
            json.dumps(result["best_values"], sort_keys=True),
        )
        logging.info("Tuner result: %s", result)


def _record(output_dict, result: dict, workers: int, restarts: int | None, launcher: str) -> None:
    """restarts None: a launcher's job, whose operator restarts pods (its progress lines say)."""
    for artifact in output_dict[standard_component_specs.BEST_HYPERPARAMETERS_KEY]:
        artifact.set_int_custom_property(TRIALS_PROPERTY, int(result["trials"]))
        if result["best_score"] is not None:
            artifact.set_float_custom_property(BEST_SCORE_PROPERTY, result["best_score"])
        artifact.set_string_custom_property(OBJECTIVE_PROPERTY, result["objective"])
        artifact.set_int_custom_property(WORKERS_PROPERTY, workers)
        if restarts is not None:
            artifact.set_int_custom_property(RESTARTS_PROPERTY, restarts)
        if launcher:
            artifact.set_string_custom_property(LAUNCHER_PROPERTY, launcher)


EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
