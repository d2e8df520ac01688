"""TFX's own Tuner component (tfx.components.Tuner: its spec, inputs and outputs) run by the
project's executor (components.tfx_components.tuner.executor)."""

from __future__ import annotations

from tfx.components.tuner.component import Tuner

from components.tfx_components.tuner import executor


class ProjectTuner(Tuner):
    EXECUTOR_SPEC = executor.EXECUTOR_SPEC
