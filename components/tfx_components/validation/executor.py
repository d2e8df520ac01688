"""ExampleValidator executor that fails the run on any anomaly, listing each one.

TFX's ExampleValidator only records anomalies (and an unblessed flag) and lets Transform and
Trainer run on the bad data; here an anomaly in any split stops the run before Transform.
"""

from __future__ import annotations

from typing import Any

from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx.components.example_validator import component as tfx_component
from tfx.components.example_validator import executor as tfx_executor
from tfx.components.example_validator import labels
from tfx.dsl.components.base import executor_spec


class DataAnomaliesError(RuntimeError):
    """The data does not match the schema; the message lists every anomaly."""


def describe_anomalies(anomalies_by_split: dict[str, anomalies_pb2.Anomalies]) -> list[str]:
    """One line per anomaly: split, feature, kind(s), description."""
    lines = []
    for split, anomalies in sorted(anomalies_by_split.items()):
        for feature, info in sorted(anomalies.anomaly_info.items()):
            kinds = ", ".join(
                anomalies_pb2.AnomalyInfo.Type.Name(reason.type) for reason in info.reason
            )
            lines.append(
                f"split {split!r}: feature {feature!r}: {kinds}: "
                f"{info.description or info.short_description}"
            )
        if anomalies.HasField("dataset_anomaly_info"):
            info = anomalies.dataset_anomaly_info
            kinds = ", ".join(
                anomalies_pb2.AnomalyInfo.Type.Name(reason.type) for reason in info.reason
            )
            lines.append(f"split {split!r}: dataset: {kinds}: {info.description}")
    return lines


class Executor(tfx_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties: dict[str, Any]):  # noqa: N802
        self._anomalies_by_split: dict[str, anomalies_pb2.Anomalies] = {}
        output = super().Do(input_dict, output_dict, exec_properties)
        lines = describe_anomalies(self._anomalies_by_split)
        if lines:
            raise DataAnomaliesError(
                f"ExampleValidator found {len(lines)} anomaly(ies); the run stops before "
                "Transform:\n" + "\n".join(f"  {line}" for line in lines)
            )
        return output

    def _Validate(self, inputs, outputs):  # noqa: N802 (TFX API)
        anomalies = super()._Validate(inputs, outputs)
        split = outputs[labels.SCHEMA_DIFF_PATH].rstrip("/").rsplit("Split-", 1)[-1]
        self._anomalies_by_split[split] = anomalies
        return anomalies


class StrictExampleValidator(tfx_component.ExampleValidator):
    """TFX ExampleValidator (same spec and artifacts) that fails on anomalies."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
