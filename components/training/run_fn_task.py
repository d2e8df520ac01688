"""A user's run_fn as one task of a training cluster: TFX's FnArgs rebuilt from the Trainer
execution's artifacts and exec properties in every task process (local or a pod), then the
function called with this process's TF_CONFIG, as TFX's Vertex AI trainer runs the executor in
every replica. The function builds its own strategy from TF_CONFIG (MultiWorkerMirroredStrategy,
or ParameterServerStrategy on the chief; its workers and servers only serve, run_task)."""

from __future__ import annotations

import dataclasses
import json

from components import user_code
from components.training import settings as settings_lib
from components.training.settings import TrainingConfig


@dataclasses.dataclass(frozen=True)
class RunFnTask:
    run_fn: str
    # TFX's artifact dicts as JSON (tfx.types.artifact_utils.jsonify_artifact_dict) and the exec
    # properties (the user's custom_config in place of the project's).
    input_dict: str
    output_dict: str
    exec_properties: str
    model_run_dir: str
    user_module: str = ""
    settings: TrainingConfig = TrainingConfig()

    def save(self, path: str) -> None:
        import tensorflow as tf

        with tf.io.gfile.GFile(path, "w") as handle:
            handle.write(settings_lib.dumps(self))

    @classmethod
    def from_dict(cls, values: dict) -> RunFnTask:
        return settings_lib.from_dict(cls, values)

    def runs_in_process(self) -> bool:
        return not self.settings.needs_cluster


def run(task: RunFnTask) -> dict:
    """Calls the user's run_fn with TFX's FnArgs for this execution."""
    from tfx.components.trainer import executor as tfx_trainer_executor
    from tfx.types import artifact_utils

    user_code.activate(user_code.UserModule.from_json(task.user_module))
    fn_args = tfx_trainer_executor.GenericExecutor()._GetFnArgs(  # noqa: SLF001 (TFX's own)
        artifact_utils.parse_artifact_dict(task.input_dict),
        artifact_utils.parse_artifact_dict(task.output_dict),
        json.loads(task.exec_properties),
    )
    user_code.load_function(task.run_fn)(fn_args)
    return {"run_fn": task.run_fn}
