"""inspect_mlmd against ML Metadata as Kubeflow Pipelines v2 records it.

The store is a throwaway SQLite file written the way KFP's driver and launcher write MLMD
(kubeflow/pipelines backend/src/v2/metadata/client.go): schemaless types `system.Pipeline`,
`system.PipelineRun`, `system.DAGExecution`, `system.ContainerExecution`; a pipeline context named
by the pipeline, a run context named by the run id (its child); a root DAG execution named
`run/<run id>` that stays RUNNING; per task an execution with custom properties `task_name`,
`display_name`, `parent_dag_id`, pod and cache bookkeeping and the input parameters as one struct,
`inputs`; INPUT events at creation and OUTPUT events at publication, each with the artifact's name
as the path's one key; artifact types named by the schema title TFX compiles (`tfx.Examples`),
artifacts carrying TFX's metadata (numbers as doubles) plus `display_name` and
`store_session_info`. Read back through SQLite, and through gRPC as on a cluster.
"""

from __future__ import annotations

import json
from concurrent import futures

import grpc
import pytest
from google.protobuf import struct_pb2
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2, metadata_store_service_pb2

from pipeline.mlmd import cli as inspect_mlmd
from pipeline.mlmd import connection, records

PIPELINE = "penguin-kfp"
RUN_1 = "0b6e5a52-6c1e-4d07-9a53-1d0c5f3a1e01"
RUN_2 = "7f3c2d9a-2b4e-4c8f-8e21-5a9d0c6b7e02"
OTHER_RUN = "c4a1f0e2-9d3b-4a7c-b6e5-2f8d1a0c3b03"
ROOT = "gs://bucket/tfx"
DATA_V1 = "gs://bucket/data/penguins"
DATA_V2 = "gs://bucket/data/penguins-v2"


def _value(python_value) -> metadata_store_pb2.Value:
    """A custom property as KFP writes it: strings, ints, structs; numbers from an executor's
    artifact metadata become doubles."""
    if isinstance(python_value, dict):
        struct = struct_pb2.Struct()
        struct.update(python_value)
        return metadata_store_pb2.Value(struct_value=struct)
    if isinstance(python_value, float):
        return metadata_store_pb2.Value(double_value=float(python_value))
    if isinstance(python_value, int):
        return metadata_store_pb2.Value(int_value=python_value)
    return metadata_store_pb2.Value(string_value=python_value)


def _event(kind, artifact_name: str, artifact_id: int | None = None) -> metadata_store_pb2.Event:
    event = metadata_store_pb2.Event(type=kind)
    if artifact_id is not None:
        event.artifact_id = artifact_id
    event.path.steps.add().key = artifact_name
    return event


class KfpRecorder:
    """Writes MLMD as KFP v2's root-DAG driver, container driver and launcher do."""

    def __init__(self, store: metadata_store.MetadataStore):
        self.store = store

    def _context(self, type_name: str, name: str, properties: dict) -> metadata_store_pb2.Context:
        found = self.store.get_context_by_type_and_name(type_name, name)
        if found is not None:
            return found
        type_id = self.store.put_context_type(metadata_store_pb2.ContextType(name=type_name))
        context = metadata_store_pb2.Context(type_id=type_id, name=name)
        for key, value in properties.items():
            context.custom_properties[key].CopyFrom(_value(value))
        [context.id] = self.store.put_contexts([context])
        return context

    def start_run(self, pipeline_name: str, run_id: str, parameters: dict) -> dict:
        """Root DAG driver: pipeline and run contexts, the run's DAG execution."""
        pipeline = self._context(records.KFP_PIPELINE_CONTEXT, pipeline_name, {})
        run = self._context(
            records.KFP_RUN_CONTEXT,
            run_id,
            {
                "namespace": "kubeflow-user",
                "resource_name": "run-resource",
                "pipeline_root": f"{ROOT}/{pipeline_name}/{run_id}",
                "store_session_info": "",
            },
        )
        self.store.put_parent_contexts(
            [metadata_store_pb2.ParentContext(child_id=run.id, parent_id=pipeline.id)]
        )
        dag_type = self.store.put_execution_type(
            metadata_store_pb2.ExecutionType(name=records.KFP_DAG_EXECUTION)
        )
        dag = metadata_store_pb2.Execution(
            type_id=dag_type,
            name=f"run/{run_id}",
            last_known_state=metadata_store_pb2.Execution.RUNNING,
        )
        for key, value in {"display_name": "", "task_name": "", "inputs": parameters}.items():
            dag.custom_properties[key].CopyFrom(_value(value))
        dag_id, _, _ = self.store.put_execution(dag, [], [pipeline, run])
        return {"contexts": [pipeline, run], "dag_id": dag_id, "run_id": run_id}

    def create_task(self, run: dict, task_name: str, parameters: dict, inputs: dict) -> int:
        """Container driver: the task's execution (RUNNING) and its INPUT events."""
        type_id = self.store.put_execution_type(
            metadata_store_pb2.ExecutionType(name="system.ContainerExecution")
        )
        execution = metadata_store_pb2.Execution(
            type_id=type_id, last_known_state=metadata_store_pb2.Execution.RUNNING
        )
        custom = {
            "display_name": "",
            "task_name": task_name,
            "parent_dag_id": run["dag_id"],
            "pod_name": f"{PIPELINE}-{run['run_id'][:8]}-{task_name.lower()}-impl",
            "pod_uid": f"uid-{run['run_id'][:8]}-{task_name}",
            "namespace": "kubeflow-user",
            "image": "ghcr.io/you/tfx-scaleout:0.1.0",
            "cache_fingerprint": f"fingerprint-{run['run_id'][:8]}-{task_name}",
            "inputs": parameters,
        }
        for key, value in custom.items():
            execution.custom_properties[key].CopyFrom(_value(value))
        artifacts_and_events = [
            (
                self.store.get_artifacts_by_id([artifact_id])[0],
                _event(metadata_store_pb2.Event.INPUT, name, artifact_id),
            )
            for name, artifact_id in inputs.items()
        ]
        execution_id, _, _ = self.store.put_execution(
            execution, artifacts_and_events, run["contexts"]
        )
        return execution_id

    def publish(self, run: dict, execution_id: int, state, outputs: list[tuple]) -> dict:
        """Launcher: RecordArtifact per output (type = schema title), then PublishExecution with
        the final state and one OUTPUT event per artifact."""
        recorded = {}
        pairs = []
        for name, schema_title, metadata in outputs:
            type_id = self.store.put_artifact_type(
                metadata_store_pb2.ArtifactType(name=schema_title)
            )
            uri = f"{ROOT}/{PIPELINE}/{run['run_id']}/{self._task(execution_id)}/{name}"
            artifact = metadata_store_pb2.Artifact(
                type_id=type_id, uri=uri, state=metadata_store_pb2.Artifact.LIVE
            )
            for key, value in metadata.items():
                artifact.custom_properties[key].CopyFrom(_value(value))
            artifact.custom_properties["display_name"].CopyFrom(_value(name))
            artifact.custom_properties["store_session_info"].CopyFrom(
                _value(json.dumps({"Provider": "gs", "Params": {"fromEnv": "true"}}))
            )
            [artifact.id] = self.store.put_artifacts([artifact])
            recorded[name] = artifact.id
            pairs.append((artifact, _event(metadata_store_pb2.Event.OUTPUT, name, artifact.id)))
        [execution] = self.store.get_executions_by_id([execution_id])
        execution.last_known_state = state
        self.store.put_execution(execution, pairs, run["contexts"])
        return recorded

    def _task(self, execution_id: int) -> str:
        [execution] = self.store.get_executions_by_id([execution_id])
        return execution.custom_properties["task_name"].string_value


def _record_pipeline_run(recorder: KfpRecorder, run_id: str, data_root: str, fail_stats: bool):
    """CsvExampleGen -> StatisticsGen, as the compiled TFX pipeline runs on Kubeflow."""
    run = recorder.start_run(PIPELINE, run_id, {"data_root": data_root})
    example_gen = recorder.create_task(
        run,
        "CsvExampleGen",
        {"input_base": data_root, "output_config": '{"split_config": {}}'},
        inputs={},
    )
    examples = recorder.publish(
        run,
        example_gen,
        metadata_store_pb2.Execution.COMPLETE,
        [("examples", "tfx.Examples", {"split_names": '["train", "eval"]', "span": 0.0})],
    )["examples"]
    statistics_gen = recorder.create_task(
        run, "StatisticsGen", {"exclude_splits": "[]"}, inputs={"examples": examples}
    )
    if fail_stats:
        recorder.publish(run, statistics_gen, metadata_store_pb2.Execution.FAILED, [])
        return {"executions": [example_gen, statistics_gen], "examples": examples}
    statistics = recorder.publish(
        run,
        statistics_gen,
        metadata_store_pb2.Execution.COMPLETE,
        [("statistics", "tfx.ExampleStatistics", {"split_names": '["train", "eval"]'})],
    )["statistics"]
    return {
        "executions": [example_gen, statistics_gen],
        "examples": examples,
        "statistics": statistics,
    }


@pytest.fixture
def kfp_store(tmp_path):
    """Two runs of PIPELINE (the second: new data, StatisticsGen failed), one of another
    pipeline; returns the SQLite path and the recorded ids."""
    path = str(tmp_path / "kfp-metadata.sqlite")
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    recorder = KfpRecorder(metadata_store.MetadataStore(config))
    first = _record_pipeline_run(recorder, RUN_1, DATA_V1, fail_stats=False)
    second = _record_pipeline_run(recorder, RUN_2, DATA_V2, fail_stats=True)
    other = recorder.start_run("other-pipeline", OTHER_RUN, {})
    hello = recorder.create_task(other, "hello", {}, inputs={})
    recorder.publish(other, hello, metadata_store_pb2.Execution.COMPLETE, [])
    return {"path": path, "first": first, "second": second}


def inspect(capsys, *args):
    code = inspect_mlmd.main(list(args))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def inspect_json(capsys, store_path, *args):
    return json.loads(inspect(capsys, "--metadata", store_path, "--json", *args))


def test_detects_the_kubeflow_schema(kfp_store):
    db = records.Store(connection.open_store(kfp_store["path"]))
    assert db.schema == records.KFP_SCHEMA
    assert [r.name for r in db.runs()] == [RUN_1, RUN_2, OTHER_RUN]
    only_ours = records.Store(db.store, pipeline=PIPELINE)
    assert only_ours.node_states_by_run() == {
        RUN_1: {"CsvExampleGen": "COMPLETE", "StatisticsGen": "COMPLETE"},
        RUN_2: {"CsvExampleGen": "COMPLETE", "StatisticsGen": "FAILED"},
    }
    example_gen = kfp_store["first"]["executions"][0]
    by_type = only_ours.outputs_by_type(example_gen)
    assert list(by_type) == ["Examples"]
    assert records.custom_value(by_type["Examples"][0], "display_name") == "examples"
    # Forcing TFX's own layout on a Kubeflow store finds none of its runs.
    assert records.Store(db.store, schema=records.TFX_SCHEMA).runs() == []


def test_runs(capsys, kfp_store):
    rows = inspect_json(capsys, kfp_store["path"], "--pipeline", PIPELINE, "runs")
    summary = [
        {k: r[k] for k in ("row", "run", "status", "executed", "cached", "failed")} for r in rows
    ]
    # The root DAG execution stays RUNNING on Kubeflow; the run is still COMPLETE.
    assert summary == [
        {"row": 1, "run": RUN_1, "status": "COMPLETE", "executed": 2, "cached": 0, "failed": 0},
        {"row": 2, "run": RUN_2, "status": "FAILED", "executed": 1, "cached": 0, "failed": 1},
    ]
    assert all(r["start"] and r["end"] for r in rows)
    every_pipeline = inspect_json(capsys, kfp_store["path"], "runs")
    assert [r["run"] for r in every_pipeline] == [RUN_1, RUN_2, OTHER_RUN]

    table = inspect(capsys, "--metadata", kfp_store["path"], "--pipeline", PIPELINE, "runs")
    header, first, second = table.splitlines()
    assert header.split() == [
        "row",
        "run",
        "start",
        "end",
        "status",
        "executed",
        "cached",
        "failed",
    ]
    assert first.startswith(f"1    {RUN_1}") and first.split()[-4:] == ["COMPLETE", "2", "0", "0"]
    assert second.split()[-4:] == ["FAILED", "1", "0", "1"]


def test_executions(capsys, kfp_store):
    rows = inspect_json(capsys, kfp_store["path"], "executions", RUN_1)
    assert [(r["execution"], r["component"], r["state"]) for r in rows] == [
        (kfp_store["first"]["executions"][0], "CsvExampleGen", "COMPLETE"),
        (kfp_store["first"]["executions"][1], "StatisticsGen", "COMPLETE"),
    ]
    example_gen, statistics_gen = rows
    assert example_gen["inputs"] == [] and example_gen["outputs"] == [
        kfp_store["first"]["examples"]
    ]
    assert statistics_gen["inputs"] == [kfp_store["first"]["examples"]]
    assert statistics_gen["outputs"] == [kfp_store["first"]["statistics"]]
    # The task's input parameters (TFX exec properties) are properties of their own.
    assert example_gen["properties"]["input_base"] == DATA_V1
    assert "inputs" not in example_gen["properties"]
    assert example_gen["properties"]["task_name"] == "CsvExampleGen"
    assert example_gen["properties"]["pod_uid"].startswith("uid-")

    table = inspect(capsys, "--metadata", kfp_store["path"], "executions", "1").splitlines()
    assert table[0].split() == ["execution", "component", "state", "seconds", "inputs", "outputs"]
    assert [line.split()[1:3] for line in table[1:]] == [
        ["CsvExampleGen", "COMPLETE"],
        ["StatisticsGen", "COMPLETE"],
    ]


def test_artifacts(capsys, kfp_store):
    first = kfp_store["first"]
    rows = inspect_json(capsys, kfp_store["path"], "artifacts", RUN_1)
    assert [(r["artifact"], r["type"], r["uri"]) for r in rows] == [
        (first["examples"], "Examples", f"{ROOT}/{PIPELINE}/{RUN_1}/CsvExampleGen/examples"),
        (
            first["statistics"],
            "ExampleStatistics",
            f"{ROOT}/{PIPELINE}/{RUN_1}/StatisticsGen/statistics",
        ),
    ]
    examples = rows[0]
    assert examples["produced_by"] == {
        "execution": first["executions"][0],
        "component": "CsvExampleGen",
    }
    assert examples["properties"]["split_names"] == '["train", "eval"]'
    assert examples["size_bytes"] is None  # on GCS, not on this machine

    only_examples = inspect_json(capsys, kfp_store["path"], "artifacts", "--type", "Examples", "2")
    assert [r["artifact"] for r in only_examples] == [kfp_store["second"]["examples"]]

    code = inspect_mlmd.main(["--metadata", kfp_store["path"], "artifacts", "--type", "Nope"])
    assert code == 2 and "'ExampleStatistics'" in capsys.readouterr().err


def test_lineage(capsys, kfp_store):
    first = kfp_store["first"]
    example_gen, statistics_gen = first["executions"]
    graph = inspect_json(capsys, kfp_store["path"], "lineage", str(first["statistics"]))
    assert graph["artifact"]["type"] == "ExampleStatistics"
    upstream = graph["upstream"]
    assert [(e["execution"], e["component"], e["run"]) for e in upstream["executions"]] == [
        (example_gen, "CsvExampleGen", RUN_1),
        (statistics_gen, "StatisticsGen", RUN_1),
    ]
    assert upstream["executions"][0]["source"] == DATA_V1
    assert [a["artifact"] for a in upstream["artifacts"]] == [
        first["examples"],
        first["statistics"],
    ]
    assert upstream["edges"] == [
        {"artifact": first["examples"], "execution": example_gen, "direction": "output"},
        {"artifact": first["examples"], "execution": statistics_gen, "direction": "input"},
        {"artifact": first["statistics"], "execution": statistics_gen, "direction": "output"},
    ]

    down = inspect_json(capsys, kfp_store["path"], "lineage", str(first["examples"]))["downstream"]
    assert [e["component"] for e in down["executions"]] == ["StatisticsGen"]
    assert {a["artifact"] for a in down["artifacts"]} == {first["examples"], first["statistics"]}

    text = inspect(capsys, "--metadata", kfp_store["path"], "lineage", str(first["statistics"]))
    assert f"CsvExampleGen (execution {example_gen}, COMPLETE, run {RUN_1}) from {DATA_V1}" in text
    assert text.count("(execution ") == 2  # each upstream execution once; nothing downstream


def test_diff_leaves_out_per_attempt_bookkeeping(capsys, kfp_store):
    changes = inspect_json(capsys, kfp_store["path"], "diff", "1", "2")
    summary = {(c["component"], c["change"]) for c in changes}
    assert summary == {
        ("CsvExampleGen", "property input_base"),
        ("CsvExampleGen", "output_uris"),
        ("StatisticsGen", "state"),
        ("StatisticsGen", "input_uris"),
        ("StatisticsGen", "output_uris"),
    }
    [data] = [c for c in changes if c["change"] == "property input_base"]
    assert (data["a"], data["b"]) == (DATA_V1, DATA_V2)


def test_report(capsys, kfp_store, tmp_path):
    out = tmp_path / "run.html"
    result = inspect_json(capsys, kfp_store["path"], "report", RUN_1, "--out", str(out))
    assert result["run"] == RUN_1
    page = out.read_text()
    assert "CsvExampleGen" in page and "StatisticsGen" in page and "Status COMPLETE" in page


def test_unknown_kubeflow_pipeline(capsys, kfp_store):
    code = inspect_mlmd.main(["--metadata", kfp_store["path"], "--pipeline", "nope", "runs"])
    err = capsys.readouterr().err
    assert code == 2 and err == "error: no Kubeflow pipeline named 'nope' in the store\n"


def _serve_over_grpc(store_path: str) -> tuple[grpc.Server, int]:
    """An MLMD gRPC server in this process: each call goes to ml-metadata's own store over the
    SQLite file, as metadata-grpc-service does over Kubeflow's MySQL."""
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = store_path
    backend = metadata_store.MetadataStore(config)
    service = metadata_store_service_pb2.DESCRIPTOR.services_by_name["MetadataStoreService"]

    def handler(method):
        request_class = getattr(metadata_store_service_pb2, method.input_type.name)
        response_class = getattr(metadata_store_service_pb2, method.output_type.name)

        def call(request, context):
            response = response_class()
            # ml-metadata's dispatch of one service method to its C++ store (the client's
            # private helper; its gRPC server binary is not in the pip package).
            backend._call(method.name, request, response)
            return response

        return grpc.unary_unary_rpc_method_handler(
            call,
            request_deserializer=request_class.FromString,
            response_serializer=response_class.SerializeToString,
        )

    handlers = {m.name: handler(m) for m in service.methods}
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def test_same_output_through_grpc(capsys, kfp_store):
    server, port = _serve_over_grpc(kfp_store["path"])
    try:
        for command in (["runs"], ["executions", "2"], ["artifacts", "1"]):
            through_grpc = inspect(
                capsys,
                "--grpc_host",
                "127.0.0.1",
                "--grpc_port",
                str(port),
                "--pipeline",
                PIPELINE,
                *command,
            )
            from_file = inspect(
                capsys, "--metadata", kfp_store["path"], "--pipeline", PIPELINE, *command
            )
            assert through_grpc == from_file
        store = connection.open_store(connection.grpc_config("127.0.0.1", port))
        assert records.Store(store).schema == records.KFP_SCHEMA
    finally:
        server.stop(grace=None)


def test_unreachable_grpc(capsys):
    code = inspect_mlmd.main(["--grpc_host", "127.0.0.1", "--grpc_port", "9", "runs"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: cannot open the MLMD store at grpc://127.0.0.1:9: ")
    assert err.count("\n") == 1


def test_grpc_and_mysql_exclude_each_other(capsys):
    args = ["--grpc_host", "localhost", "--mysql_host", "localhost", "runs"]
    assert inspect_mlmd.main(args) == 2
    assert "pass one" in capsys.readouterr().err


def test_the_runs_a_kfp_api_server_lists_with_their_mlmd_records(capsys, kfp_store):
    """--kfp_host with an MLMD store (Kubeflow Pipelines 2.x: the API server's tasks carry no
    artifacts, MLMD has them): the runs are those the API server lists (a run deleted through
    the API keeps its records in MLMD), read from the MLMD store."""
    import http.server
    import threading

    # As KFP 2.14.3 lists a run: its run_details are the Argo Workflow's nodes, no artifacts.
    nodes = [
        {"run_id": RUN_2, "task_id": "t1", "display_name": name, "state": "SUCCEEDED"}
        for name in ("root-driver", "CsvExampleGen-driver", "CsvExampleGen", "executor")
    ]
    listed = {
        "runs": [
            {
                "run_id": RUN_2,
                "display_name": "second",
                "state": "FAILED",
                "run_details": {"task_details": nodes},
            }
        ]
    }

    class Api(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            return

        def do_GET(self):  # noqa: N802 (http.server's name)
            found = self.path.startswith("/apis/v2beta1/runs")
            data = json.dumps(listed if found else {}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host = f"http://127.0.0.1:{server.server_address[1]}"
        rows = inspect_json(capsys, kfp_store["path"], "--kfp_host", host, "runs")
        assert [(r["run"], r["status"], r["failed"]) for r in rows] == [(RUN_2, "FAILED", 1)]
        example_gen = kfp_store["second"]["executions"][0]
        executions = inspect_json(capsys, kfp_store["path"], "--kfp_host", host, "executions")
        assert example_gen in [e["execution"] for e in executions]
        # The API server alone has no artifacts to show: one line says what to add.
        assert inspect_mlmd.main(["--kfp_host", host, "runs"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: the KFP API at {host} lists its runs' tasks without")
        assert "add --grpc_host HOST --grpc_port PORT" in err and err.count("\n") == 1
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
