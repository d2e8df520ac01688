"""The batched Evaluator's arithmetic: per record batch sums for one (model, output), and from
their totals the values TFMA's own combiners would have produced.

TFMA splits an EvalConfig into combiner computations (per-example accumulators) and derived
computations (functions of the combiners' outputs: AUC from the calibration histogram, the
confusion-matrix plot from the matrices). The batched path replaces only the combiners, by sums
over whole batches in numpy, and then runs TFMA's derived computations unchanged on what it
produced, so AUC's thresholds, its interpolation and the plot's proto are TFMA's code.

Combiners replaced (`needs` says which sums each one reads; anything else is TFMA's):
  _ExampleCountCombiner            unweighted example count
  _CompilableMetricsCombiner       the Keras metrics in KERAS below, with their default names
  _MultiClassConfusionMatrixCombiner  unweighted, any thresholds: (label, argmax or -1) counts
  _CalibrationHistogramCombiner    unweighted, prediction-based buckets, no class weights, no
                                   sub key, micro-averaged over the classes (or a 1-column
                                   prediction): per bucket the label, prediction and pair sums
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Sums kept for a regression output, in this order.
COUNT, ABS_ERROR, SQUARED_ERROR, SQUARED_LABEL, ABS_LABEL = range(5)
SUMS = 5
# Keras' backend epsilon, by which its sparse crossentropy clips probabilities (in float32).
KERAS_EPSILON = np.float32(1e-7)


class EvaluationInputError(ValueError):
    """An eval example the metrics cannot read (a missing or non-scalar label, a class index
    outside the model's classes, a NaN probability)."""


def _divide_no_nan(numerator, denominator):
    return numerator / denominator if denominator else type(numerator)(0.0)


def _f32(value) -> float:
    """A Keras metric's result as TFMA reports it: a float32 value."""
    return float(np.float32(value))


def _regression(index_fn):
    return lambda s: _f32(index_fn(s["regression"]))


def _classes(s) -> np.ndarray:
    """(label + 1, argmax) counts over all thresholds' first-failure rows."""
    return s["classes"].sum(axis=0)


def _correct(m: np.ndarray) -> float:
    classes = m.shape[1]
    return float(np.trace(m[1 : classes + 1, :classes]))


def _accuracy_skill(s) -> float:
    m = _classes(s)
    examples, correct, majority = m.sum(), _correct(m), m[1].sum()
    return _f32(_divide_no_nan(np.float32(correct - majority), np.float32(examples - majority)))


def _balanced_accuracy_skill(s) -> float:
    """components.ml.metrics.BalancedAccuracySkill.result in float32: labels -1 count for no
    class."""
    m = _classes(s)[1:].astype(np.float32)
    support = m.sum(axis=1)
    hits = np.diagonal(m[:, : m.shape[0]]).astype(np.float32)
    present = support > 0
    classes = np.float32(present.sum())
    recalls = np.where(present, hits / np.where(present, support, np.float32(1)), np.float32(0))
    balanced = _divide_no_nan(np.float32(recalls.sum(dtype=np.float32)), classes)
    guess = _divide_no_nan(np.float32(1.0), classes)
    return _f32(_divide_no_nan(np.float32(balanced - guess), np.float32(1.0 - guess)))


# A Keras metric's default name -> (the sums it reads, its value from them). The components.ml
# ones are read as their result() computes them.
KERAS = {
    "root_mean_squared_error": (
        "regression",
        _regression(lambda s: math.sqrt(s[SQUARED_ERROR] / s[COUNT])),
    ),
    "mean_squared_error_skill": (
        "regression",
        _regression(lambda s: 1.0 - _divide_no_nan(s[SQUARED_ERROR], s[SQUARED_LABEL])),
    ),
    "standardized_absolute_error": (
        "regression",
        _regression(lambda s: _divide_no_nan(s[ABS_ERROR], s[COUNT])),
    ),
    "mean_predictor_standardized_absolute_error": (
        "regression",
        _regression(lambda s: _divide_no_nan(s[ABS_LABEL], s[COUNT])),
    ),
    "sparse_categorical_accuracy": (
        "classes",
        lambda s: _f32(_divide_no_nan(_correct(_classes(s)), float(_classes(s).sum()))),
    ),
    "majority_class_accuracy": (
        "classes",
        lambda s: _f32(_divide_no_nan(float(_classes(s)[1].sum()), float(_classes(s).sum()))),
    ),
    "accuracy_skill": ("classes", _accuracy_skill),
    "balanced_accuracy_skill": ("classes", _balanced_accuracy_skill),
    "sparse_categorical_crossentropy": (
        "crossentropy",
        lambda s: _f32(_divide_no_nan(float(s["crossentropy"][0]), float(s["rows"][0]))),
    ),
}
# (class_name, module) of a MetricConfig -> its default name.
METRIC_CLASSES = {
    ("ExampleCount", ""): "example_count",
    ("MeanAbsoluteError", ""): "mean_absolute_error",
    ("MeanSquaredError", ""): "mean_squared_error",
    ("RootMeanSquaredError", ""): "root_mean_squared_error",
    ("SparseCategoricalAccuracy", ""): "sparse_categorical_accuracy",
    ("SparseCategoricalCrossentropy", ""): "sparse_categorical_crossentropy",
    ("AUC", ""): "auc",
    ("MultiClassConfusionMatrixPlot", ""): "multi_class_confusion_matrix_plot",
    ("MeanSquaredErrorSkill", "components.ml.metrics"): "mean_squared_error_skill",
    ("StandardizedAbsoluteError", "components.ml.metrics"): "standardized_absolute_error",
    (
        "MeanPredictorStandardizedAbsoluteError",
        "components.ml.metrics",
    ): "mean_predictor_standardized_absolute_error",
    ("AccuracySkill", "components.ml.metrics"): "accuracy_skill",
    ("MajorityClassAccuracy", "components.ml.metrics"): "majority_class_accuracy",
    ("BalancedAccuracySkill", "components.ml.metrics"): "balanced_accuracy_skill",
}


def needs(computation) -> dict[str, Any] | str:
    """The sums a TFMA combiner computation reads, as {kind: setting}, or why the batched path
    does not replace it."""
    from tensorflow_model_analysis.metrics import (
        calibration_histogram,
        example_count,
        metric_types,
        metric_util,
        tf_metric_wrapper,
    )
    from tensorflow_model_analysis.metrics import (
        multi_class_confusion_matrix_metrics as multi_class,
    )

    combiner = computation.combiner
    name = type(combiner).__name__
    if isinstance(combiner, example_count._ExampleCountCombiner):
        # Its one preprocessor only picks the example weights, which it does not read unweighted.
        return {} if not combiner._example_weighted else "example counts are weighted"
    if computation.preprocessors:
        return f"TFMA's {name} has preprocessors"
    if type(combiner) in _tfma_regression_combiners():
        [key] = computation.keys
        if (
            combiner._example_weighted
            or combiner._aggregation_type
            or combiner._class_weights
            or key.sub_key
        ):
            return f"TFMA's {key.name} is weighted, aggregated or sub-keyed"
        return {"regression": True}
    if isinstance(combiner, tf_metric_wrapper._CompilableMetricsCombiner):
        if combiner._sub_key or combiner._aggregation_type or combiner._class_weights:
            return "a Keras metric is binarized, aggregated or class-weighted"
        if combiner._example_weighted:
            return "Keras metrics are weighted"
        unknown = sorted({k.name for k in computation.keys} - set(KERAS))
        if unknown:
            return f"Keras metric {unknown[0]!r} is not one the batched path computes"
        return {KERAS[k.name][0]: True for k in computation.keys}
    if isinstance(combiner, multi_class._MultiClassConfusionMatrixCombiner):
        if combiner._example_weighted:
            return "the multi-class confusion matrices are weighted"
        if combiner._extract_label_prediction_and_weight not in (
            None,
            metric_util.to_label_prediction_example_weight,
        ):
            return "the multi-class confusion matrices read labels their own way"
        return {"classes": tuple(float(t) for t in combiner._thresholds)}
    if isinstance(combiner, calibration_histogram._CalibrationHistogramCombiner):
        [key] = computation.keys
        if (
            combiner._example_weighted
            or combiner._class_weights
            or key.sub_key
            or not combiner._prediction_based_bucketing
            or not combiner._fractional_labels
            or combiner._aggregation_type
            not in (None, metric_types.AggregationType(micro_average=True))
        ):
            return "a calibration histogram is weighted, sub-keyed or not micro-averaged"
        if combiner._aggregation_type is None:
            return "a calibration histogram is not micro-averaged over the classes"
        return {"histogram": (combiner._num_buckets, combiner._left, combiner._range)}
    return f"TFMA's {name} is not a combiner the batched path replaces"


def _tfma_regression_combiners() -> dict:
    """TFMA's own mean regression error combiners (float64 sums) -> their value from the
    regression sums."""
    from tensorflow_model_analysis.metrics import mean_regression_error as mre

    return {
        mre._MeanAbsoluteErrorCombiner: lambda s: s[ABS_ERROR] / s[COUNT],
        mre._MeanSquaredErrorCombiner: lambda s: s[SQUARED_ERROR] / s[COUNT],
    }


def merge_needs(into: dict, more: dict) -> str | None:
    """Adds one computation's needs to a target's; a reason when two disagree (True: any
    setting)."""
    for kind, setting in more.items():
        known = into.get(kind, True)
        if setting is not True and known is not True and known != setting:
            return f"two computations read {kind} sums with different settings"
        if kind not in into or into[kind] is True:
            into[kind] = setting
    if "regression" in into and {"classes", "crossentropy", "histogram"} & set(into):
        return "one output is read both as a regression and as a classification"
    return None


def _class_indices(labels: np.ndarray, classes: int, name: str) -> np.ndarray:
    indices = labels.astype(np.int64)
    if (indices != labels).any() or (indices < -1).any() or (indices >= classes).any():
        row = int(np.argmax((indices != labels) | (indices < -1) | (indices >= classes)))
        raise EvaluationInputError(
            f"eval example {row} of a batch has label {name!r} = {labels[row]!r}, not a class "
            f"index of the model's {classes} classes (-1: a class the training split lacks)"
        )
    return indices


def target_sums(
    target_needs: dict, labels: np.ndarray, predictions: np.ndarray, name: str
) -> dict[str, np.ndarray]:
    """One batch's sums for one (model, output): labels one per example (float64), predictions
    as the model gave them."""
    rows = labels.shape[0]
    sums = {"rows": np.array([float(rows)])}
    if "regression" in target_needs:
        predicted = predictions.astype(np.float64).reshape(-1)
        if predicted.shape[0] != rows:
            raise EvaluationInputError(
                f"the prediction has {predicted.shape[0]} values for {rows} examples: the "
                "batched Evaluator reads one number per example for a regression metric"
            )
        error = predicted - labels
        sums["regression"] = np.array(
            [
                rows,
                np.abs(error).sum(),
                np.square(error).sum(),
                np.square(labels).sum(),
                np.abs(labels).sum(),
            ]
        )
    if not {"classes", "crossentropy", "histogram"} & set(target_needs):
        return sums
    scores = np.asarray(predictions, dtype=np.float32).reshape(rows, -1)
    if np.isnan(scores).any():
        row = int(np.argmax(np.isnan(scores).any(axis=1)))
        raise EvaluationInputError(f"eval example {row} of a batch has a NaN prediction")
    classes = scores.shape[1]
    if ("classes" in target_needs or "crossentropy" in target_needs) and classes < 2:
        raise EvaluationInputError(
            f"the prediction has {classes} value per example: class metrics read one "
            "probability per class"
        )
    indices = _class_indices(labels, max(classes, 2), name)
    if "classes" in target_needs:
        thresholds = target_needs["classes"]
        if thresholds is True:  # Keras metrics only: argmax at any score
            thresholds = ()
        answered = np.argmax(scores, axis=1)
        top = scores[np.arange(rows), answered].astype(np.float64)
        # The first threshold (in TFMA's order) at which the top score no longer counts: from
        # there on the example is NO_PREDICTED_CLASS_ID (TFMA keeps it so for later ones).
        fails = np.array([top <= t for t in thresholds] + [np.ones(rows, bool)])
        first = np.argmax(fails, axis=0)
        counts = np.zeros((len(thresholds) + 1, classes + 1, classes))
        np.add.at(counts, (first, indices + 1, answered), 1.0)
        sums["classes"] = counts
    if "crossentropy" in target_needs:
        if (indices < 0).any():
            row = int(np.argmax(indices < 0))
            raise EvaluationInputError(
                f"eval example {row} of a batch has label {name!r} = -1 (a class the training "
                "split lacks): the sparse categorical crossentropy has no value for it"
            )
        # tf-keras' sparse_categorical_crossentropy on probabilities, in float32 as TF does:
        # clip to [eps, 1 - eps], log, then the softmax cross entropy of those logits.
        logits = np.log(np.clip(scores, KERAS_EPSILON, np.float32(1) - KERAS_EPSILON))
        shifted = logits - logits.max(axis=1, keepdims=True)
        loss = (
            np.log(np.exp(shifted).sum(axis=1, dtype=np.float32))
            - shifted[np.arange(rows), indices]
        )
        sums["crossentropy"] = np.array([loss.astype(np.float64).sum()])
    if "histogram" in target_needs:
        buckets, left, width = target_needs["histogram"]
        if classes == 1:
            if ((labels < 0) | (labels > 1)).any():
                row = int(np.argmax((labels < 0) | (labels > 1)))
                raise EvaluationInputError(
                    f"eval example {row} of a batch has label {name!r} = {labels[row]!r}: "
                    "a one-column prediction's label must be within [0, 1]"
                )
            pair_labels = labels.reshape(rows, 1)
        else:
            # TFMA's one_hot: a label of -1 is all zeros.
            pair_labels = np.eye(classes + 1)[indices][:, :classes]
        pairs = scores.astype(np.float64).reshape(-1)
        # calibration_histogram._bucket_index, in the same float64 operations.
        index = (pairs - left) / width * buckets + 1
        index = np.where(index < 0, 0, np.where(index >= buckets + 1, buckets + 1, index))
        index = index.astype(np.int64)
        size = buckets + 2
        sums["histogram"] = np.stack(
            [
                np.bincount(index, weights=pair_labels.reshape(-1), minlength=size),
                np.bincount(index, weights=pairs, minlength=size),
                np.bincount(index, minlength=size).astype(np.float64),
            ]
        )
    return sums


def add_sums(into: dict, more: dict) -> dict:
    for kind, values in more.items():
        if kind in into and into[kind].shape != values.shape:
            raise EvaluationInputError(
                f"the model's prediction changed width between batches ({kind} sums of "
                f"shape {into[kind].shape} and {values.shape})"
            )
        into[kind] = into[kind] + values if kind in into else values
    return into


def combiner_output(computation, sums: dict[tuple[str, str], dict]) -> dict:
    """What TFMA's combiner of `computation` extracts, from the totals of its (model, output)."""
    from tensorflow_model_analysis.metrics import (
        calibration_histogram,
        example_count,
    )
    from tensorflow_model_analysis.metrics import (
        multi_class_confusion_matrix_metrics as mcm,
    )

    combiner = computation.combiner
    out: dict = {}
    for key in computation.keys:
        total = sums[key.model_name, key.output_name]
        if isinstance(combiner, example_count._ExampleCountCombiner):
            out[key] = float(total["rows"][0])
        elif isinstance(combiner, calibration_histogram._CalibrationHistogramCombiner):
            labels, predictions, pairs = total["histogram"]
            out[key] = [
                calibration_histogram.Bucket(
                    int(i), float(labels[i]), float(predictions[i]), float(pairs[i])
                )
                for i in np.flatnonzero(pairs)
            ]
        elif isinstance(combiner, mcm._MultiClassConfusionMatrixCombiner):
            counts = total["classes"]
            matrices = mcm.Matrices()
            for position, threshold in enumerate(combiner._thresholds):
                entries: dict = {}
                answered = counts[position + 1 :].sum(axis=0)
                unanswered = counts[: position + 1].sum(axis=(0, 2))
                for label, predicted in zip(*np.nonzero(answered), strict=True):
                    entry = mcm.MatrixEntryKey(int(label) - 1, int(predicted))
                    entries[entry] = float(answered[label, predicted])
                for label in np.flatnonzero(unanswered):
                    entry = mcm.MatrixEntryKey(int(label) - 1, mcm.NO_PREDICTED_CLASS_ID)
                    entries[entry] = float(unanswered[label])
                matrices[threshold] = entries
            out[key] = matrices
        elif type(combiner) in _tfma_regression_combiners():
            out[key] = float(_tfma_regression_combiners()[type(combiner)](total["regression"]))
        else:  # the Keras metrics
            out[key] = KERAS[key.name][1](total)
    return out
