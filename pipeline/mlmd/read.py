"""ML Metadata's read model: opens a store, returns its runs, artifacts, lineage as plain data."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import glob
import json
import os
import socket
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

from ml_metadata import errors as mlmd_errors
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline.mlmd import tfma_results

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
# Above this many executions to label, their contexts are read per context, not per execution.
BULK_CONTEXT_READ = 200
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
    check_sqlite_store(path)
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return config


# Tables every ML Metadata schema version has (ml-metadata's SQLite schema).
MLMD_TABLES = frozenset({"Type", "Artifact", "Execution", "Context", "Event", "MLMDEnv"})
SQLITE_MAGIC = b"SQLite format 3\x00"


def check_sqlite_store(path: str) -> None:
    """Fails with a clear line when `path` is not an ML Metadata SQLite store: opened read-only,
    ml-metadata would otherwise try to create its schema in it ("attempt to write a readonly
    database")."""
    with open(path, "rb") as handle:
        header = handle.read(len(SQLITE_MAGIC))
    if not header:
        raise InspectError(f"{path} is not an MLMD store: the file is empty")
    if header != SQLITE_MAGIC:
        raise InspectError(f"{path} is not an MLMD store: not a SQLite database")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as error:
        raise InspectError(f"{path} is not an MLMD store: {error}") from error
    if not MLMD_TABLES.issubset(tables):
        raise InspectError(
            f"{path} is not an MLMD store: a SQLite database without ML Metadata's tables"
        )


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


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """ml-metadata's C++ MySQL source logs to file descriptor 2 before Python sees the error
    (glog's "Logging before InitGoogleLogging" lines); the error is reported as one line."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data


def mysql_server_message(host: str, port: int, timeout: float = 5.0) -> str:
    """Why a MySQL server cannot be used, in the words of the operating system or the server:
    ml-metadata's own error has empty errno and message fields. Reads the server's first packet
    (MySQL client/server protocol: a handshake, or an error packet)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            length = int.from_bytes(_recv_exactly(conn, 4)[:3], "little")
            payload = _recv_exactly(conn, min(length, 4096))
    except OSError as error:
        return f"cannot reach the MySQL server at {host}:{port}: {error.strerror or error}"
    if payload[:1] == b"\xff":  # ERR packet: 0xff, a 2-byte error code, the message
        code = int.from_bytes(payload[1:3], "little")
        message = payload[3:].decode("utf-8", errors="replace")
        return f"the MySQL server at {host}:{port} refused the connection: {message} ({code})"
    if payload[:1] == b"\x0a":  # protocol 10 handshake: the server's version, NUL-terminated
        version = payload[1 : payload.find(b"\x00", 1)].decode("utf-8", errors="replace")
        return (
            f"the MySQL server at {host}:{port} (version {version}) is up but did not accept "
            "the login or the database (check MLMD_MYSQL_USER, MLMD_MYSQL_PASSWORD and "
            "--mysql_database)"
        )
    return f"{host}:{port} answered, but not as a MySQL server"


def connect(config) -> metadata_store.MetadataStore:
    """config: an ml-metadata ConnectionConfig (SQLite, MySQL) or MetadataStoreClientConfig."""
    is_mysql = isinstance(config, metadata_store_pb2.ConnectionConfig) and config.HasField("mysql")
    try:
        with _native_stderr_silenced() if is_mysql else contextlib.nullcontext():
            store = metadata_store.MetadataStore(config)
            store.get_context_types()  # touches the schema: a corrupt file fails here
    except (mlmd_errors.StatusError, RuntimeError) as error:
        where = _where(config)
        if is_mysql:
            reason = mysql_server_message(config.mysql.host, config.mysql.port)
            raise InspectError(f"cannot open the MLMD store at {where}: {reason}") from error
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


# Custom properties an API-backed store (pipeline.mlmd.kfp_api) records an execution's times in:
# ml-metadata sets create/update times itself and does not take them from a client.
START_MS_PROPERTY = "__start_ms"
END_MS_PROPERTY = "__end_ms"


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
        self._run_type = "pipeline_run" if self.schema == TFX_SCHEMA else KFP_RUN_CONTEXT
        self._run_type_id = next(
            (t.id for t in self.store.get_context_types() if t.name == self._run_type), None
        )
        self._runs: list | None = None
        # Reads repeat across one command (a run's executions, an artifact's producer): each
        # record is fetched from the store once.
        self._executions: dict[int, Any] = {}
        self._artifacts: dict[int, Any] = {}
        self._contexts_of: dict[int, list] = {}

    def _artifact_type_name(self, name: str) -> str:
        if self.schema == KFP_SCHEMA and name.startswith(KFP_TFX_TYPE_PREFIX):
            return name[len(KFP_TFX_TYPE_PREFIX) :]
        return name

    def runs(self) -> list:
        if self._runs is not None:
            return self._runs
        if self.schema == TFX_SCHEMA:
            runs = self.store.get_contexts_by_type("pipeline_run")
        else:
            runs = self.store.get_contexts_by_type(KFP_RUN_CONTEXT)
            if self.pipeline:
                pipeline = self.store.get_context_by_type_and_name(
                    KFP_PIPELINE_CONTEXT, self.pipeline
                )
                if pipeline is None:
                    raise InspectError(f"no Kubeflow pipeline named {self.pipeline!r} in the store")
                children = {c.id for c in self.store.get_children_contexts_by_context(pipeline.id)}
                runs = [r for r in runs if r.id in children]
        self._runs = sorted(runs, key=lambda c: c.id)
        return self._runs

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

    def row_of(self, run) -> int:
        """A run's row number as `runs` lists it (1 = oldest)."""
        return [r.id for r in self.runs()].index(run.id) + 1

    def executions_by_id(self, ids: Iterable[int]) -> list:
        missing = sorted({i for i in ids if i not in self._executions})
        if missing:
            for execution in self.store.get_executions_by_id(missing):
                self._executions[execution.id] = execution
        return [self._executions[i] for i in ids if i in self._executions]

    def artifacts_by_id(self, ids: Iterable[int]) -> list:
        missing = sorted({i for i in ids if i not in self._artifacts})
        if missing:
            for artifact in self.store.get_artifacts_by_id(missing):
                self._artifacts[artifact.id] = artifact
        return [self._artifacts[i] for i in ids if i in self._artifacts]

    def preload_contexts(self, execution_ids: Iterable[int]) -> None:
        """Reads the node and run contexts of many executions at once: one query per node and
        per run instead of one per execution (a lineage through 1,000 cached reruns)."""
        missing = {i for i in execution_ids if i not in self._contexts_of}
        if len(missing) <= BULK_CONTEXT_READ:
            return
        found: dict[int, list] = {}
        contexts = list(self.runs())
        if self.schema == TFX_SCHEMA:
            contexts += self.store.get_contexts_by_type("node")
        for context in contexts:
            for execution in self.store.get_executions_by_context(context.id):
                if execution.id in missing:
                    found.setdefault(execution.id, []).append(context)
                    self._executions.setdefault(execution.id, execution)
        self._contexts_of.update(found)

    def _contexts(self, execution_id: int) -> list:
        if execution_id not in self._contexts_of:
            self._contexts_of[execution_id] = self.store.get_contexts_by_execution(execution_id)
        return self._contexts_of[execution_id]

    def node_of(self, execution) -> str:
        if self.schema == KFP_SCHEMA:
            return (
                custom_value(execution, "task_name")
                or custom_value(execution, "display_name")
                or self.execution_types.get(execution.type_id, "?")
            )
        for context in self._contexts(execution.id):
            if context.id in self.nodes:
                return self.nodes[context.id].rsplit(".", 1)[-1]
        return self.execution_types.get(execution.type_id, "?")

    def run_of(self, execution):
        """The run context an execution belongs to, None when it has none."""
        for context in self._contexts(execution.id):
            if context.type_id == self._run_type_id:
                return context
        return None

    def times(self, execution) -> tuple[int, int]:
        """(start, end) of an execution in ms since the epoch."""
        start = custom_value(execution, START_MS_PROPERTY)
        end = custom_value(execution, END_MS_PROPERTY)
        return (
            int(start) if start is not None else execution.create_time_since_epoch,
            int(end) if end is not None else execution.last_update_time_since_epoch,
        )

    def events(self, execution_id: int) -> tuple[list[int], list[int]]:
        events = self.store.get_events_by_execution_ids([execution_id])
        inputs = sorted({e.artifact_id for e in events if e.type in INPUT_EVENTS})
        outputs = sorted({e.artifact_id for e in events if e.type in OUTPUT_EVENTS})
        return inputs, outputs

    def input_keys(self, execution_id: int) -> dict[int, str]:
        """{input artifact id: the input's key (examples, model, baseline_model, ...)}."""
        return {
            e.artifact_id: e.path.steps[0].key
            for e in self.store.get_events_by_execution_ids([execution_id])
            if e.type in INPUT_EVENTS and e.path.steps and e.path.steps[0].HasField("key")
        }

    def executions(self, run) -> list:
        """A run's component executions, oldest first. On Kubeflow, without the DAG executions:
        its driver never marks the root DAG's execution complete."""
        executions = self.store.get_executions_by_context(run.id)
        if self.schema == KFP_SCHEMA:
            executions = [
                e for e in executions if self.execution_types.get(e.type_id) != KFP_DAG_EXECUTION
            ]
        for execution in executions:
            self._executions.setdefault(execution.id, execution)
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
        for artifact in self.artifacts_by_id(ids) if ids else []:
            by_type.setdefault(self.artifact_types.get(artifact.type_id, "?"), []).append(artifact)
        return by_type

    def artifact(self, artifact_id: int):
        found = self.artifacts_by_id([artifact_id])
        if not found:
            raise InspectError(f"unknown artifact id {artifact_id}")
        return found[0]

    def producers(self, artifact_ids: Iterable[int]) -> dict[int, int]:
        """{artifact id: the execution that produced it}. Cached executions record OUTPUT events
        for the artifacts they reuse; the producer is the oldest execution that did the work
        (not CACHED), else the oldest one recording the artifact."""
        ids = sorted(set(artifact_ids))
        if not ids:
            return {}
        writers: dict[int, list[int]] = {}
        for event in self.store.get_events_by_artifact_ids(ids):
            if event.type in OUTPUT_EVENTS:
                writers.setdefault(event.artifact_id, []).append(event.execution_id)
        executions = {
            e.id: e for e in self.executions_by_id({i for w in writers.values() for i in w})
        }
        chosen = {}
        for artifact_id, execution_ids in writers.items():
            ordered = sorted(execution_ids)
            worked = [i for i in ordered if executions[i].last_known_state != State.CACHED]
            chosen[artifact_id] = (worked or ordered)[0]
        return chosen

    def producer(self, artifact_id: int) -> int | None:
        return self.producers([artifact_id]).get(artifact_id)

    def consumers(self, artifact_id: int) -> list[int]:
        return sorted(
            {
                e.execution_id
                for e in self.store.get_events_by_artifact_ids([artifact_id])
                if e.type in INPUT_EVENTS
            }
        )


def latest_property(db: Store, key: str, pipeline: str) -> dict[str, Any]:
    """{node: `key`'s value in the newest finished (complete or cached) execution of that node
    of `pipeline` that records it}, over every run in a local (TFX) store: read per node
    context, so the cost grows with the pipeline's nodes' executions, not the whole store's."""
    finished = {metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED}
    prefix = f"{pipeline}."
    latest: dict[str, Any] = {}
    for context_id, name in db.nodes.items():
        if not name.startswith(prefix):
            continue
        executions = db.store.get_executions_by_context(context_id)
        for execution in sorted(executions, key=lambda e: e.id, reverse=True):
            if execution.last_known_state not in finished:
                continue
            value = db.execution_properties(execution).get(key)
            if value is not None:
                latest[name[len(prefix) :]] = value
                break
    return latest


def run_status(states: list[str]) -> str:
    if "FAILED" in states:
        return "FAILED"
    if any(s in ("RUNNING", "NEW", "UNKNOWN") for s in states):
        return "RUNNING"
    return "COMPLETE"


def describe_run(db: Store, run, row: int) -> dict:
    executions = db.executions(run)
    states = [State.Name(e.last_known_state) for e in executions]
    times = [db.times(e) for e in executions]
    return {
        "row": row,
        "run": run.name,
        "start": _time(min(t[0] for t in times)) if times else "",
        "end": _time(max(t[1] for t in times)) if times else "",
        "status": run_status(states),
        "executed": states.count("COMPLETE"),
        "cached": states.count("CACHED"),
        "failed": states.count("FAILED"),
    }


def describe_runs(db: Store) -> list[dict]:
    return [describe_run(db, run, index) for index, run in enumerate(db.runs(), start=1)]


def describe_executions(db: Store, run) -> list[dict]:
    rows = []
    for execution in db.executions(run):
        inputs, outputs = db.events(execution.id)
        start, end = db.times(execution)
        rows.append(
            {
                "execution": execution.id,
                "component": db.node_of(execution),
                "state": State.Name(execution.last_known_state),
                "seconds": round((end - start) / 1000, 1),
                "inputs": inputs,
                "outputs": outputs,
                "properties": db.execution_properties(execution),
            }
        )
    return sorted(rows, key=lambda r: r["execution"])


def cache_sources(db: Store, executions: list[dict]) -> dict[int, dict]:
    """{cached execution id: where its outputs come from}: the execution that produced them, its
    run (id and row number) and how long it took. Rows as describe_executions returns them."""
    cached = [e for e in executions if e["state"] == "CACHED" and e["outputs"]]
    producers = db.producers(a for e in cached for a in e["outputs"])
    sources = {}
    for row in cached:
        producer_ids = {producers[a] for a in row["outputs"] if a in producers}
        producer_ids.discard(row["execution"])
        if not producer_ids:
            continue
        [producer] = db.executions_by_id([min(producer_ids)])
        run = db.run_of(producer)
        start, end = db.times(producer)
        sources[row["execution"]] = {
            "execution": producer.id,
            "run": run.name if run is not None else None,
            "row": db.row_of(run) if run is not None and run in db.runs() else None,
            "seconds": round((end - start) / 1000, 1),
        }
    return sources


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


def describe_artifact(db: Store, artifact, producer: int | None = None) -> dict:
    producer = producer if producer is not None else db.producer(artifact.id)
    component = None
    if producer is not None:
        component = db.node_of(db.executions_by_id([producer])[0])
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
    artifacts = db.artifacts_by_id(sorted(ids)) if ids else []
    producers = db.producers(ids)
    rows = [describe_artifact(db, a, producers.get(a.id)) for a in artifacts]
    if type_name:
        known = set(db.artifact_types.values())
        if type_name not in known:
            raise InspectError(f"unknown artifact type {type_name!r}; known: {sorted(known)}")
        rows = [r for r in rows if r["type"] == type_name]
    return sorted(rows, key=lambda r: r["artifact"])


def _artifact_node(db: Store, artifact) -> dict:
    return {
        "artifact": artifact.id,
        "type": db.artifact_types.get(artifact.type_id, "?"),
        "uri": artifact.uri,
    }


def _execution_node(db: Store, execution) -> dict:
    run = db.run_of(execution)
    node = {
        "execution": execution.id,
        "component": db.node_of(execution),
        "state": State.Name(execution.last_known_state),
        "run": run.name if run is not None else None,
    }
    source = db.execution_properties(execution).get("input_base")
    if source:  # ExampleGen: the raw data directory
        node["source"] = source
    return node


def _subgraph(db: Store, artifact_ids: set[int], execution_ids: set[int], edges: set) -> dict:
    db.preload_contexts(execution_ids)
    executions = db.executions_by_id(sorted(execution_ids))
    return {
        "artifacts": [_artifact_node(db, a) for a in db.artifacts_by_id(sorted(artifact_ids))],
        "executions": [_execution_node(db, e) for e in executions],
        "edges": [{"artifact": a, "execution": e, "direction": d} for a, e, d in sorted(edges)],
    }


def lineage(db: Store, artifact_id: int) -> dict:
    """An artifact's lineage as a graph: each artifact and execution appears once, however many
    paths lead to it, so the output grows with the graph, not with the number of paths.

    upstream: every execution that produced the artifact or, transitively, one of its inputs
    (the producer being the execution that did the work, not the cached ones that reused it),
    to the raw data. downstream: every execution that consumed it or one of those executions'
    outputs, cached reuses included. Each part: {"artifacts", "executions", "edges"}; an edge is
    an event: {"artifact", "execution", "direction": "input" | "output"}."""
    root = db.artifact(artifact_id)

    up_artifacts, up_executions, up_edges = {root.id}, set(), set()
    frontier = {root.id}
    while frontier:
        producers = db.producers(frontier)
        new_executions = set()
        for artifact, execution in producers.items():
            up_edges.add((artifact, execution, "output"))
            if execution not in up_executions:
                new_executions.add(execution)
        up_executions |= new_executions
        frontier = set()
        if new_executions:
            for event in db.store.get_events_by_execution_ids(sorted(new_executions)):
                if event.type in INPUT_EVENTS:
                    up_edges.add((event.artifact_id, event.execution_id, "input"))
                    if event.artifact_id not in up_artifacts:
                        up_artifacts.add(event.artifact_id)
                        frontier.add(event.artifact_id)

    down_artifacts, down_executions, down_edges = {root.id}, set(), set()
    frontier = {root.id}
    while frontier:
        new_executions = set()
        for event in db.store.get_events_by_artifact_ids(sorted(frontier)):
            if event.type in INPUT_EVENTS:
                down_edges.add((event.artifact_id, event.execution_id, "input"))
                if event.execution_id not in down_executions:
                    new_executions.add(event.execution_id)
        down_executions |= new_executions
        frontier = set()
        if new_executions:
            for event in db.store.get_events_by_execution_ids(sorted(new_executions)):
                if event.type in OUTPUT_EVENTS:
                    down_edges.add((event.artifact_id, event.execution_id, "output"))
                    if event.artifact_id not in down_artifacts:
                        down_artifacts.add(event.artifact_id)
                        frontier.add(event.artifact_id)

    return {
        "artifact": _artifact_node(db, root),
        "upstream": _subgraph(db, up_artifacts, up_executions, up_edges),
        "downstream": _subgraph(db, down_artifacts, down_executions, down_edges),
    }


def topological_executions(graph: dict) -> list[dict]:
    """A lineage part's executions, each after the executions whose outputs it reads."""
    produced_by: dict[int, set[int]] = {}
    for edge in graph["edges"]:
        if edge["direction"] == "output":
            produced_by.setdefault(edge["artifact"], set()).add(edge["execution"])
    needs: dict[int, set[int]] = {e["execution"]: set() for e in graph["executions"]}
    for edge in graph["edges"]:
        if edge["direction"] == "input" and edge["execution"] in needs:
            needs[edge["execution"]] |= produced_by.get(edge["artifact"], set()) - {
                edge["execution"]
            }
    order: list[dict] = []
    done: set[int] = set()
    by_id = {e["execution"]: e for e in graph["executions"]}
    while len(order) < len(by_id):
        ready = sorted(i for i in by_id if i not in done and needs[i] <= done)
        if not ready:  # a cycle cannot happen in MLMD lineage; list the rest by id if it does
            ready = sorted(i for i in by_id if i not in done)
        for execution_id in ready:
            order.append(by_id[execution_id])
            done.add(execution_id)
    return order


def overall_metrics(evaluation_uri: str) -> dict[str, float]:
    """Metrics of the overall slice from an Evaluator output directory (the candidate's, with
    `<metric>_diff` for its change against a baseline)."""
    by_model = tfma_results.overall_metrics_by_model(evaluation_uri)
    return by_model.get("candidate") or by_model.get("") or {}


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
    by_model = tfma_results.overall_metrics_by_model(evaluation_uri)
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
    failures = []
    validation = tfma_results.validation_result(evaluation_uri)
    validation_ok = validation.validation_ok if validation is not None else None
    for per_slice in validation.metric_validations_per_slice if validation is not None else []:
        for failure in per_slice.failures:
            failures.append(
                {
                    "metric": failure.metric_key.name,
                    "value": tfma_results.metric_value(failure.metric_value),
                    "threshold": " ".join(str(failure.metric_threshold).split()),
                    "message": failure.message,
                }
            )
    return {
        "thresholds": thresholds,
        "has_baseline": has_baseline,
        "metrics": rows,
        "validation_ok": validation_ok,
        "failures": failures,
    }


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
                    "kind": "metric",
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
                    "kind": "component",
                }
            )
            continue
        for field in ("state", "input_uris", "output_uris"):
            if left[field] != right[field]:
                changes.append(
                    {
                        "component": component,
                        "change": field,
                        "a": left[field],
                        "b": right[field],
                        "kind": "component",
                    }
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
                        "kind": "component",
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
