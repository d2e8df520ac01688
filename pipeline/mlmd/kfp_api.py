"""Kubeflow Pipelines without ML Metadata: runs, tasks and artifacts read through the KFP API.

KFP is removing MLMD from its backend (kubeflow/pipelines#11760, KEP proposals/12147-mlmd-removal):
there is no metadata-grpc-service to point --grpc_host at. The same records are served by the
KFP API server's v2beta1 REST API instead:

- runs: `GET /apis/v2beta1/runs` (RunService.ListRuns, paged), read into kfp-server-api's
  `V2beta1Run` models;
- tasks: the run's `tasks` (the KEP's Run.tasks), else `GET /apis/v2beta1/tasks?run_id=`
  (RunService.ListTasks), else, on servers before the KEP, `run_details.task_details`; each read
  into kfp-server-api's `V2beta1PipelineTaskDetail` for the fields it knows (ids, name, times,
  state), the KEP's new fields (name, type, inputs/outputs with their artifacts, parameters,
  cache_fingerprint) from the JSON itself: kfp-server-api 2.0.5 (kfp 2.5.0's) predates them;
- artifacts: inline in a task's inputs and outputs, or `GET /apis/v2beta1/artifacts/{id}`
  (ArtifactService.GetArtifact) where a task names artifact ids only.

They are written into an in-memory ML Metadata store in the layout KFP's own driver and launcher
wrote (pipeline and run contexts, a DAG execution per run, a container execution per runtime
task with `task_name` and its input parameters, INPUT and OUTPUT events named by the artifact's
key, artifact types by schema title), so that every command of pipeline.mlmd reads them
through pipeline.mlmd.records as it reads a Kubeflow MLMD store.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Iterator
from typing import Any

import kfp_server_api
from google.protobuf import struct_pb2
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline.mlmd import records
from pipeline.mlmd.errors import InspectError

RUNS_PATH = "/apis/v2beta1/runs"
TASKS_PATH = "/apis/v2beta1/tasks"
ARTIFACTS_PATH = "/apis/v2beta1/artifacts"
PIPELINES_PATH = "/apis/v2beta1/pipelines"
PAGE_SIZE = 100
TIMEOUT_SEC = 30.0
# Task types of the KEP's PipelineTaskDetail.TaskType: only RUNTIME tasks run a component;
# the others (ROOT, CONDITION, LOOP, DAG, ...) are recorded as DAG executions, as KFP did in MLMD.
RUNTIME_TASK = "RUNTIME"
ROOT_TASK = "ROOT"
# RuntimeState -> the MLMD execution state KFP's launcher recorded. A task the cache satisfied
# did not run its executor: SKIPPED (CACHED where a server says so).
STATES = {
    "SUCCEEDED": metadata_store_pb2.Execution.COMPLETE,
    "SKIPPED": metadata_store_pb2.Execution.CACHED,
    "CACHED": metadata_store_pb2.Execution.CACHED,
    "FAILED": metadata_store_pb2.Execution.FAILED,
    "CANCELED": metadata_store_pb2.Execution.CANCELED,
    "CANCELING": metadata_store_pb2.Execution.RUNNING,
    "RUNNING": metadata_store_pb2.Execution.RUNNING,
    "PENDING": metadata_store_pb2.Execution.NEW,
    "PAUSED": metadata_store_pb2.Execution.RUNNING,
}
OUTPUT_IO_TYPES = frozenset({"OUTPUT", "ITERATOR_OUTPUT", "ONE_OF_OUTPUT"})


class _Body:
    """The shape kfp_server_api.ApiClient.deserialize reads (a REST response's body)."""

    def __init__(self, data: dict):
        self.data = json.dumps(data)


@functools.cache
def tfx_output_types() -> dict[str, str]:
    """{output key: TFX artifact type name} over TFX's standard component specs (examples ->
    Examples, statistics -> ExampleStatistics, blessing -> ModelBlessing, ...): the KFP API types
    an artifact by a handful of generic names (Artifact, Model, Dataset, ...) only."""
    from tfx.types import standard_component_specs

    types: dict[str, str] = {}
    for value in vars(standard_component_specs).values():
        outputs = getattr(value, "OUTPUTS", None)
        if isinstance(value, type) and isinstance(outputs, dict):
            for key, channel in outputs.items():
                types.setdefault(key, channel.type.TYPE_NAME)
    return types


class KfpApi:
    """The KFP API server's v2beta1 REST API through kfp-server-api's client."""

    def __init__(self, host: str, namespace: str | None = None, token: str | None = None):
        self.host = host.rstrip("/")
        self.namespace = namespace
        configuration = kfp_server_api.Configuration(host=self.host)
        configuration.retries = False  # one attempt: an unreachable server fails at once
        self.client = kfp_server_api.ApiClient(configuration)
        # Tasks read from runs' run_details (servers before the KEP).
        self.run_details_tasks = 0
        if token:
            self.client.set_default_header("Authorization", f"Bearer {token}")

    def get(self, path: str, **query: Any) -> dict | None:
        """One GET; None for 404 (a resource or a route this server does not have)."""
        params = [(k, v) for k, v in query.items() if v not in (None, "")]
        try:
            response = self.client.call_api(
                path,
                "GET",
                query_params=params,
                header_params={"Accept": "application/json"},
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=TIMEOUT_SEC,
            )
        except kfp_server_api.ApiException as error:
            if error.status == 404:
                return None
            message = _api_message(error.body) or error.reason
            raise InspectError(
                f"the KFP API at {self.host} answered {error.status} to GET {path}: {message}"
            ) from error
        except Exception as error:  # urllib3's connection errors, timeouts
            reason = getattr(error, "reason", None) or error
            raise InspectError(
                f"cannot reach the KFP API at {self.host}: {_one_line(reason)}"
            ) from error
        try:
            return json.loads(response.data or b"{}")
        except ValueError as error:
            raise InspectError(
                f"the KFP API at {self.host} answered GET {path} with something other than JSON"
            ) from error

    def model(self, data: dict, type_name: str):
        return self.client.deserialize(_Body(data), type_name)

    def pages(self, path: str, items_key: str, **query: Any) -> Iterator[dict]:
        token = None
        while True:
            page = self.get(path, page_size=PAGE_SIZE, page_token=token, **query)
            if page is None:
                return
            yield from page.get(items_key) or []
            token = page.get("next_page_token")
            if not token:
                return

    def runs(self) -> Iterator[tuple[Any, dict]]:
        """(V2beta1Run, the run's JSON) for each run, oldest first."""
        found = False
        for raw in self.pages(
            RUNS_PATH, "runs", namespace=self.namespace, sort_by="created_at asc"
        ):
            found = True
            yield self.model({k: v for k, v in raw.items() if k != "tasks"}, "V2beta1Run"), raw
        if not found and self.get("/apis/v2beta1/healthz") is None:
            raise InspectError(
                f"{self.host} does not serve the KFP v2beta1 API (no /apis/v2beta1/healthz)"
            )

    def tasks(self, run_raw: dict) -> list[dict]:
        if run_raw.get("tasks"):
            return run_raw["tasks"]
        listed = list(self.pages(TASKS_PATH, "tasks", run_id=run_raw["run_id"]))
        if listed:
            return listed
        details = (run_raw.get("run_details") or {}).get("task_details") or []
        self.run_details_tasks += len(details)
        return details

    @functools.cache  # noqa: B019 (one client per command)
    def artifact(self, artifact_id: str) -> dict:
        found = self.get(f"{ARTIFACTS_PATH}/{artifact_id}")
        if found is None:
            raise InspectError(f"the KFP API has no artifact {artifact_id}")
        return found

    @functools.cache  # noqa: B019
    def pipeline_name(self, pipeline_id: str) -> str | None:
        found = self.get(f"{PIPELINES_PATH}/{pipeline_id}")
        return (found or {}).get("display_name") or (found or {}).get("name")


def _one_line(value) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else type(value).__name__


def _api_message(body) -> str | None:
    try:
        parsed = json.loads(body) if body else {}
    except (TypeError, ValueError):
        return _one_line(body) if body else None
    return parsed.get("message") or parsed.get("error") if isinstance(parsed, dict) else None


def _ms(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return int(value.timestamp() * 1000)


def _value(python_value) -> metadata_store_pb2.Value:
    if isinstance(python_value, dict | list):
        struct = struct_pb2.Struct()
        struct.update(python_value if isinstance(python_value, dict) else {"values": python_value})
        return metadata_store_pb2.Value(struct_value=struct)
    if isinstance(python_value, bool):
        return metadata_store_pb2.Value(int_value=int(python_value))
    if isinstance(python_value, int):
        return metadata_store_pb2.Value(int_value=python_value)
    if isinstance(python_value, float):
        return metadata_store_pb2.Value(double_value=python_value)
    return metadata_store_pb2.Value(string_value=str(python_value))


def _state_name(state) -> str:
    return str(state or "").rsplit(".", 1)[-1].upper()


class _Writer:
    """Writes API records into ML Metadata the way KFP's driver and launcher did."""

    def __init__(self, api: KfpApi):
        self.api = api
        config = metadata_store_pb2.ConnectionConfig()
        config.fake_database.SetInParent()  # in memory: gone with the command
        self.store = metadata_store.MetadataStore(config)
        self.pipeline_type = self._context_type(records.KFP_PIPELINE_CONTEXT)
        self.run_type = self._context_type(records.KFP_RUN_CONTEXT)
        self.dag_type = self.store.put_execution_type(
            metadata_store_pb2.ExecutionType(name=records.KFP_DAG_EXECUTION)
        )
        self.container_type = self.store.put_execution_type(
            metadata_store_pb2.ExecutionType(name="system.ContainerExecution")
        )
        self.pipelines: dict[str, metadata_store_pb2.Context] = {}
        self.artifact_ids: dict[str, int] = {}  # KFP artifact id -> MLMD artifact id
        self.artifact_types: dict[str, int] = {}

    def _context_type(self, name: str) -> int:
        return self.store.put_context_type(metadata_store_pb2.ContextType(name=name))

    def _pipeline(self, run, raw: dict) -> metadata_store_pb2.Context:
        spec = raw.get("pipeline_spec") or {}
        name = (spec.get("pipelineInfo") or spec.get("pipeline_info") or {}).get("name")
        reference = run.pipeline_version_reference
        pipeline_id = raw.get("pipeline_id") or (reference.pipeline_id if reference else None)
        if not name and pipeline_id:
            name = self.api.pipeline_name(pipeline_id)
        name = name or run.display_name or "unknown-pipeline"
        if name not in self.pipelines:
            context = metadata_store_pb2.Context(type_id=self.pipeline_type, name=name)
            [context.id] = self.store.put_contexts([context])
            self.pipelines[name] = context
        return self.pipelines[name]

    def _artifact(self, value: dict, key: str) -> int:
        kfp_id = str(value["artifact_id"])
        if kfp_id in self.artifact_ids:
            return self.artifact_ids[kfp_id]
        if "uri" not in value and "type" not in value:  # an id only: ask the artifact service
            value = self.api.artifact(kfp_id)
        metadata = dict(value.get("metadata") or value.get("custom_properties") or {})
        type_name = metadata.pop("schema_title", None)
        if type_name is None:
            generic = str(value.get("type") or "Artifact")
            tfx_type = tfx_output_types().get(key) if generic == "Artifact" else None
            type_name = records.KFP_TFX_TYPE_PREFIX + tfx_type if tfx_type else generic
        if type_name not in self.artifact_types:
            self.artifact_types[type_name] = self.store.put_artifact_type(
                metadata_store_pb2.ArtifactType(name=type_name)
            )
        artifact = metadata_store_pb2.Artifact(
            type_id=self.artifact_types[type_name],
            uri=value.get("uri") or "",
            state=metadata_store_pb2.Artifact.LIVE,
        )
        for name, item in metadata.items():
            artifact.custom_properties[name].CopyFrom(_value(item))
        artifact.custom_properties["display_name"].CopyFrom(_value(value.get("name") or key))
        if value.get("number_value") is not None:
            artifact.custom_properties["number_value"].CopyFrom(_value(value["number_value"]))
        artifact.custom_properties["kfp_artifact_id"].CopyFrom(_value(kfp_id))
        [mlmd_id] = self.store.put_artifacts([artifact])
        self.artifact_ids[kfp_id] = mlmd_id
        return mlmd_id

    def _io(self, task: dict, side: str) -> tuple[list[tuple[int, str]], dict[str, Any]]:
        """[(MLMD artifact id, key)], {parameter: value} of a task's inputs or outputs, in the
        KEP's shape (IO with artifacts and parameters) or the earlier {key: {artifact_ids}}."""
        io = task.get(side) or {}
        artifacts: list[tuple[int, str]] = []
        parameters: dict[str, Any] = {}
        if isinstance(io.get("artifacts"), list) or isinstance(io.get("parameters"), list):
            for entry in io.get("artifacts") or []:
                key = entry.get("name") or entry.get("parameter_name") or entry.get("producer_key")
                values = entry.get("value") or entry.get("artifacts") or []
                for value in values if isinstance(values, list) else [values]:
                    artifacts.append((self._artifact(value, key or ""), key or ""))
            for entry in io.get("parameters") or []:
                if entry.get("name"):
                    parameters[entry["name"]] = entry.get("value")
        else:
            for key, listed in io.items():
                for kfp_id in (listed or {}).get("artifact_ids") or []:
                    artifacts.append((self._artifact({"artifact_id": kfp_id}, key), key))
        return artifacts, parameters

    def add_run(self, run, raw: dict) -> None:
        pipeline = self._pipeline(run, raw)
        context = metadata_store_pb2.Context(type_id=self.run_type, name=run.run_id)
        context.custom_properties["display_name"].CopyFrom(_value(run.display_name or ""))
        if raw.get("namespace"):
            context.custom_properties["namespace"].CopyFrom(_value(raw["namespace"]))
        [context.id] = self.store.put_contexts([context])
        self.store.put_parent_contexts(
            [metadata_store_pb2.ParentContext(child_id=context.id, parent_id=pipeline.id)]
        )
        contexts = [pipeline, context]
        for raw_task in self.api.tasks(raw):
            known = {k: v for k, v in raw_task.items() if k not in ("inputs", "outputs")}
            task = self.api.model(known, "V2beta1PipelineTaskDetail")
            task_type = str(raw_task.get("type") or "")
            name = raw_task.get("name") or task.display_name or ""
            if task_type:
                is_runtime = task_type == RUNTIME_TASK
            else:  # before the KEP: the root DAG and the drivers are tasks too
                is_runtime = name != "root" and not name.endswith("-driver")
            execution = metadata_store_pb2.Execution(
                type_id=self.container_type if is_runtime else self.dag_type,
                last_known_state=STATES.get(
                    _state_name(task.state), metadata_store_pb2.Execution.UNKNOWN
                ),
            )
            if not is_runtime:
                execution.name = f"{task_type.lower() or 'dag'}/{run.run_id}/{name}"
            inputs, parameters = self._io(raw_task, "inputs")
            outputs, _ = self._io(raw_task, "outputs") if is_runtime else ([], {})
            properties: dict[str, Any] = {
                "task_name": name,
                "display_name": task.display_name or "",
                "task_id": task.task_id or "",
                "inputs": parameters,
            }
            if raw_task.get("cache_fingerprint"):
                properties["cache_fingerprint"] = raw_task["cache_fingerprint"]
            start = _ms(task.start_time) or _ms(task.create_time)
            end = _ms(task.end_time) or start
            if start is not None:
                properties[records.START_MS_PROPERTY] = start
                properties[records.END_MS_PROPERTY] = end
            for key, value in properties.items():
                execution.custom_properties[key].CopyFrom(_value(value))
            [execution_id] = self.store.put_executions([execution])
            events = [
                _event(metadata_store_pb2.Event.INPUT, artifact_id, key, execution_id)
                for artifact_id, key in inputs
            ] + [
                _event(metadata_store_pb2.Event.OUTPUT, artifact_id, key, execution_id)
                for artifact_id, key in outputs
            ]
            if events:
                self.store.put_events(events)
            self.store.put_attributions_and_associations(
                [],
                [
                    metadata_store_pb2.Association(context_id=c.id, execution_id=execution_id)
                    for c in contexts
                ],
            )
            artifact_ids = sorted({a for a, _ in inputs + outputs})
            self.store.put_attributions_and_associations(
                [
                    metadata_store_pb2.Attribution(context_id=context.id, artifact_id=a)
                    for a in artifact_ids
                ],
                [],
            )


def _event(kind, artifact_id: int, key: str, execution_id: int) -> metadata_store_pb2.Event:
    event = metadata_store_pb2.Event(type=kind, artifact_id=artifact_id, execution_id=execution_id)
    event.path.steps.add().key = key
    return event


def run_ids(host: str, namespace: str | None = None, token: str | None = None) -> list[str]:
    """The ids of the runs the KFP API at `host` lists (in `namespace`), oldest first."""
    return [run.run_id for run, _ in KfpApi(host, namespace=namespace, token=token).runs()]


def load(
    host: str, namespace: str | None = None, token: str | None = None
) -> metadata_store.MetadataStore:
    """Every run the KFP API at `host` lists (in `namespace`), as an in-memory MLMD store in
    KFP's layout."""
    api = KfpApi(host, namespace=namespace, token=token)
    writer = _Writer(api)
    for run, raw in api.runs():
        writer.add_run(run, raw)
    if api.run_details_tasks and not writer.artifact_ids:
        # KFP 2.x before the KEP (e.g. 2.14.3): its run_details are the Argo Workflow's nodes
        # (apiserver/server/api_converter.go:1637-1647 toModelTask: name, state, times, no
        # artifacts); the artifacts are in its ML Metadata.
        raise InspectError(
            f"the KFP API at {host} lists its runs' tasks without their artifacts (Kubeflow "
            "Pipelines with ML Metadata records them there): add --grpc_host HOST --grpc_port "
            "PORT of its metadata-grpc-service to read them"
        )
    return writer.store
