"""What a finished local run produced, read back from ML Metadata (through pipeline.mlmd's read
model): per-component executions, eval metrics, blessing, pushed model, inferred schema."""

from __future__ import annotations

import dataclasses
import json
import os

from pipeline.mlmd import connection, evaluation, records, tuning

# The Trainer's Model artifact property holding the class weights training used (JSON: class
# name -> weight; components.tfx_components.trainer.executor sets it, under this name).
CLASS_WEIGHTS_PROPERTY = "class_weights"
# The SchemaGen Schema artifact property listing the features it restored (comma-separated;
# components.tfx_components.schema_gen.executor.RESTORED_PROPERTY, under this name).
RESTORED_PROPERTY = "restored_features"
# The BulkInferrer's InferenceResult properties (components.tfx_components.bulk_inferrer.executor
# sets them, under these names).
INFERENCE_PROPERTIES = (
    "blessed",
    "predictions_csv_uri",
    "num_rows_predicted",
    "num_rows_read",
    "num_rows_rejected",
    "rejected_rows_uri",
)


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
    # The Evaluator's failed threshold checks: metric, value, is_diff (a change threshold:
    # against the baseline model), TFMA's message. Empty when blessed or unknown.
    blessing_failures: list[dict] = dataclasses.field(default_factory=list)
    # Where the rejected rows (or files) are listed: JSON lines of file, line, reason.
    rejected_listing: str | None = None
    # Classification: TFMA's confusion matrix of the eval split (pipeline.mlmd.evaluation
    # .confusion_matrix) and the class names by index (Transform's label vocabulary).
    confusion: dict | None = None
    class_names: list[str] = dataclasses.field(default_factory=list)
    # The per-class weights training used (--class_weight), as the Trainer recorded them.
    class_weights: dict[str, float] = dataclasses.field(default_factory=dict)
    # Inferred schema: the columns with values in some split(s) only, which TFDV deprecates and
    # SchemaGen kept as optional features (components.tfx_components.schema_gen).
    restored_features: list[str] = dataclasses.field(default_factory=list)
    # --infer_data: the BulkInferrer's InferenceResult properties (blessed, predictions_csv_uri,
    # num_rows_predicted, num_rows_read, num_rows_rejected, rejected_rows_uri); None without.
    inference: dict | None = None
    # --tune: the Tuner's best point and its trials (pipeline.mlmd.tuning.describe).
    tuning: dict = dataclasses.field(default_factory=dict)

    @property
    def all_cached(self) -> bool:
        return all(c["status"] in ("cached", "resolved") for c in self.components)


def summarize(source, components: list[dict], location: str) -> RunSummary:
    """source: see pipeline.mlmd.connection.open_store; components: the progress records
    (component id, status, execution id) of this run; location: where the store is, for the
    user."""
    db = records.Store(connection.open_store(source))
    outputs = {
        c["component"]: db.outputs_by_type(c["execution_id"])
        for c in components
        if c.get("execution_id") is not None
    }
    metrics, blessed, pushed_model, counts, rejected, schema_uri = {}, None, None, {}, None, None
    failures: list[dict] = []
    listing, confusion, names, weights = None, None, [], {}
    restored: list[str] = []
    inference = None
    for result in outputs.get("BulkInferrer", {}).get("InferenceResult", []):
        inference = {name: records.custom_value(result, name) for name in INFERENCE_PROPERTIES}
    tuned: dict = {}
    for best in outputs.get("Tuner", {}).get("HyperParameters", []):
        tuned = tuning.describe(best)
    for evaluated in outputs.get("Evaluator", {}).get("ModelEvaluation", []):
        metrics = evaluation.overall_metrics(evaluated.uri)
        failures = evaluation.validation_failures(evaluated.uri)
        confusion = evaluation.confusion_matrix(evaluated.uri)
    for graph in outputs.get("Transform", {}).get("TransformGraph", []):
        names = evaluation.class_names(graph.uri)
    for model in outputs.get("Trainer", {}).get("Model", []):
        weights = json.loads(records.custom_value(model, CLASS_WEIGHTS_PROPERTY) or "{}")
    for blessing in outputs.get("Evaluator", {}).get("ModelBlessing", []):
        blessed = records.custom_value(blessing, "blessed") == 1
    for pushed in outputs.get("Pusher", {}).get("PushedModel", []):
        if records.custom_value(pushed, "pushed") == 1:
            pushed_model = records.custom_value(pushed, "pushed_destination")
    for examples in outputs.get("CsvExampleGen", {}).get("Examples", []):
        counts = json.loads(records.custom_value(examples, "split_example_counts") or "{}")
        rejected = records.custom_value(examples, "num_rows_rejected")
        listing = records.custom_value(examples, "rejected_rows_uri")
    for examples in outputs.get("ImageExampleGen", {}).get("Examples", []):
        counts = json.loads(records.custom_value(examples, "split_example_counts") or "{}")
        rejected = records.custom_value(examples, "num_files_rejected")
        listing = records.custom_value(examples, "rejected_files_uri")
    for schema in outputs.get("SchemaGen", {}).get("Schema", []):
        schema_uri = os.path.join(schema.uri, "schema.pbtxt")
        restored = [
            name
            for name in (records.custom_value(schema, RESTORED_PROPERTY) or "").split(",")
            if name
        ]
    return RunSummary(
        components=components,
        metrics=metrics,
        blessed=blessed,
        pushed_model=pushed_model,
        example_counts=counts,
        rows_rejected=rejected,
        inferred_schema_uri=schema_uri,
        metadata_path=location,
        blessing_failures=failures,
        rejected_listing=listing,
        confusion=confusion,
        class_names=names,
        class_weights=weights,
        restored_features=restored,
        inference=inference,
        tuning=tuned,
    )


def previous_fingerprints(config) -> dict[str, str]:
    """{component: the cache fingerprint of its newest finished execution of this pipeline}
    (pipeline.fingerprints); empty before the first run. A store may hold other pipelines
    (MySQL): only this one's nodes are read."""
    from pipeline import fingerprints

    if config.mysql is None and not os.path.exists(config.metadata_path):
        return {}
    db = records.Store(connection.open_store(config.metadata_connection_config()))
    return records.latest_property(db, fingerprints.FINGERPRINT_KEY, config.pipeline_name)
