"""The project's own evaluations over record batches, written in TFMA's own output format.

TFMA 0.47 unbatches every record batch into one extract per example and feeds each to its
metric combiners one at a time: about 0.5 ms of Python per example, 17x the Trainer's time per
example pass (docs/benchmarks.md, "Text columns of thousands of values"). The project's own
EvalConfigs (pipeline.builder.regression_eval_config and classification_eval_config) ask only for
what sums over the examples give: counts, errors, class counts, log losses and a calibration
histogram. So, for an EvalConfig that asks for no more than that (plan() says which, and why
not), the Evaluator computes them here instead:

  tfxio RecordBatches (as TFX's Evaluator reads them, the serialized examples kept)
    -> EvaluateBatches: each model's preprocessing signature (the label) and serving signature
       (the prediction) once per batch; per (model, output) sums in numpy (batched_metrics)
    -> SumBatches (a CombineFn): the sums over all batches -> what TFMA's combiners would give
       (batched_metrics.combiner_output), then TFMA's own derived computations on that (AUC, the
       confusion-matrix plot), keyed by TFMA's own MetricKeys, plus TFMA's diff metrics
    -> WriteResults: the files TFMA's writers write, by TFMA's own functions: metrics, plots and
       attributions, the ValidationResult (TFMA's validate_metrics and CombineValidations) and
       eval_config.json; so tfma.load_eval_result / load_validation_result, the blessing and
       the project's report read it as TFMA's.

Anything else (slices, weights, confidence intervals, a metric or setting not in
batched_metrics, a preprocessing function other than transform_label) is TFMA's, unchanged:
plan() returns the reason, which the executor logs.
tests/components/tfx_components/test_evaluator_batched.py runs both on regression and
classification models and compares every value, the plot and the blessing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np

from components.ml import features
from components.tfx_components.evaluator import batched_metrics

# Rows per record batch (TFX's Evaluator lets tfx-bsl pick, growing from 1 row).
BATCH_ROWS = 1024


@dataclass(frozen=True)
class Target:
    """Where one (model, output)'s label and prediction come from, and the sums kept for it
    (batched_metrics.needs)."""

    model_name: str
    output_name: str
    label_key: str
    prediction_key: str
    needs: tuple = ()


@dataclass(frozen=True)
class Plan:
    """What the batched path computes: the EvalConfig (with TFMA's defaults, as TFX's Evaluator
    passes it), TFMA's public MetricKeys and PlotKeys for it, the (model, output) pairs they read,
    each model's preprocessing signatures, and TFMA's own computations: the combiner ones the
    sums replace and the derived ones run on their outputs."""

    eval_config: Any
    keys: tuple
    targets: tuple[Target, ...]
    preprocessing: dict[str, tuple[str, ...]]
    combined: tuple = ()
    derived: tuple = ()


def _label_and_prediction_keys(spec, output_name: str) -> tuple[str, str] | None:
    label = spec.label_keys.get(output_name) if spec.label_keys else spec.label_key or None
    if spec.prediction_keys:
        prediction = spec.prediction_keys.get(output_name)
    else:
        prediction = spec.prediction_key or output_name or None
    if not label or not prediction:
        return None
    return label, prediction


def _is_private(key) -> bool:
    # TFMA's evaluator drops these (metrics_plots_and_validations_evaluator._is_private_metrics).
    return key.name.startswith("_") and not key.name.startswith("__")


def plan(eval_config) -> Plan | str:
    """A Plan for an EvalConfig (TFMA's defaults applied) the batched path computes exactly as
    TFMA does, else the reason (one line) it goes to TFMA."""
    from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as mpv
    from tensorflow_model_analysis.metrics import metric_specs

    options = eval_config.options
    if options.compute_confidence_intervals.value:
        return "confidence intervals are asked for"
    if options.disabled_outputs.values:
        return "disabled_outputs is set"
    if any(spec != type(spec)() for spec in eval_config.slicing_specs):
        return "the EvalConfig has slicing specs other than the overall slice"
    if eval_config.cross_slicing_specs:
        return "the EvalConfig has cross-slicing specs"
    preprocessing: dict[str, tuple[str, ...]] = {}
    for spec in eval_config.model_specs:
        names = tuple(spec.preprocessing_function_names)
        if names != (features.TRANSFORM_LABEL_SIGNATURE,):
            return (
                f"model {spec.name or 'candidate'!r} reads its label through "
                f"{', '.join(names) or 'no preprocessing function'}, not the project's "
                f"{features.TRANSFORM_LABEL_SIGNATURE} signature alone"
            )
        if spec.example_weight_key or spec.example_weight_keys:
            return "example weights are configured"
        if spec.model_type not in ("", "tf_generic"):
            return f"model type {spec.model_type!r} (the batched path calls signatures)"
        preprocessing[spec.name] = names
    for metrics_spec in eval_config.metrics_specs:
        if (
            metrics_spec.HasField("binarize")
            or metrics_spec.query_key
            or metrics_spec.HasField("example_weights")
        ):
            return "a metrics spec binarizes, groups by query or weighs examples"
        for metric in metrics_spec.metrics:
            if (metric.class_name, metric.module) not in batched_metrics.METRIC_CLASSES:
                module = f" ({metric.module})" if metric.module else ""
                return f"metric {metric.class_name}{module} is not one the batched path computes"
            if metric.config or metric.per_slice_thresholds or metric.cross_slice_thresholds:
                return f"metric {metric.class_name} has its own config or per-slice thresholds"
    computations = mpv._filter_and_separate_computations(
        metric_specs.to_computations(eval_config.metrics_specs, eval_config=eval_config)
    )
    if computations.cross_slice_computations or computations.ci_derived_computations:
        return "TFMA computes cross-slice or confidence-interval metrics for it"
    specs = {spec.name: spec for spec in eval_config.model_specs}
    target_needs: dict[tuple[str, str], dict] = {}
    for computation in computations.non_derived_computations:
        needed = batched_metrics.needs(computation)
        if isinstance(needed, str):
            return needed
        for key in computation.keys:
            into = target_needs.setdefault((key.model_name, key.output_name), {})
            reason = batched_metrics.merge_needs(into, needed)
            if reason:
                return reason
    targets = []
    for (model_name, output_name), needed in sorted(target_needs.items()):
        spec = specs.get(model_name)
        found = _label_and_prediction_keys(spec, output_name) if spec else None
        if found is None:
            return f"no label or prediction key for output {output_name!r}"
        targets.append(Target(model_name, output_name, *found, tuple(sorted(needed.items()))))
    keys = sorted(
        {
            key
            for c in [*computations.non_derived_computations, *computations.derived_computations]
            for key in c.keys
            if not _is_private(key)
        },  # fmt: skip
        key=str,
    )
    if any(key.is_diff for key in keys):
        return "TFMA computes a diff metric directly"
    if not keys:
        return "the EvalConfig asks for no metrics"
    return Plan(
        eval_config,
        tuple(keys),
        tuple(targets),
        preprocessing,
        tuple(computations.non_derived_computations),
        tuple(computations.derived_computations),
    )


EvaluationInputError = batched_metrics.EvaluationInputError


def _load(path: str):
    import tensorflow as tf

    return tf.saved_model.load(path)


def _call(signature, records) -> dict[str, np.ndarray]:
    import tensorflow as tf

    [input_name] = list(signature.structured_input_signature[1])
    outputs = signature(**{input_name: tf.constant(records)})
    return {name: value.numpy() for name, value in outputs.items()}


def _scalars(values, name: str, rows: int, where: str) -> np.ndarray:
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    if flat.shape[0] != rows:
        raise EvaluationInputError(
            f"{where} {name!r} has {flat.shape[0]} values for {rows} examples: the batched "
            f"Evaluator reads one number per example"
        )
    return flat


def raw_column(batch, name: str) -> np.ndarray | None:
    """A raw feature of a RecordBatch as one float per row; None when no example has it. A row
    without exactly one value is an error naming the feature."""
    import pyarrow as pa
    import pyarrow.compute as pc

    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
        if (lengths != 1).any():
            row = int(np.argmax(lengths != 1))
            raise EvaluationInputError(
                f"eval example {row} of a batch has {int(lengths[row])} values for the label "
                f"{name!r}: every eval example needs exactly one"
            )
        column = pc.list_flatten(column)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


class EvaluateBatches(beam.DoFn):
    """Per record batch: each model's signatures once, then per (model, output) the sums its
    metrics read (batched_metrics.target_sums)."""

    def __init__(self, plan_: Plan, model_paths: dict[str, str]):
        from apache_beam.utils import shared

        self._plan = plan_
        self._paths = model_paths
        self._shared = {name: shared.Shared() for name in model_paths}
        self._models: dict[str, Any] = {}

    def setup(self):
        for name, path in self._paths.items():
            self._models[name] = self._shared[name].acquire(lambda p=path: _load(p), tag=path)

    def process(self, batch):
        import pyarrow.compute as pc
        from tensorflow_model_analysis import constants as tfma_constants

        raw = batch.column(batch.schema.get_field_index(tfma_constants.ARROW_INPUT_COLUMN))
        records = pc.list_flatten(raw).to_pylist()
        rows = batch.num_rows
        if not rows:
            return
        outputs = {}
        for name, model in self._models.items():
            transformed: dict[str, np.ndarray] = {}
            for function in self._plan.preprocessing[name]:
                transformed.update(_call(model.signatures[function], records))
            outputs[name] = (
                transformed,
                _call(model.signatures[features.SERVING_SIGNATURE], records),
            )
        sums = {}
        for target in self._plan.targets:
            transformed, predictions = outputs[target.model_name]
            if target.label_key in transformed:
                labels = _scalars(transformed[target.label_key], target.label_key, rows, "label")
            else:
                raw_labels = raw_column(batch, target.label_key)
                if raw_labels is None:
                    raise EvaluationInputError(
                        f"the label {target.label_key!r} is neither an output of "
                        f"{', '.join(self._plan.preprocessing[target.model_name])} nor a feature "
                        "of the eval examples"
                    )
                labels = raw_labels
            if target.prediction_key not in predictions:
                raise EvaluationInputError(
                    f"the prediction {target.prediction_key!r} is not an output of the model's "
                    f"{features.SERVING_SIGNATURE} signature (its outputs: "
                    f"{', '.join(sorted(predictions))})"
                )
            predicted = predictions[target.prediction_key]
            needed = dict(target.needs)
            if "regression" in needed:
                predicted = _scalars(predicted, target.prediction_key, rows, "prediction")
            sums[target.model_name, target.output_name] = batched_metrics.target_sums(
                needed, labels, predicted, target.label_key
            )
        yield sums


class SumBatches(beam.CombineFn):
    """The batches' sums added up; then what TFMA's combiners would give, TFMA's derived
    computations on that (AUC, the plot), and TFMA's diff metrics (candidate - baseline) when
    the EvalConfig has a baseline; private keys dropped, as TFMA's evaluator does."""

    def __init__(self, plan_: Plan):
        self._plan = plan_

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, accumulator: dict, sums: dict) -> dict:
        for target, values in sums.items():
            batched_metrics.add_sums(accumulator.setdefault(target, {}), values)
        return accumulator

    def merge_accumulators(self, accumulators) -> dict:
        merged: dict = {}
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator: dict) -> dict | None:
        from tensorflow_model_analysis.evaluators import (
            metrics_plots_and_validations_evaluator as mpv,
        )
        from tensorflow_model_analysis.utils import model_util

        if not accumulator:  # no examples
            return None
        metrics: dict = {}
        for computation in self._plan.combined:
            metrics.update(batched_metrics.combiner_output(computation, accumulator))
        for computation in self._plan.derived:
            metrics.update(computation.result(metrics))
        baseline = model_util.get_baseline_model_spec(self._plan.eval_config)
        if baseline is not None:
            diffs = {}
            for key, value in metrics.items():
                counterpart = key.make_baseline_key(baseline.name)
                if (
                    not _is_private(key)
                    and not key.is_diff
                    and key.model_name != baseline.name
                    and counterpart in metrics
                    and mpv._is_metric_diffable(value)
                ):
                    diffs[key.make_diff_key()] = value - metrics[counterpart]
            metrics.update(diffs)
        return {key: value for key, value in metrics.items() if not _is_private(key)}


def write_results(metrics: dict | None, plan_: Plan, model_paths: dict, output_uri: str) -> None:
    """The files TFMA's writers write (tfma.default_writers: metrics, plots, attributions and
    validations as TFRecords of TFMA's protos, eval_config.json), from the overall slice's
    metrics (None: no examples, which TFMA's validation reports as a missing slice). Written by
    TFMA's own functions (convert_slice_*_to_proto, validate_metrics, CombineValidations), as one
    step instead of TFMA's Beam sinks: a sink's stages cost more than the whole data path here."""
    import tensorflow as tf
    import tensorflow_model_analysis as tfma
    from google.protobuf import json_format
    from tensorflow_model_analysis import constants as tfma_constants
    from tensorflow_model_analysis.evaluators import metrics_validator
    from tensorflow_model_analysis.metrics import metric_types
    from tensorflow_model_analysis.proto import config_pb2
    from tensorflow_model_analysis.writers import (
        eval_config_writer,
    )
    from tensorflow_model_analysis.writers import (
        metrics_plots_and_validations_writer as writer,
    )

    tf.io.gfile.makedirs(output_uri)
    # TFMA's evaluator splits its results by key type: PlotKeys are plots, the rest metrics.
    sliced, plots = [], []
    if metrics is not None:
        is_plot = {k: isinstance(k, metric_types.PlotKey) for k in metrics}
        sliced = [((), {k: v for k, v in metrics.items() if not is_plot[k]})]
        plots = [((), {k: v for k, v in metrics.items() if is_plot[k]})]
    records = {
        tfma_constants.METRICS_KEY: [writer.convert_slice_metrics_to_proto(s, []) for s in sliced],
        tfma_constants.PLOTS_KEY: [writer.convert_slice_plots_to_proto(p, []) for p in plots],
        tfma_constants.ATTRIBUTIONS_KEY: [
            writer.convert_slice_attributions_to_proto((key, {})) for key, _ in sliced
        ],
    }
    # Beam's WriteToTFRecord names (one shard), as TFMA's writers leave them.
    for key, protos in records.items():
        with tf.io.TFRecordWriter(
            os.path.join(output_uri, f"{key}-00000-of-00001.tfrecord")
        ) as out:
            for proto in protos:
                out.write(proto.SerializeToString())
    # As TFX's Evaluator: its shared models are made without rubber_stamp.
    combine = writer.CombineValidations(plan_.eval_config, rubber_stamp=False)
    validation = combine.create_accumulator()
    for one in sliced:
        validation = combine.add_input(
            validation, metrics_validator.validate_metrics(one, plan_.eval_config)
        )
    validation = combine.extract_output(validation)
    path = os.path.join(output_uri, f"{tfma_constants.VALIDATIONS_KEY}.tfrecord")
    with tf.io.TFRecordWriter(path) as out:
        out.write(validation.SerializeToString())
    run = config_pb2.EvalRun(
        eval_config=plan_.eval_config,
        version=tfma.version.VERSION,
        data_location="<user provided PCollection>",
        file_format="<unknown>",
        model_locations=model_paths,
    )
    name = f"{eval_config_writer.EVAL_CONFIG_FILE}.{eval_config_writer.EVAL_CONFIG_FILE_FORMAT}"
    with tf.io.gfile.GFile(os.path.join(output_uri, name), "w") as out:
        out.write(json_format.MessageToJson(run))


class WriteResults(beam.DoFn):
    """write_results on the one combined element."""

    def __init__(self, plan_: Plan, model_paths: dict[str, str], output_uri: str):
        self._plan, self._paths, self._uri = plan_, model_paths, output_uri

    def process(self, metrics: dict | None):
        write_results(metrics, self._plan, self._paths, self._uri)
        yield self._uri


@beam.ptransform_fn
def EvaluateAndWrite(  # noqa: N802 (a Beam PTransform)
    record_batches, plan_: Plan, model_paths: dict[str, str], output_uri: str
):
    """Record batches -> TFMA's output files under output_uri."""
    return (
        record_batches
        | "EvaluateBatches" >> beam.ParDo(EvaluateBatches(plan_, model_paths))
        | "SumBatches" >> beam.CombineGlobally(SumBatches(plan_))
        | "WriteResults" >> beam.ParDo(WriteResults(plan_, model_paths, output_uri))
    )
