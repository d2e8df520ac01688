"""An Evaluator's results (TFMA's MetricsForSlice and ValidationResult records) read without
importing tensorflow_model_analysis.

Importing TFMA imports TensorFlow and Apache Beam: 3.5 s on this project's machines, which is
most of what `report` would cost. The records themselves are protocol buffers in TFRecord files;
their message classes are built here from the descriptors TFMA's generated modules carry (the
serialized FileDescriptorProto each `*_pb2.py` hands to `AddSerializedFile`), read as data from
the installed package's files, into a private descriptor pool. Compatibility module: the one
place that knows TFMA's file layout and record format.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import struct
from collections.abc import Iterator
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "tensorflow_model_analysis"
# In dependency order: each file's imports come before it.
PROTO_MODULES = ("config_pb2", "metrics_for_slice_pb2", "validation_result_pb2")
METRICS_FILE_PREFIX = "metrics"
VALIDATIONS_FILE = "validations.tfrecord"


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
        for name in ("MetricsForSlice", "ValidationResult")
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


def metrics_for_slices(evaluation_uri: str) -> list:
    """Every MetricsForSlice record of an Evaluator output directory."""
    metrics_class = _classes()["MetricsForSlice"]
    records = []
    for name in sorted(os.listdir(evaluation_uri)):
        if name.startswith(METRICS_FILE_PREFIX) and name.endswith(".tfrecord"):
            for data in tfrecords(os.path.join(evaluation_uri, name)):
                records.append(metrics_class.FromString(data))
    return records


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


def overall_metrics_by_model(evaluation_uri: str) -> dict[str, dict[str, float]]:
    """{model name ("" with one model, else "candidate", "baseline"): {metric: value}} of the
    overall slice; a metric's change against the baseline is `<metric>_diff` of the candidate,
    as tfma.load_eval_result names it."""
    by_model: dict[str, dict[str, float]] = {}
    for record in metrics_for_slices(evaluation_uri):
        if record.slice_key.single_slice_keys:
            continue
        for entry in record.metric_keys_and_values:
            number = metric_value(entry.value)
            if number is None or entry.key.output_name or entry.key.HasField("sub_key"):
                continue
            name = entry.key.name + ("_diff" if entry.key.is_diff else "")
            by_model.setdefault(entry.key.model_name, {})[name] = number
    return by_model
