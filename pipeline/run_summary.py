"""What a finished local run produced, read back from ML Metadata (through mlmd_read, the
reader): per-component executions, eval metrics, blessing, pushed model, inferred schema."""

from __future__ import annotations

import dataclasses
import json
import os

from pipeline import mlmd_read


@dataclasses.dataclass
class RunSummary:
    components: list[dict]
    metrics: dict[str, float]
    blessed: bool | None
    pushed_model: str | None
    example_counts: dict[str, int]
    rows_rejected: int | None
    inferred_schema_uri: str | None
    metadata_path: str

    @property
    def all_cached(self) -> bool:
        return all(c["status"] in ("cached", "resolved") for c in self.components)


def summarize(source, components: list[dict], location: str) -> RunSummary:
    """source: see mlmd_read.open_store; components: the progress records (component id,
    status, execution id) of this run; location: where the store is, for the user."""
    db = mlmd_read.Store(mlmd_read.open_store(source))
    outputs = {
        c["component"]: db.outputs_by_type(c["execution_id"])
        for c in components
        if c.get("execution_id") is not None
    }
    metrics, blessed, pushed_model, counts, rejected, schema_uri = {}, None, None, {}, None, None
    for evaluation in outputs.get("Evaluator", {}).get("ModelEvaluation", []):
        metrics = mlmd_read.overall_metrics(evaluation.uri)
    for blessing in outputs.get("Evaluator", {}).get("ModelBlessing", []):
        blessed = mlmd_read.custom_value(blessing, "blessed") == 1
    for pushed in outputs.get("Pusher", {}).get("PushedModel", []):
        if mlmd_read.custom_value(pushed, "pushed") == 1:
            pushed_model = mlmd_read.custom_value(pushed, "pushed_destination")
    for examples in outputs.get("CsvExampleGen", {}).get("Examples", []):
        counts = json.loads(mlmd_read.custom_value(examples, "split_example_counts") or "{}")
        rejected = mlmd_read.custom_value(examples, "num_rows_rejected")
    for examples in outputs.get("ImageExampleGen", {}).get("Examples", []):
        counts = json.loads(mlmd_read.custom_value(examples, "split_example_counts") or "{}")
        rejected = mlmd_read.custom_value(examples, "num_files_rejected")
    for schema in outputs.get("SchemaGen", {}).get("Schema", []):
        schema_uri = os.path.join(schema.uri, "schema.pbtxt")
    return RunSummary(
        components=components,
        metrics=metrics,
        blessed=blessed,
        pushed_model=pushed_model,
        example_counts=counts,
        rows_rejected=rejected,
        inferred_schema_uri=schema_uri,
        metadata_path=location,
    )


def previous_fingerprints(config) -> dict[str, str]:
    """{component: the cache fingerprint of its newest finished execution} in the pipeline's
    store (pipeline.fingerprints); empty before the first run."""
    from pipeline import fingerprints

    if config.mysql is None and not os.path.exists(config.metadata_path):
        return {}
    db = mlmd_read.Store(mlmd_read.open_store(config.metadata_connection_config()))
    return mlmd_read.latest_property(db, fingerprints.FINGERPRINT_KEY)
