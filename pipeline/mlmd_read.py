"""ML Metadata's read model: opens a store, returns its runs, artifacts, lineage as plain data."""

from __future__ import annotations

import dataclasses
import datetime
import glob
import json
import os
from typing import Any

from ml_metadata import errors as mlmd_errors
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

State = metadata_store_pb2.Execution.State
INPUT_EVENTS = (metadata_store_pb2.Event.INPUT, metadata_store_pb2.Event.DECLARED_INPUT)
OUTPUT_EVENTS = (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)


TFX_SCHEMA = "tfx"
KFP_SCHEMA = "kfp"
KFP_PIPELINE_CONTEXT = "system.Pipeline"
KFP_RUN_CONTEXT = "system.PipelineRun"
KFP_DAG_EXECUTION = "system.DAGExecution"
# TFX's own artifact types reach KFP as schema titles "tfx.<type name>".
KFP_TFX_TYPE_PREFIX = "tfx."
# Custom properties KFP writes per task attempt (its pod, cache bookkeeping, session info): they
# differ between any two runs, so `diff` leaves them out.
KFP_RUN_SPECIFIC_PROPERTIES = frozenset(
    {
        "pod_name",
        "pod_uid",
        "cache_fingerprint",
        "cached_execution_id",
        "parent_dag_id",
        "store_session_info",
        "driver_logs_uri",
    }
)
# Kubeflow's metadata-grpc-service can be slow on a large store, but should not hang forever.
GRPC_TIMEOUT_SEC = 60.0
GRPC_MAX_MESSAGE_BYTES = 100 * 1024 * 1024


class InspectError(RuntimeError):
    """A one-line, user-facing error (bad store, unknown run or artifact)."""


# ---------------------------------------------------------------------------------------------
# Connection


def sqlite_config(path: str) -> metadata_store_pb2.ConnectionConfig:
    if not os.path.isfile(path):
        raise InspectError(f"no MLMD store at {path} (run the pipeline first, or pass --metadata)")
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return config


def mysql_config(host: str, port: int, database: str) -> metadata_store_pb2.ConnectionConfig:
    config = metadata_store_pb2.ConnectionConfig()
    config.mysql.host = host
    config.mysql.port = port
    config.mysql.database = database
    config.mysql.user = os.environ.get("MLMD_MYSQL_USER", "root")
    config.mysql.password = os.environ.get("MLMD_MYSQL_PASSWORD", "")
    return config


def grpc_config(host: str, port: int) -> metadata_store_pb2.MetadataStoreClientConfig:
    """An MLMD gRPC server, e.g. Kubeflow's metadata-grpc-service (port 8080)."""
    config = metadata_store_pb2.MetadataStoreClientConfig(host=host, port=port)
    config.client_timeout_sec = GRPC_TIMEOUT_SEC
    config.channel_arguments.max_receive_message_length = GRPC_MAX_MESSAGE_BYTES
    return config


def find_sqlite(output_root: str, pipeline_name: str | None) -> str:
    if pipeline_name:
        return os.path.join(output_root, pipeline_name, "metadata.sqlite")
    stores = sorted(glob.glob(os.path.join(output_root, "*", "metadata.sqlite")))
    if not stores:
        raise InspectError(
            f"no MLMD store under {output_root} (run pipeline/run_local.py, or pass --metadata)"
        )
    if len(stores) > 1:
        names = ", ".join(os.path.basename(os.path.dirname(s)) for s in stores)
        raise InspectError(
            f"several pipelines under {output_root} ({names}); pick one with --pipeline"
        )
    return stores[0]


def open_store(source) -> metadata_store.MetadataStore:
    """source: a SQLite file path (opened read-only), an ml-metadata ConnectionConfig or a
    MetadataStoreClientConfig (gRPC)."""
    if isinstance(
        source,
        (metadata_store_pb2.ConnectionConfig, metadata_store_pb2.MetadataStoreClientConfig),
    ):
        return connect(source)
    return connect(sqlite_config(source))


def _where(config) -> str:
    if isinstance(config, metadata_store_pb2.MetadataStoreClientConfig):
        return f"grpc://{config.host}:{config.port}"
    return config.sqlite.filename_uri or (
        f"mysql://{config.mysql.host}:{config.mysql.port}/{config.mysql.database}"
    )


def connect(config) -> metadata_store.MetadataStore:
    """config: an ml-metadata ConnectionConfig (SQLite, MySQL) or MetadataStoreClientConfig."""
    try:
        store = metadata_store.MetadataStore(config)
        store.get_context_types()  # touches the schema: a corrupt file fails here
    except (mlmd_errors.StatusError, RuntimeError) as error:
        where = _where(config)
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        raise InspectError(f"cannot open the MLMD store at {where}: {first_line}") from error
    return store


# ---------------------------------------------------------------------------------------------
# Reading


def _time(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="seconds")


def property_value(value: metadata_store_pb2.Value):
    """The Python value of an MLMD property (struct -> dict, proto -> text)."""
    kind = value.WhichOneof("value")
    if kind == "struct_value":
        from google.protobuf import json_format

        return json_format.MessageToDict(value.struct_value)
    if kind == "proto_value":
        return str(value.proto_value)
    return getattr(value, kind) if kind else None


def custom_value(node, key: str):
    """One custom property of an artifact or execution, None when it is not set."""
    if key not in node.custom_properties:
        return None
    return property_value(node.custom_properties[key])


def _properties(node) -> dict:
    values = {k: property_value(v) for k, v in node.properties.items()}
    values.update(
        {k: property_value(v) for k, v in node.custom_properties.items() if not k.startswith("__")}
    )
    return values


def detect_schema(store: metadata_store.MetadataStore) -> str:
    """TFX_SCHEMA when the store holds runs of TFX's own orchestrators, else KFP_SCHEMA when it
    holds Kubeflow Pipelines v2 runs; TFX_SCHEMA for a store with neither."""
    context_types = {t.name for t in store.get_context_types()}
    if "pipeline_run" in context_types and store.get_contexts_by_type("pipeline_run"):
        return TFX_SCHEMA
    if KFP_RUN_CONTEXT in context_types and store.get_contexts_by_type(KFP_RUN_CONTEXT):
        return KFP_SCHEMA
    return TFX_SCHEMA


@dataclasses.dataclass
class Store:
    store: metadata_store.MetadataStore
    # TFX_SCHEMA, KFP_SCHEMA, or "auto": detected from the store's types.
    schema: str = "auto"
    # KFP_SCHEMA only: the runs of this pipeline (a Kubeflow store holds every pipeline's runs).
    pipeline: str | None = None

    def __post_init__(self):
        if self.schema == "auto":
            self.schema = detect_schema(self.store)
        if self.schema not in (TFX_SCHEMA, KFP_SCHEMA):
            raise InspectError(f"unknown schema {self.schema!r}; one of tfx, kfp, auto")
        self.nodes = {c.id: c.name for c in self.store.get_contexts_by_type("node")}
        self.artifact_types = {
            t.id: self._artifact_type_name(t.name) for t in self.store.get_artifact_types()
        }
        self.execution_types = {t.id: t.name for t in self.store.get_execution_types()}
        self.run_specific_properties = (
            KFP_RUN_SPECIFIC_PROPERTIES if self.schema == KFP_SCHEMA else frozenset()
        )

    def _artifact_type_name(self, name: str) -> str:
        if self.schema == KFP_SCHEMA and name.startswith(KFP_TFX_TYPE_PREFIX):
            return name[len(KFP_TFX_TYPE_PREFIX) :]
        return name

    def runs(self) -> list:
        if self.schema == TFX_SCHEMA:
            return sorted(self.store.get_contexts_by_type("pipeline_run"), key=lambda c: c.id)
        runs = self.store.get_contexts_by_type(KFP_RUN_CONTEXT)
        if self.pipeline:
            pipeline = self.store.get_context_by_type_and_name(KFP_PIPELINE_CONTEXT, self.pipeline)
            if pipeline is None:
                raise InspectError(f"no Kubeflow pipeline named {self.pipeline!r} in the store")
            children = {c.id for c in self.store.get_children_contexts_by_context(pipeline.id)}
            runs = [r for r in runs if r.id in children]
        return sorted(runs, key=lambda c: c.id)

    def run(self, key: str | None):
        runs = self.runs()
        if not runs:
            raise InspectError("the store has no pipeline runs")
        if key is None:
            return runs[-1]
        for index, run in enumerate(runs, start=1):
            if key in (run.name, str(index)):
                return run
        raise InspectError(f"unknown run {key!r}; `runs` lists {len(runs)} run(s)")

    def node_of(self, execution) -> str:
        if self.schema == KFP_SCHEMA:
            return (
                custom_value(execution, "task_name")
                or custom_value(execution, "display_name")
                or self.execution_types.get(execution.type_id, "?")
            )
        for context in self.store.get_contexts_by_execution(execution.id):
            if context.id in self.nodes:
                return self.nodes[context.id].rsplit(".", 1)[-1]
        return self.execution_types.get(execution.type_id, "?")

    def events(self, execution_id: int) -> tuple[list[int], list[int]]:
        events = self.store.get_events_by_execution_ids([execution_id])
        inputs = sorted({e.artifact_id for e in events if e.type in INPUT_EVENTS})
        outputs = sorted({e.artifact_id for e in events if e.type in OUTPUT_EVENTS})
        return inputs, outputs

    def executions(self, run) -> list:
        """A run's component executions, oldest first. On Kubeflow, without the DAG executions:
        its driver never marks the root DAG's execution complete."""
        executions = self.store.get_executions_by_context(run.id)
        if self.schema == KFP_SCHEMA:
            executions = [
                e for e in executions if self.execution_types.get(e.type_id) != KFP_DAG_EXECUTION
            ]
        return sorted(executions, key=lambda e: e.id)

    def execution_properties(self, execution) -> dict:
        """An execution's parameters and properties. KFP records a task's input parameters (the
        TFX component's exec properties: input_base, train_args, ...) as one struct, `inputs`;
        they are listed as properties of their own, as TFX's orchestrators record them."""
        values = _properties(execution)
        if self.schema == KFP_SCHEMA and isinstance(values.get("inputs"), dict):
            parameters = values.pop("inputs")
            values.update(parameters)
        return values

    def node_states_by_run(self) -> dict[str, dict[str, str]]:
        """{pipeline run id: {node id: execution state (COMPLETE, CACHED, FAILED, ...)}}, oldest
        run first."""
        return {
            run.name: {
                self.node_of(e): State.Name(e.last_known_state) for e in self.executions(run)
            }
            for run in self.runs()
        }

    def outputs_by_type(self, execution_id: int) -> dict[str, list]:
        """Artifacts an execution produced (or, cached, reused), by artifact type name."""
        _, ids = self.events(execution_id)
        by_type: dict[str, list] = {}
        for artifact in self.store.get_artifacts_by_id(ids) if ids else []:
            by_type.setdefault(self.artifact_types.get(artifact.type_id, "?"), []).append(artifact)
        return by_type

    def artifact(self, artifact_id: int):
        found = self.store.get_artifacts_by_id([artifact_id])
        if not found:
            raise InspectError(f"unknown artifact id {artifact_id}")
        return found[0]

    def producer(self, artifact_id: int) -> int | None:
        for event in self.store.get_events_by_artifact_ids([artifact_id]):
            if event.type in OUTPUT_EVENTS:
                return event.execution_id
        return None

    def consumers(self, artifact_id: int) -> list[int]:
        return sorted(
            {
                e.execution_id
                for e in self.store.get_events_by_artifact_ids([artifact_id])
                if e.type in INPUT_EVENTS
            }
        )


def latest_property(db: Store, key: str) -> dict[str, Any]:
    """{node: `key`'s value in the newest finished (complete or cached) execution of that node
    that records it}, over every run in the store."""
    finished = {metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED}
    latest: dict[str, Any] = {}
    for execution in sorted(db.store.get_executions(), key=lambda e: e.id):
        if execution.last_known_state not in finished:
            continue
        value = db.execution_properties(execution).get(key)
        if value is not None:
            latest[db.node_of(execution)] = value
    return latest


def _disk_size(uri: str) -> int | None:
    if not os.path.exists(uri):
        return None
    if os.path.isfile(uri):
        return os.path.getsize(uri)
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(uri)
        for name in names
    )


def describe_runs(db: Store) -> list[dict]:
    rows = []
    for index, run in enumerate(db.runs(), start=1):
        executions = db.executions(run)
        states = [State.Name(e.last_known_state) for e in executions]
        if "FAILED" in states:
            status = "FAILED"
        elif any(s in ("RUNNING", "NEW", "UNKNOWN") for s in states):
            status = "RUNNING"
        else:
            status = "COMPLETE"
        rows.append(
            {
                "row": index,
                "run": run.name,
                "start": _time(min(e.create_time_since_epoch for e in executions))
                if executions
                else "",
                "end": _time(max(e.last_update_time_since_epoch for e in executions))
                if executions
                else "",
                "status": status,
                "executed": states.count("COMPLETE"),
                "cached": states.count("CACHED"),
                "failed": states.count("FAILED"),
            }
        )
    return rows


def describe_executions(db: Store, run) -> list[dict]:
    rows = []
    for execution in db.executions(run):
        inputs, outputs = db.events(execution.id)
        rows.append(
            {
                "execution": execution.id,
                "component": db.node_of(execution),
                "state": State.Name(execution.last_known_state),
                "seconds": round(
                    (execution.last_update_time_since_epoch - execution.create_time_since_epoch)
                    / 1000,
                    1,
                ),
                "inputs": inputs,
                "outputs": outputs,
                "properties": db.execution_properties(execution),
            }
        )
    return sorted(rows, key=lambda r: r["execution"])


def describe_artifact(db: Store, artifact) -> dict:
    producer = db.producer(artifact.id)
    component = None
    if producer is not None:
        component = db.node_of(db.store.get_executions_by_id([producer])[0])
    return {
        "artifact": artifact.id,
        "type": db.artifact_types.get(artifact.type_id, "?"),
        "uri": artifact.uri,
        "size_bytes": _disk_size(artifact.uri),
        "produced_by": {"execution": producer, "component": component},
        "properties": _properties(artifact),
    }


def describe_artifacts(db: Store, run, type_name: str | None) -> list[dict]:
    ids = set()
    for execution in db.executions(run):
        ids.update(db.events(execution.id)[1])
    artifacts = db.store.get_artifacts_by_id(sorted(ids)) if ids else []
    rows = [describe_artifact(db, a) for a in artifacts]
    if type_name:
        known = set(db.artifact_types.values())
        if type_name not in known:
            raise InspectError(f"unknown artifact type {type_name!r}; known: {sorted(known)}")
        rows = [r for r in rows if r["type"] == type_name]
    return sorted(rows, key=lambda r: r["artifact"])


def lineage(db: Store, artifact_id: int) -> dict:
    """{'artifact', 'upstream': tree to the raw data, 'downstream': tree to pushed models}."""
    root = db.artifact(artifact_id)

    def label(artifact) -> dict:
        return {
            "artifact": artifact.id,
            "type": db.artifact_types.get(artifact.type_id, "?"),
            "uri": artifact.uri,
        }

    def upstream(artifact, seen) -> dict:
        node = label(artifact)
        producer = db.producer(artifact.id)
        if producer is None or producer in seen:
            return node
        execution = db.store.get_executions_by_id([producer])[0]
        inputs, _ = db.events(producer)
        node["produced_by"] = {
            "execution": producer,
            "component": db.node_of(execution),
            "inputs": [upstream(db.artifact(i), seen | {producer}) for i in inputs],
        }
        source = db.execution_properties(execution).get("input_base")
        if source:  # ExampleGen: the raw data directory
            node["produced_by"]["source"] = source
        return node

    def downstream(artifact, seen) -> dict:
        node = label(artifact)
        node["consumed_by"] = []
        for consumer in db.consumers(artifact.id):
            if consumer in seen:
                continue
            execution = db.store.get_executions_by_id([consumer])[0]
            _, outputs = db.events(consumer)
            node["consumed_by"].append(
                {
                    "execution": consumer,
                    "component": db.node_of(execution),
                    "outputs": [downstream(db.artifact(o), seen | {consumer}) for o in outputs],
                }
            )
        return node

    return {"upstream": upstream(root, frozenset()), "downstream": downstream(root, frozenset())}


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


def run_metrics(db: Store, executions_by_component: dict) -> dict[str, float]:
    """Overall eval metrics of the model evaluation a run produced (or reused from the cache)."""
    evaluator = executions_by_component.get("Evaluator")
    if evaluator is None:
        return {}
    for artifact_id in evaluator["outputs"]:
        artifact = db.artifact(artifact_id)
        if db.artifact_types.get(artifact.type_id) == "ModelEvaluation":
            return {k: round(v, 6) for k, v in overall_metrics(artifact.uri).items()}
    return {}


def diff_runs(db: Store, run_a, run_b) -> list[dict]:
    """What differs between two runs: eval metrics, and per component the state, execution
    properties (parameters, user code module paths, custom config) and input/output artifacts."""

    def by_component(run):
        result = {}
        for row in describe_executions(db, run):
            row["input_uris"] = sorted(db.artifact(i).uri for i in row["inputs"])
            row["output_uris"] = sorted(db.artifact(o).uri for o in row["outputs"])
            result[row["component"]] = row
        return result

    a, b = by_component(run_a), by_component(run_b)
    changes = []
    metrics_a, metrics_b = run_metrics(db, a), run_metrics(db, b)
    for name in sorted(set(metrics_a) | set(metrics_b)):
        if metrics_a.get(name) != metrics_b.get(name):
            changes.append(
                {
                    "component": "Evaluator",
                    "change": f"metric {name}",
                    "a": metrics_a.get(name),
                    "b": metrics_b.get(name),
                }
            )
    for component in sorted(set(a) | set(b)):
        left, right = a.get(component), b.get(component)
        if left is None or right is None:
            changes.append(
                {
                    "component": component,
                    "change": "only in one run",
                    "a": left and left["state"],
                    "b": right and right["state"],
                }
            )
            continue
        for field in ("state", "input_uris", "output_uris"):
            if left[field] != right[field]:
                changes.append(
                    {"component": component, "change": field, "a": left[field], "b": right[field]}
                )
        keys = (set(left["properties"]) | set(right["properties"])) - db.run_specific_properties
        for key in sorted(keys):
            if left["properties"].get(key) != right["properties"].get(key):
                changes.append(
                    {
                        "component": component,
                        "change": f"property {key}",
                        "a": left["properties"].get(key),
                        "b": right["properties"].get(key),
                    }
                )
    return changes


# ---------------------------------------------------------------------------------------------
# Formatting


def cell(value) -> str:
    """One value as a table cell: None -> "-", lists comma-joined, dicts as sorted JSON."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)
