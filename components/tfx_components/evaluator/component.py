"""TFX's Evaluator with the executor that reads an empty baseline as none."""

from __future__ import annotations

from tfx.components import Evaluator
from tfx.dsl.components.base import executor_spec

from components.tfx_components.evaluator import executor


class BaselineEvaluator(Evaluator):
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)
