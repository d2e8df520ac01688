"""The search itself, shared by the Tuner's executor (one process) and by each of its parallel
workers (components.tfx_components.tuner.distributed, components.training.tuner_job): TFX's
tuner_fn contract checked, the search run, what the HyperParameters artifact records of it, and
one process of a parallel search (main: the chief or a worker, by KERASTUNER_TUNER_ID)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from tfx.components.trainer import fn_args_utils

from components import user_code

CHIEF = "chief"
# What the chief writes of the search when every trial is done (for the runner that started it).
SUMMARY_FILE = "chief_summary.json"


class TunerFnError(ValueError):
    """A tuner_fn that does not keep TFX's contract; the message names it."""


def search(input_dict, exec_properties, working_dir: str, max_trials: int | None):
    """TFX's search() (tfx.components.tuner.executor), with the result checked and
    --max_trials applied before the search: the tuner, searched."""
    tuner_fn = exec_properties["tuner_fn"]
    fn_args = fn_args_utils.get_common_fn_args(input_dict, exec_properties, working_dir)
    result = user_code.load_function(tuner_fn)(fn_args)
    tuner = getattr(result, "tuner", None)
    if tuner is None or not isinstance(getattr(result, "fit_kwargs", None), dict):
        raise TunerFnError(
            f"tuner_fn {tuner_fn} returned {type(result).__name__}; return "
            "tfx.components.TunerFnResult(tuner=<a KerasTuner tuner>, fit_kwargs={...})"
        )
    if max_trials and hasattr(tuner.oracle, "max_trials"):
        tuner.oracle.max_trials = max_trials
    tuner.search(**result.fit_kwargs)
    return tuner


def completed_trials(tuner) -> list:
    from keras_tuner.engine import trial as trial_module

    return [
        t
        for t in tuner.oracle.trials.values()
        if t.status == trial_module.TrialStatus.COMPLETED and t.score is not None
    ]


def summary(tuner) -> dict[str, Any]:
    """What the artifact records: completed trials, the best score, the objective."""
    done = completed_trials(tuner)
    objective = tuner.oracle.objective
    best = tuner.oracle.get_best_trials(1)
    return {
        "trials": len(done),
        "best_score": float(best[0].score) if best and best[0].score is not None else None,
        "objective": getattr(objective, "name", str(objective)),
        "best_values": best[0].hyperparameters.values if best else {},
    }


@dataclasses.dataclass(frozen=True)
class TunerTask:
    """What every process of the search reads: TFX's artifact dicts as JSON, the exec
    properties tuner_fn sees, the shared working directory and --max_trials."""

    input_dict: str
    output_dict: str
    exec_properties: str
    working_dir: str
    max_trials: int | None

    def save(self, path: str) -> None:
        import tensorflow as tf

        # tf.io.gfile: the task of a launcher's job lives on storage its pods share (gs://).
        with tf.io.gfile.GFile(path, "w") as handle:
            handle.write(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, path: str) -> TunerTask:
        import tensorflow as tf

        with tf.io.gfile.GFile(path) as handle:
            return cls(**json.loads(handle.read()))


def main(task_path: str) -> int:
    """One process of the search: the chief serves the oracle until every trial is done, then
    writes TFX's output files and the summary; a worker runs trials until the oracle stops."""
    from tfx.components.tuner import executor as tfx_tuner_executor
    from tfx.types import artifact_utils

    task = TunerTask.load(task_path)
    exec_properties = json.loads(task.exec_properties)
    user_code.activate(user_code.from_exec_properties(exec_properties))
    input_dict = artifact_utils.parse_artifact_dict(task.input_dict)
    tuner = search(input_dict, exec_properties, task.working_dir, task.max_trials)
    if os.environ.get("KERASTUNER_TUNER_ID") == CHIEF:
        output_dict = artifact_utils.parse_artifact_dict(task.output_dict)
        tfx_tuner_executor.write_best_hyperparameters(tuner, output_dict)
        import tensorflow as tf

        path = os.path.join(task.working_dir, SUMMARY_FILE)
        with tf.io.gfile.GFile(path + ".tmp", "w") as handle:
            handle.write(json.dumps(summary(tuner)))
        tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
    return 0
