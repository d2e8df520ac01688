"""What an Evaluator's output says: its overall metrics (the candidate's, a baseline's, the
change between them), the thresholds of its eval config, TFMA's validation verdict and failures.

TFMA's records (MetricsForSlice, ValidationResult) are read without importing
tensorflow_model_analysis, which imports TensorFlow and Apache Beam: most of what `report` would
cost. The records are protocol buffers in TFRecord files; their message classes are built here
from the descriptors TFMA's generated modules carry (the serialized FileDescriptorProto each
`*_pb2.py` hands to `AddSerializedFile`), read as data from the installed package's files, into a
private descriptor pool. The one place that knows TFMA's file layout and record format.
"""

from __future__ import annotations

import ast
import collections
import functools
import importlib.util
import json
import os
import struct
from collections.abc import Iterator
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "tensorflow_model_analysis"
# In dependency order: each file's imports come before it.
PROTO_MODULES = ("config_pb2", "metrics_for_slice_pb2", "validation_result_pb2")
METRICS_FILE_PREFIX = "metrics"
PLOTS_FILE_PREFIX = "plots"
VALIDATIONS_FILE = "validations.tfrecord"
# Metrics of an aggregated MetricsSpec (AUC micro-averaged over the classes) read as
# `<metric>_micro_average`.
MICRO_AVERAGE_SUFFIX = "_micro_average"


def _serialized_descriptor(module_path: str) -> bytes:
    with open(module_path) as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
        ):
            return ast.literal_eval(node.args[0])
    raise RuntimeError(f"{module_path} carries no serialized descriptor")


@functools.cache
def _classes() -> dict[str, Any]:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{PACKAGE} is not installed")
    proto_dir = os.path.join(list(spec.submodule_search_locations)[0], "proto")
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file_proto: descriptor_pb2.FileDescriptorProto) -> None:
        for dependency in file_proto.dependency:
            if dependency not in added and dependency.startswith("google/protobuf/"):
                # google/protobuf/wrappers.proto -> google.protobuf.wrappers_pb2
                module = importlib.import_module(
                    dependency[: -len(".proto")].replace("/", ".") + "_pb2"
                )
                known = descriptor_pb2.FileDescriptorProto()
                module.DESCRIPTOR.CopyToProto(known)
                add(known)
        pool.Add(file_proto)
        added.add(file_proto.name)

    for module in PROTO_MODULES:
        file_proto = descriptor_pb2.FileDescriptorProto.FromString(
            _serialized_descriptor(os.path.join(proto_dir, f"{module}.py"))
        )
        add(file_proto)
    factory = message_factory.MessageFactory(pool)
    return {
        name: factory.GetPrototype(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in ("MetricsForSlice", "PlotsForSlice", "ValidationResult")
    }


def tfrecords(path: str) -> Iterator[bytes]:
    """The records of an uncompressed TFRecord file (length, its CRC, data, the data's CRC).
    The CRCs are not checked: a truncated file fails on its length instead."""
    with open(path, "rb") as handle:
        while True:
            header = handle.read(12)
            if not header:
                return
            if len(header) < 12:
                raise ValueError(f"{path}: truncated record header")
            (length,) = struct.unpack("<Q", header[:8])
            data = handle.read(length)
            if len(data) < length or len(handle.read(4)) < 4:
                raise ValueError(f"{path}: truncated record")
            yield data


def _records_of(evaluation_uri: str, prefix: str, class_name: str) -> list:
    message_class = _classes()[class_name]
    records = []
    for name in sorted(os.listdir(evaluation_uri)):
        if name.startswith(prefix) and name.endswith(".tfrecord"):
            for data in tfrecords(os.path.join(evaluation_uri, name)):
                records.append(message_class.FromString(data))
    return records


def metrics_for_slices(evaluation_uri: str) -> list:
    """Every MetricsForSlice record of an Evaluator output directory."""
    return _records_of(evaluation_uri, METRICS_FILE_PREFIX, "MetricsForSlice")


def plots_for_slices(evaluation_uri: str) -> list:
    """Every PlotsForSlice record of an Evaluator output directory."""
    return _records_of(evaluation_uri, PLOTS_FILE_PREFIX, "PlotsForSlice")


def validation_result(evaluation_uri: str):
    """The ValidationResult of an Evaluator output directory, None when it has none."""
    path = os.path.join(evaluation_uri, VALIDATIONS_FILE)
    if not os.path.isfile(path):
        return None
    for data in tfrecords(path):
        return _classes()["ValidationResult"].FromString(data)
    return None


def metric_value(value) -> float | None:
    """A MetricValue's number: a double, or a bounded value's point estimate."""
    kind = value.WhichOneof("type")
    if kind == "double_value":
        return value.double_value.value
    if kind == "bounded_value":
        return value.bounded_value.value.value
    return None


def _overall_metrics(evaluation_uri: str) -> tuple[dict[str, dict[str, dict[str, float]]], set]:
    """({model name: {output name: {metric: value}}} of the overall slice, the models that have
    `<metric>_diff` changes against a baseline). Names as tfma.load_eval_result gives them; the
    metrics of a sub key (a class, top k) and aggregated ones are left out."""
    by_model: dict[str, dict[str, dict[str, float]]] = {}
    diffed = set()
    for record in metrics_for_slices(evaluation_uri):
        if record.slice_key.single_slice_keys or record.HasField("cross_slice_key"):
            continue
        for entry in record.metric_keys_and_values:
            key = entry.key
            number = metric_value(entry.value)
            micro = key.HasField("aggregation_type") and key.aggregation_type.micro_average
            if number is None or key.HasField("sub_key"):
                continue
            if key.HasField("aggregation_type") and not micro:
                continue
            if key.is_diff:
                diffed.add(key.model_name)
            name = (
                key.name
                + (MICRO_AVERAGE_SUFFIX if micro else "")
                + ("_diff" if key.is_diff else "")
            )
            by_model.setdefault(key.model_name, {}).setdefault(key.output_name, {})[name] = number
    return by_model, diffed


def _by_name(outputs: dict[str, dict[str, float]]) -> dict[str, float]:
    """One model's metrics of every output by name; a name two outputs share gets "<output>/"
    in front (a regression evaluated in the label's units and z-scored: example_count)."""
    counts = collections.Counter(name for values in outputs.values() for name in values)
    return {
        f"{output}/{name}" if output and counts[name] > 1 else name: value
        for output, values in outputs.items()
        for name, value in values.items()
    }


def overall_metrics_by_model(evaluation_uri: str) -> dict[str, dict[str, float]]:
    """{model name ("" with one model, else "candidate", "baseline"): {metric: value}} of the
    overall slice; a metric's change against the baseline is `<metric>_diff` of the candidate."""
    by_model, _ = _overall_metrics(evaluation_uri)
    return {model: _by_name(outputs) for model, outputs in by_model.items()}


def overall_metrics(evaluation_uri: str) -> dict[str, float]:
    """The evaluated model's metrics of the overall slice, by name, as tfma.load_eval_result
    picks them: the model with changes against a baseline (the candidate, its `<metric>_diff`
    included), else the only model, with the model-independent metrics (model name "") added;
    {} when neither rule names one model."""
    by_model, diffed = _overall_metrics(evaluation_uri)
    if len(diffed) == 1:
        [model] = diffed
    elif diffed:
        model = ""
    elif len(by_model) == 1:
        [model] = by_model
    else:
        return {}
    if model not in by_model:
        return {}
    outputs = {output: dict(values) for output, values in by_model[model].items()}
    if model:
        for output, values in by_model.get("", {}).items():
            outputs.setdefault(output, {}).update(values)
    return _by_name(outputs)


def _failures(validation) -> list[dict]:
    return [
        {
            "metric": failure.metric_key.name,
            "value": metric_value(failure.metric_value),
            "is_diff": failure.metric_key.is_diff,
            "threshold": " ".join(str(failure.metric_threshold).split()),
            "message": failure.message,
        }
        for per_slice in validation.metric_validations_per_slice
        for failure in per_slice.failures
    ]


def validation_failures(evaluation_uri: str) -> list[dict]:
    """Each threshold TFMA's validation found failed: metric, value, is_diff (a change
    threshold, against the baseline), threshold (one line), message. Empty without a
    validation result."""
    validation = validation_result(evaluation_uri)
    return _failures(validation) if validation is not None else []


def _snake_case(class_name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in class_name).lstrip("_")


def evaluation_detail(evaluation_uri: str) -> dict:
    """What an Evaluator output says beyond its metrics: the thresholds of its eval config, the
    candidate's and (when a baseline was resolved) the baseline's overall metrics, the change
    between them, and TFMA's validation verdict with each failed threshold."""
    with open(os.path.join(evaluation_uri, "eval_config.json")) as handle:
        config = json.load(handle).get("evalConfig", {})
    has_baseline = any(spec.get("isBaseline") for spec in config.get("modelSpecs", []))
    thresholds = []
    for spec in config.get("metricsSpecs", []):
        for metric in spec.get("metrics", []):
            threshold = metric.get("threshold")
            if threshold:
                thresholds.append(
                    {
                        "metric": metric.get("name") or _snake_case(metric["className"]),
                        "value": threshold.get("valueThreshold"),
                        "change": threshold.get("changeThreshold"),
                    }
                )
    by_model = overall_metrics_by_model(evaluation_uri)
    candidate = by_model.get("candidate" if has_baseline else "", {})
    baseline = by_model.get("baseline", {}) if has_baseline else {}
    rows = [
        {
            "metric": name,
            "candidate": value,
            "baseline": baseline.get(name),
            "change": candidate.get(f"{name}_diff"),
        }
        for name, value in sorted(candidate.items())
        if not name.endswith("_diff")
    ]
    validation = validation_result(evaluation_uri)
    return {
        "thresholds": thresholds,
        "has_baseline": has_baseline,
        "metrics": rows,
        "validation_ok": validation.validation_ok if validation is not None else None,
        "failures": _failures(validation) if validation is not None else [],
    }


def confusion_matrix(evaluation_uri: str, model_name: str | None = None) -> dict | None:
    """TFMA's multi-class confusion matrix of the overall slice (MultiClassConfusionMatrixPlot,
    at its first threshold: the predicted class is the argmax): {"classes": the class indices
    that occur, "counts": {(actual, predicted): weighted examples}}, or None without one.
    model_name: the candidate's where a baseline was evaluated too (default: the candidate, else
    the only model). A predicted class -1 means no class scored above the threshold."""
    found: dict[str, Any] = {}
    for record in plots_for_slices(evaluation_uri):
        if record.slice_key.single_slice_keys or record.HasField("cross_slice_key"):
            continue
        for entry in record.plot_keys_and_values:
            plot = entry.value
            if plot.HasField("multi_class_confusion_matrix_at_thresholds"):
                matrices = plot.multi_class_confusion_matrix_at_thresholds.matrices
                if matrices:
                    found[entry.key.model_name] = matrices[0]
    if not found:
        return None
    if model_name is None:
        model_name = "candidate" if "candidate" in found else next(iter(sorted(found)))
    matrix = found.get(model_name)
    if matrix is None:
        return None
    counts: dict[tuple[int, int], float] = {}
    for cell in matrix.entries:
        key = (cell.actual_class_id, cell.predicted_class_id)
        counts[key] = counts.get(key, 0.0) + cell.num_weighted_examples
    classes = sorted({a for a, _ in counts} | {p for _, p in counts if p >= 0})
    return {"classes": classes, "counts": counts}


def per_class(matrix: dict) -> list[dict]:
    """Each class's precision, recall and eval examples (support) from a confusion_matrix();
    None where a ratio has nothing to divide by (a class never predicted: no precision)."""
    counts = matrix["counts"]
    rows = []
    for cls in matrix["classes"]:
        actual = sum(n for (a, _), n in counts.items() if a == cls)
        predicted = sum(n for (_, p), n in counts.items() if p == cls)
        hits = counts.get((cls, cls), 0.0)
        rows.append(
            {
                "class": cls,
                "support": actual,
                "precision": hits / predicted if predicted else None,
                "recall": hits / actual if actual else None,
            }
        )
    return rows


def class_names(transform_graph_uri: str, vocabulary: str = "label_vocabulary") -> list[str]:
    """The label vocabulary a Transform run wrote (class index -> name), [] without one."""
    path = os.path.join(transform_graph_uri, "transform_fn", "assets", vocabulary)
    if not os.path.isfile(path):
        return []
    with open(path, "rb") as handle:
        return [line.rstrip(b"\n").decode("utf-8", "replace") for line in handle]


def classification_detail(evaluation_uri: str, names: list[str]) -> dict | None:
    """The confusion matrix and per-class precision and recall of an evaluation, with the class
    names (`names`: class index -> name; an index without a name shows as its number): {"classes":
    names in index order, "rows": [{"actual": name, "cells": [{"predicted": name, "count",
    "share": count / the actual class's examples}]}], "per_class": [{"class", "precision",
    "recall", "support"}]}. None without a confusion matrix (regression)."""
    matrix = confusion_matrix(evaluation_uri)
    if matrix is None:
        return None

    def name(index: int) -> str:
        if index < 0:
            return "(none)"
        return names[index] if index < len(names) else str(index)

    classes = matrix["classes"]
    counts = matrix["counts"]
    predicted = classes + ([-1] if any(p == -1 for _, p in counts) else [])
    rows = []
    for actual in classes:
        total = sum(n for (a, _), n in counts.items() if a == actual)
        rows.append(
            {
                "actual": name(actual),
                "cells": [
                    {
                        "predicted": name(p),
                        "count": counts.get((actual, p), 0.0),
                        "share": counts.get((actual, p), 0.0) / total if total else 0.0,
                    }
                    for p in predicted
                ],
            }
        )
    return {
        "classes": [name(p) for p in predicted],
        "rows": rows,
        "per_class": [{**row, "class": name(row["class"])} for row in per_class(matrix)],
    }
