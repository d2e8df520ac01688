"""Evaluator executor that treats an empty baseline artifact as no baseline.

BaselineModel always produces its artifact (a KFP task cannot leave an output out); on a first
run it holds no model. TFX's Evaluator would fail to load it, so the empty artifact is removed
from the inputs and the run is evaluated as TFX evaluates one without a baseline (the value
threshold only). A staged user module (custom metrics named by the user's EvalConfig) is made
importable first, here and in the Beam SDK workers (components.user_code), and TFMA's eager
Keras metric updates skip AutoGraph (components.compat). Everything else is TFX's executor,
through super(). A model exported before the transform_label signature (a baseline, or a
cached candidate) has the EvalConfig read the label from transform_features instead
(label_signature_for). Before it, the candidate model is checked against the EvalConfig
(model_check: a missing signature or label is one line naming --eval_config, not a TFMA
traceback). The project's regression and classification EvalConfigs are computed over record
batches (batched: about 10-20x less Python per example than TFMA, the same output files); any
other goes to TFMA, and the log says which path ran and why.
"""

from __future__ import annotations

import os
from typing import Any

from absl import logging
from tfx.components.evaluator import constants as tfx_constants
from tfx.components.evaluator import executor as tfx_executor
from tfx.components.util import tfxio_utils
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, json_utils, path_utils

from components import compat, user_code
from components.ml import features
from components.tfx_components import baseline
from components.tfx_components.evaluator import batched, model_check

BASELINE_MODEL_KEY = standard_component_specs.BASELINE_MODEL_KEY
MODEL_KEY = standard_component_specs.MODEL_KEY
EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
EVAL_CONFIG_KEY = standard_component_specs.EVAL_CONFIG_KEY
EXAMPLE_SPLITS_KEY = standard_component_specs.EXAMPLE_SPLITS_KEY
EVALUATION_KEY = standard_component_specs.EVALUATION_KEY
BLESSING_KEY = standard_component_specs.BLESSING_KEY


def present_baselines(models: list) -> list:
    """The baseline artifacts that hold a SavedModel."""
    return [m for m in models if baseline.has_saved_model(path_utils.serving_model_path(m.uri))]


def check_candidate(input_dict, exec_properties: dict[str, Any]) -> None:
    """model_check.check on the candidate SavedModel and the first eval split's examples."""
    import tensorflow_model_analysis as tfma
    from google.protobuf import json_format

    text = exec_properties.get(EVAL_CONFIG_KEY)
    models = list(input_dict.get(MODEL_KEY) or [])
    if not text or not models:
        return
    eval_config = json_format.Parse(text, tfma.EvalConfig())
    signatures, attributes = model_check.saved_model_interface(
        path_utils.serving_model_path(models[0].uri)
    )
    splits = json_utils.loads(exec_properties.get(EXAMPLE_SPLITS_KEY) or "null") or ["eval"]
    examples = list(input_dict.get(EXAMPLES_KEY) or [])

    def raw_features() -> set[str]:  # read only for a label no preprocessing function returns
        if not examples:
            return set()
        return model_check.example_feature_names(artifact_utils.get_split_uri(examples, splits[0]))

    model_check.check(eval_config, signatures, attributes, raw_features)


def label_signature_for(models: list, exec_properties: dict[str, Any]) -> dict[str, Any]:
    """exec_properties with the EvalConfig's preprocessing function transform_label replaced by
    transform_features (the whole transform graph, whose outputs include the same transformed
    label) when one of the models (candidate or baseline) was exported before transform_label
    existed. TFMA applies one list of preprocessing functions to every model; the metrics are
    the same either way, transform_label only spares TFMA every other transformed column."""
    text = exec_properties.get(EVAL_CONFIG_KEY)
    if not text or features.TRANSFORM_LABEL_SIGNATURE not in text:
        return exec_properties
    for model in models:
        signatures, _ = model_check.saved_model_interface(path_utils.serving_model_path(model.uri))
        if features.TRANSFORM_LABEL_SIGNATURE not in signatures:
            break
    else:
        return exec_properties
    import tensorflow_model_analysis as tfma
    from google.protobuf import json_format

    eval_config = json_format.Parse(text, tfma.EvalConfig())
    for spec in eval_config.model_specs:
        names = [
            features.TRANSFORM_SIGNATURE if name == features.TRANSFORM_LABEL_SIGNATURE else name
            for name in spec.preprocessing_function_names
        ]
        del spec.preprocessing_function_names[:]
        spec.preprocessing_function_names.extend(names)
    return {**exec_properties, EVAL_CONFIG_KEY: json_format.MessageToJson(eval_config)}


def batched_plan(inputs: dict, exec_properties: dict[str, Any]) -> batched.Plan | str:
    """batched.plan for this run's EvalConfig with the defaults TFX's Evaluator gives it (model
    names, a baseline's spec when one is present), or the reason TFMA runs it."""
    import tensorflow_model_analysis as tfma
    from google.protobuf import json_format

    text = exec_properties.get(EVAL_CONFIG_KEY)
    if not text:
        return "no EvalConfig (a feature_slicing_spec)"
    if exec_properties.get(standard_component_specs.MODULE_FILE_KEY) or exec_properties.get(
        standard_component_specs.MODULE_PATH_KEY
    ):
        return "a module file gives its own eval shared model or extractors"
    eval_config = json_format.Parse(text, tfma.EvalConfig())
    eval_config = tfma.utils.update_eval_config_with_defaults(
        eval_config, has_baseline=bool(inputs.get(BASELINE_MODEL_KEY)), rubber_stamp=True
    )
    tfma.utils.verify_eval_config(eval_config)
    return batched.plan(eval_config)


def evaluate_batched(
    executor, plan: batched.Plan, inputs: dict, output_dict: dict, exec_properties: dict
) -> None:
    """TFX's Evaluator.Do with batched.EvaluateAndWrite in place of TFMA's extract/evaluate/write:
    the same examples (tfxio RecordBatches of every split's files), the same output files, the
    same blessing artifact (BLESSED / NOT_BLESSED file and custom properties)."""
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.metrics import metric_specs

    output_uri = artifact_utils.get_single_uri(output_dict[EVALUATION_KEY])
    model_paths = {}
    for spec in plan.eval_config.model_specs:
        key = BASELINE_MODEL_KEY if spec.is_baseline else MODEL_KEY
        model = artifact_utils.get_single_instance(inputs[key])
        model_paths[spec.name] = path_utils.serving_model_path(
            model.uri, path_utils.is_old_model_artifact(model)
        )
    splits = json_utils.loads(exec_properties.get(EXAMPLE_SPLITS_KEY) or "null") or ["eval"]
    examples = inputs[EXAMPLES_KEY]
    tfxio_factory = tfxio_utils.get_tfxio_factory_from_artifact(
        examples=examples,
        telemetry_descriptors=["Evaluator"],
        raw_record_column_name=tfma.ARROW_INPUT_COLUMN,
    )
    import apache_beam as beam

    with executor._make_beam_pipeline() as pipeline:
        batches = []
        for split in splits:
            for index, uri in enumerate(artifact_utils.get_split_uris(examples, split)):
                tfxio = tfxio_factory(io_utils.all_files_pattern(uri))
                batches.append(
                    pipeline
                    | f"ReadFromTFRecordToArrow[{split}][{index}]"
                    >> tfxio.BeamSource(batch_size=batched.BATCH_ROWS)
                )
        _ = (
            batches
            | "FlattenExamples" >> beam.Flatten()
            | "EvaluateAndWriteBatched" >> batched.EvaluateAndWrite(plan, model_paths, output_uri)
        )
    logging.info("Evaluation complete. Results written to %s.", output_uri)
    if not metric_specs.metric_thresholds_from_metrics_specs(
        plan.eval_config.metrics_specs, eval_config=plan.eval_config
    ):
        logging.info("No threshold configured, will not validate model.")
        return
    # The blessing as TFX's Evaluator writes it (tfx.components.evaluator.executor).
    blessing = artifact_utils.get_single_instance(output_dict[BLESSING_KEY])
    model = inputs[MODEL_KEY][0]
    blessing.set_string_custom_property(
        tfx_constants.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY, model.uri
    )
    blessing.set_int_custom_property(tfx_constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY, model.id)
    if inputs.get(BASELINE_MODEL_KEY):
        baseline_model = inputs[BASELINE_MODEL_KEY][0]
        blessing.set_string_custom_property(
            tfx_constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY, baseline_model.uri
        )
        blessing.set_int_custom_property(
            tfx_constants.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY, baseline_model.id
        )
    if "current_component_id" in exec_properties:
        blessing.set_string_custom_property("component_id", exec_properties["current_component_id"])
    validation_ok = tfma.load_validation_result(output_uri).validation_ok
    name = tfx_constants.BLESSED_FILE_NAME if validation_ok else tfx_constants.NOT_BLESSED_FILE_NAME
    io_utils.write_string_file(os.path.join(blessing.uri, name), "")
    blessing.set_int_custom_property(
        tfx_constants.ARTIFACT_PROPERTY_BLESSED_KEY,
        tfx_constants.BLESSED_VALUE if validation_ok else tfx_constants.NOT_BLESSED_VALUE,
    )
    logging.info("Blessing result %s written to %s.", validation_ok, blessing.uri)


class Executor(tfx_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties: dict[str, Any]):  # noqa: N802
        # TFMA metrics of a user's --eval_config defined in their module's folder: importable
        # here (where TFMA builds the computations) and in the SDK workers (which run them).
        user_code.prepare_beam_executor(self, exec_properties)
        inputs = dict(input_dict)
        present = present_baselines(list(inputs.pop(BASELINE_MODEL_KEY, None) or []))
        if present:
            inputs[BASELINE_MODEL_KEY] = present
        exec_properties = label_signature_for(
            [*(inputs.get(MODEL_KEY) or []), *present], exec_properties
        )
        check_candidate(input_dict, exec_properties)
        plan = batched_plan(inputs, exec_properties)
        if isinstance(plan, batched.Plan):
            logging.info(
                "Evaluator: batched evaluation over record batches of %d rows (%s)",
                batched.BATCH_ROWS,
                ", ".join(sorted({key.name for key in plan.keys})),
            )
            self._log_startup(inputs, output_dict, exec_properties)
            evaluate_batched(self, plan, inputs, output_dict, exec_properties)
            return None
        logging.info("Evaluator: TFMA's per-example evaluation, since %s", plan)
        # Keras metrics updated eagerly without AutoGraph's source conversion (compat says why).
        with compat.tfma_keras_metrics_without_autograph():
            return super().Do(inputs, output_dict, exec_properties)
