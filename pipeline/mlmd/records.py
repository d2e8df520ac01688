"""ML Metadata's read model: the Store, one store's runs, executions, artifacts and events, in
either record layout (TFX's own orchestrators, Kubeflow Pipelines v2), each record fetched once."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline.mlmd.errors import InspectError

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
# Custom properties an API-backed store (pipeline.mlmd.kfp_api) records an execution's times in:
# ml-metadata sets create/update times itself and does not take them from a client.
START_MS_PROPERTY = "__start_ms"
END_MS_PROPERTY = "__end_ms"


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


def properties(node) -> dict:
    """An artifact's or execution's properties and custom properties, without the internal
    "__" ones."""
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
    # KFP_SCHEMA only: the runs (KFP run ids, the run contexts' names) to show, e.g. those the
    # KFP API server lists; None: every run in the store.
    run_names: frozenset[str] | None = None

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
            if self.run_names is not None:
                runs = [r for r in runs if r.name in self.run_names]
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

    @staticmethod
    def _fetched_once(cache: dict[int, Any], ids: Iterable[int], fetch: Callable) -> list:
        """The records of `ids` in their order (unknown ids left out), fetching only those not
        in `cache` yet, in one call."""
        wanted = list(ids)
        missing = sorted({i for i in wanted if i not in cache})
        if missing:
            cache.update((record.id, record) for record in fetch(missing))
        return [cache[i] for i in wanted if i in cache]

    def executions_by_id(self, ids: Iterable[int]) -> list:
        return self._fetched_once(self._executions, ids, self.store.get_executions_by_id)

    def artifacts_by_id(self, ids: Iterable[int]) -> list:
        return self._fetched_once(self._artifacts, ids, self.store.get_artifacts_by_id)

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
        values = properties(execution)
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
