"""Evaluator executor that treats an empty baseline artifact as no baseline.

BaselineModel always produces its artifact (a KFP task cannot leave an output out); on a first
run it holds no model. TFX's Evaluator would fail to load it, so the empty artifact is removed
from the inputs and the run is evaluated as TFX evaluates one without a baseline (the value
threshold only). A staged user module (custom metrics named by the user's EvalConfig) is made
importable first, here and in the Beam SDK workers (components.user_code), and TFMA's eager
Keras metric updates skip AutoGraph (components.compat). Everything else is TFX's executor,
through super().
"""

from __future__ import annotations

from typing import Any

from tfx.components.evaluator import executor as tfx_executor
from tfx.types import standard_component_specs
from tfx.utils import path_utils

from components import compat, user_code
from components.tfx_components import baseline

BASELINE_MODEL_KEY = standard_component_specs.BASELINE_MODEL_KEY


def present_baselines(models: list) -> list:
    """The baseline artifacts that hold a SavedModel."""
    return [m for m in models if baseline.has_saved_model(path_utils.serving_model_path(m.uri))]


class Executor(tfx_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties: dict[str, Any]):  # noqa: N802
        # TFMA metrics of a user's --eval_config defined in their module's folder: importable
        # here (where TFMA builds the computations) and in the SDK workers (which run them).
        user_code.prepare_beam_executor(self, exec_properties)
        inputs = dict(input_dict)
        present = present_baselines(list(inputs.pop(BASELINE_MODEL_KEY, None) or []))
        if present:
            inputs[BASELINE_MODEL_KEY] = present
        # Keras metrics updated eagerly without AutoGraph's source conversion (compat says why).
        with compat.tfma_keras_metrics_without_autograph():
            return super().Do(inputs, output_dict, exec_properties)
