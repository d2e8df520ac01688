"""What a finished local run produced, read back from ML Metadata: per-component executions,
eval metrics, blessing, pushed model, inferred schema."""

from __future__ import annotations

import dataclasses
import json
import os

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

OUTPUT_EVENTS = (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)


def open_store(source) -> metadata_store.MetadataStore:
    """source: a SQLite file path (opened read-only) or an ml-metadata ConnectionConfig."""
    if isinstance(source, metadata_store_pb2.ConnectionConfig):
        return metadata_store.MetadataStore(source)
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = source
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return metadata_store.MetadataStore(config)


def node_states_by_run(store) -> dict[str, dict[str, str]]:
    """{pipeline run id: {node id: execution state (COMPLETE, CACHED, FAILED, ...)}}, oldest
    run first."""
    nodes = {context.id: context.name for context in store.get_contexts_by_type("node")}
    runs = {}
    for run in sorted(store.get_contexts_by_type("pipeline_run"), key=lambda c: c.id):
        states = {}
        for execution in store.get_executions_by_context(run.id):
            for context in store.get_contexts_by_execution(execution.id):
                if context.id in nodes:
                    node_id = nodes[context.id].rsplit(".", 1)[-1]
                    states[node_id] = metadata_store_pb2.Execution.State.Name(
                        execution.last_known_state
                    )
        runs[run.name] = states
    return runs


def output_artifacts(store, execution_id: int) -> dict[str, list]:
    """Artifacts an execution produced (or, for a cached execution, reused), by type name."""
    events = store.get_events_by_execution_ids([execution_id])
    ids = [event.artifact_id for event in events if event.type in OUTPUT_EVENTS]
    artifacts = store.get_artifacts_by_id(ids) if ids else []
    types = {t.id: t.name for t in store.get_artifact_types_by_id({a.type_id for a in artifacts})}
    by_type: dict[str, list] = {}
    for artifact in artifacts:
        by_type.setdefault(types[artifact.type_id], []).append(artifact)
    return by_type


def custom_value(artifact, key: str):
    if key not in artifact.custom_properties:
        return None
    value = artifact.custom_properties[key]
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def overall_metrics(evaluation_uri: str) -> dict[str, float]:
    """Metrics of the overall slice from an Evaluator output directory."""
    import tensorflow_model_analysis as tfma

    result = tfma.load_eval_result(evaluation_uri)
    for slice_key, metrics in result.slicing_metrics:
        if slice_key == ():
            values = metrics.get("", {}).get("", {})
            out = {}
            for name, value in values.items():
                if "doubleValue" in value:
                    out[name] = float(value["doubleValue"])
                elif "boundedValue" in value:
                    out[name] = float(value["boundedValue"]["value"])
            return out
    return {}


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
    """source: see open_store; components: the progress records (component id, status,
    execution id) of this run; location: where the store is, for the user."""
    store = open_store(source)
    outputs = {
        c["component"]: output_artifacts(store, c["execution_id"])
        for c in components
        if c.get("execution_id") is not None
    }
    metrics, blessed, pushed_model, counts, rejected, schema_uri = {}, None, None, {}, None, None
    for evaluation in outputs.get("Evaluator", {}).get("ModelEvaluation", []):
        metrics = overall_metrics(evaluation.uri)
    for blessing in outputs.get("Evaluator", {}).get("ModelBlessing", []):
        blessed = custom_value(blessing, "blessed") == 1
    for pushed in outputs.get("Pusher", {}).get("PushedModel", []):
        if custom_value(pushed, "pushed") == 1:
            pushed_model = custom_value(pushed, "pushed_destination")
    for examples in outputs.get("CsvExampleGen", {}).get("Examples", []):
        counts = json.loads(custom_value(examples, "split_example_counts") or "{}")
        rejected = custom_value(examples, "num_rows_rejected")
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
