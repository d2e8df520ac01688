"""What changed in the data between two pipeline runs: schema differences and statistics drift.

The drift of each feature is measured by TensorFlow Data Validation's own comparators, run on the
two runs' ExampleStatistics split by split (run A's statistics as the previous span): the
L-infinity distance of the value distributions for categorical features (strings, and integers
the schema marks categorical), the Jensen-Shannon divergence of the histograms for numeric ones.
Every feature is measured, not only those over the threshold; `drifted` says which are.
Metric and component changes come from pipeline.mlmd.run_diff; `diff` in pipeline.mlmd shows all
three.
"""

from __future__ import annotations

import os

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2

from pipeline.mlmd import run_diff
from pipeline.mlmd.records import Store

# Above this distance a feature counts as drifted (TFDV's comparators need a threshold; every
# feature's value is reported whatever it is).
DRIFT_THRESHOLD = 0.1
L_INFINITY = "L-infinity"
JENSEN_SHANNON = "Jensen-Shannon"
_MEASURE_NAMES = {
    anomalies_pb2.DriftSkewInfo.Measurement.L_INFTY: L_INFINITY,
    anomalies_pb2.DriftSkewInfo.Measurement.JENSEN_SHANNON_DIVERGENCE: JENSEN_SHANNON,
}
# Schema fields compared per feature: a change in any is one schema difference.
_FEATURE_FIELDS = (
    "type",
    "domain",
    "int_domain",
    "float_domain",
    "string_domain",
    "bool_domain",
    "presence",
    "value_count",
    "shape",
    "distribution_constraints",
    "lifecycle_stage",
)


def read_schema(uri: str) -> schema_pb2.Schema | None:
    path = os.path.join(uri, "schema.pbtxt")
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        return text_format.Parse(handle.read(), schema_pb2.Schema())


def read_statistics(uri: str) -> dict[str, statistics_pb2.DatasetFeatureStatisticsList]:
    """{split name: statistics} of an ExampleStatistics artifact (Split-<name>/FeatureStats.pb)."""
    splits = {}
    for entry in sorted(os.listdir(uri)) if os.path.isdir(uri) else []:
        path = os.path.join(uri, entry, "FeatureStats.pb")
        if entry.startswith("Split-") and os.path.isfile(path):
            stats = statistics_pb2.DatasetFeatureStatisticsList()
            with open(path, "rb") as handle:
                stats.ParseFromString(handle.read())
            splits[entry[len("Split-") :]] = stats
    return splits


def _field_text(feature: schema_pb2.Feature, field: str) -> str | None:
    if field == "type":
        return schema_pb2.FeatureType.Name(feature.type)
    if field == "domain":
        return feature.domain or None
    if not feature.HasField(field):
        return None
    value = getattr(feature, field)
    if hasattr(value, "ListFields"):
        return text_format.MessageToString(value, as_one_line=True) or "{}"
    return str(value)


def schema_changes(a: schema_pb2.Schema | None, b: schema_pb2.Schema | None) -> list[dict]:
    """Per feature: added, removed, or each schema field that differs; shared string domains
    that differ. Rows {feature, change, a, b}."""
    if a is None or b is None:
        return []
    changes = []
    features_a = {f.name: f for f in a.feature}
    features_b = {f.name: f for f in b.feature}
    for name in sorted(set(features_a) | set(features_b)):
        left, right = features_a.get(name), features_b.get(name)
        if left is None or right is None:
            present = right if left is None else left
            changes.append(
                {
                    "feature": name,
                    "change": "added" if left is None else "removed",
                    "a": None if left is None else _field_text(present, "type"),
                    "b": None if right is None else _field_text(present, "type"),
                }
            )
            continue
        for field in _FEATURE_FIELDS:
            value_a, value_b = _field_text(left, field), _field_text(right, field)
            if value_a != value_b:
                changes.append({"feature": name, "change": field, "a": value_a, "b": value_b})
    domains_a = {d.name: sorted(d.value) for d in a.string_domain}
    domains_b = {d.name: sorted(d.value) for d in b.string_domain}
    for name in sorted(set(domains_a) | set(domains_b)):
        left_values, right_values = domains_a.get(name), domains_b.get(name)
        if left_values != right_values:
            changes.append(
                {
                    "feature": f"string_domain {name}",
                    "change": "values",
                    "a": None
                    if left_values is None
                    else ",".join(v for v in left_values if v not in (right_values or [])),
                    "b": None
                    if right_values is None
                    else ",".join(v for v in right_values if v not in (left_values or [])),
                }
            )
    return changes


def _is_categorical(feature: schema_pb2.Feature) -> bool:
    if feature.type == schema_pb2.BYTES:
        return True
    return feature.type == schema_pb2.INT and feature.int_domain.is_categorical


def _summary(stats: statistics_pb2.DatasetFeatureStatisticsList, name: str) -> str | None:
    for dataset in stats.datasets:
        for feature in dataset.features:
            if (".".join(feature.path.step) or feature.name) != name:
                continue
            if feature.HasField("num_stats"):
                return f"mean {feature.num_stats.mean:.4g}"
            if feature.HasField("string_stats"):
                top = feature.string_stats.top_values[:1]
                return f"{feature.string_stats.unique} values" + (
                    f", top {top[0].value}" if top else ""
                )
    return None


def drift(
    stats_a: statistics_pb2.DatasetFeatureStatisticsList,
    stats_b: statistics_pb2.DatasetFeatureStatisticsList,
    schema: schema_pb2.Schema,
    threshold: float = DRIFT_THRESHOLD,
) -> list[dict]:
    """TFDV's drift comparators between two statistics of one split: rows {feature, measure,
    value, threshold, drifted, a, b} (a, b: a one-line summary of each side)."""
    import tensorflow_data_validation as tfdv

    compared = schema_pb2.Schema()
    compared.CopyFrom(schema)
    for feature in compared.feature:
        comparator = feature.drift_comparator
        if _is_categorical(feature):
            comparator.infinity_norm.threshold = threshold
        else:
            comparator.jensen_shannon_divergence.threshold = threshold
    anomalies = tfdv.validate_statistics(
        statistics=stats_b, schema=compared, previous_statistics=stats_a
    )
    rows = []
    for info in anomalies.drift_skew_info:
        name = ".".join(info.path.step)
        for measurement in info.drift_measurements:
            rows.append(
                {
                    "feature": name,
                    "measure": _MEASURE_NAMES.get(measurement.type, str(measurement.type)),
                    "value": round(measurement.value, 6),
                    "threshold": measurement.threshold,
                    "drifted": measurement.value > measurement.threshold,
                    "a": _summary(stats_a, name),
                    "b": _summary(stats_b, name),
                }
            )
    return sorted(rows, key=lambda r: r["feature"])


def _artifact_of_type(db: Store, run, type_name: str):
    """The run's artifact of a type (produced or reused), with the component that output it."""
    for execution in db.executions(run):
        for artifact in db.outputs_by_type(execution.id).get(type_name, []):
            return db.node_of(execution), artifact
    return None, None


def data_diff(db: Store, run_a, run_b, threshold: float = DRIFT_THRESHOLD) -> list[dict]:
    """Schema differences and per-split statistics drift between two runs, as change rows
    (component, change, a, b, kind, and for drift: measure, value, threshold, drifted).
    Runs whose artifacts live off this machine (gs://, s3://) contribute nothing."""
    changes: list[dict] = []
    schema_component, schema_a = _artifact_of_type(db, run_a, "Schema")
    _, schema_b = _artifact_of_type(db, run_b, "Schema")
    parsed_a = read_schema(schema_a.uri) if schema_a is not None else None
    parsed_b = read_schema(schema_b.uri) if schema_b is not None else None
    if schema_a is not None and schema_b is not None and schema_a.id != schema_b.id:
        for row in schema_changes(parsed_a, parsed_b):
            changes.append(
                {
                    "component": schema_component,
                    "change": f"schema {row['feature']}: {row['change']}",
                    "a": row["a"],
                    "b": row["b"],
                    "kind": "schema",
                }
            )
    stats_component, stats_a = _artifact_of_type(db, run_a, "ExampleStatistics")
    _, stats_b = _artifact_of_type(db, run_b, "ExampleStatistics")
    schema = parsed_b or parsed_a
    if stats_a is None or stats_b is None or schema is None or stats_a.id == stats_b.id:
        return changes
    splits_a, splits_b = read_statistics(stats_a.uri), read_statistics(stats_b.uri)
    for split in sorted(set(splits_a) & set(splits_b)):
        for row in drift(splits_a[split], splits_b[split], schema, threshold):
            changes.append(
                {
                    "component": stats_component,
                    "change": f"drift {split} {row['feature']}",
                    "a": row["a"],
                    "b": row["b"],
                    "kind": "drift",
                    "split": split,
                    "feature": row["feature"],
                    "measure": row["measure"],
                    "value": row["value"],
                    "threshold": row["threshold"],
                    "drifted": row["drifted"],
                }
            )
    return changes


def diff(db: Store, run_a, run_b, threshold: float = DRIFT_THRESHOLD) -> list[dict]:
    """Everything `diff` reports: metric and component changes (run_diff.diff_runs), then
    schema differences and statistics drift."""
    return run_diff.diff_runs(db, run_a, run_b) + data_diff(db, run_a, run_b, threshold)
