"""inspect_mlmd against Kubeflow Pipelines without MLMD: runs, tasks and artifacts read through
the KFP API server's v2beta1 REST API, served here by a loopback stub (127.0.0.1 only, bounded
by timeouts) with responses in the API's shapes:

- `GET /apis/v2beta1/runs` (RunService.ListRuns: `runs`, `next_page_token`, paged) with Run
  messages as kfp-server-api's V2beta1Run reads them, plus the MLMD-removal KEP's `tasks`
  (kubeflow/pipelines proposals/12147-mlmd-removal/protos/runs.proto: PipelineTaskDetail with
  `name`, `type` ROOT/RUNTIME, `state`, `inputs`/`outputs` as IO {parameters, artifacts: [{name,
  value: Artifact}]}, `cache_fingerprint`);
- `GET /apis/v2beta1/tasks?run_id=` (RunService.ListTasks) for a run listed without its tasks;
- a run from a server before the KEP: `run_details.task_details` whose inputs/outputs name
  artifact ids only (backend/api/v2beta1/run.proto ArtifactList), resolved through
  `GET /apis/v2beta1/artifacts/{id}` (backend/api/v2beta1/artifact.proto ArtifactService:
  artifact_id, name, type, uri, metadata, created_at);
- `GET /apis/v2beta1/pipelines/{id}` for a run that names its pipeline by id only.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import threading
import urllib.parse

import pytest

from pipeline.mlmd import artifacts, lineage, records
from pipeline.mlmd import cli as inspect_mlmd
from pipeline.mlmd import kfp_api as kfp_api_read

PIPELINE = "penguin-kfp"
PIPELINE_ID = "5b1c4cf0-8f5e-4d2b-9a1e-2a3f4b5c6d70"
RUN_1 = "0b6e5a52-6c1e-4d07-9a53-1d0c5f3a1e01"
RUN_2 = "7f3c2d9a-2b4e-4c8f-8e21-5a9d0c6b7e02"
RUN_3 = "c4a1f0e2-9d3b-4a7c-b6e5-2f8d1a0c3b03"
ROOT = "minio://mlpipeline/v2/artifacts/penguin-kfp"
TOKEN = "test-token"


def artifact(artifact_id: str, name: str, uri: str, metadata: dict) -> dict:
    """An Artifact message (artifact.proto) as the API serializes it."""
    return {
        "artifact_id": artifact_id,
        "name": name,
        "type": "Artifact",
        "uri": uri,
        "metadata": metadata,
        "created_at": "2026-11-30T10:00:05Z",
        "namespace": "kubeflow-user",
    }


def task(run_id, task_id, name, state, start, end, *, inputs=(), outputs=(), parameters=None):
    """A KEP PipelineTaskDetail of a RUNTIME task."""
    return {
        "task_id": task_id,
        "run_id": run_id,
        "name": name,
        "display_name": name,
        "type": "RUNTIME",
        "state": state,
        "create_time": start,
        "start_time": start,
        "end_time": end,
        "cache_fingerprint": f"fp-{name}",
        "pods": [{"name": f"{task_id}-driver", "type": "DRIVER"}],
        "inputs": {
            "parameters": [{"name": k, "value": v} for k, v in (parameters or {}).items()],
            "artifacts": [
                {"name": key, "producer_task_name": producer, "value": value}
                for key, producer, value in inputs
            ],
        },
        "outputs": {
            "parameters": [],
            "artifacts": [{"name": key, "value": value} for key, value in outputs],
        },
    }


def root_task(run_id: str) -> dict:
    return {
        "task_id": f"{run_id}-root",
        "run_id": run_id,
        "name": "root",
        "type": "ROOT",
        "state": "SUCCEEDED",
        "display_name": "root",
    }


EXAMPLES_1 = artifact(
    "101",
    "examples",
    f"{ROOT}/{RUN_1}/CsvExampleGen/examples",
    {"split_names": '["train", "eval"]', "span": 0},
)
STATISTICS_1 = artifact(
    "102",
    "statistics",
    f"{ROOT}/{RUN_1}/StatisticsGen/statistics",
    {"split_names": '["train", "eval"]'},
)
EXAMPLES_3 = artifact(
    "301",
    "examples",
    f"{ROOT}/{RUN_3}/CsvExampleGen/examples",
    {"split_names": '["train", "eval"]', "span": 0},
)


def run_message(run_id: str, name: str, created: str, state: str, **extra) -> dict:
    message = {
        "experiment_id": "e0d1c2b3-0000-4000-8000-000000000001",
        "run_id": run_id,
        "display_name": name,
        "storage_state": "AVAILABLE",
        "pipeline_version_reference": {"pipeline_id": PIPELINE_ID, "pipeline_version_id": "v1"},
        "runtime_config": {"parameters": {"data_root": "gs://bucket/data"}},
        "service_account": "pipeline-runner",
        "created_at": created,
        "scheduled_at": created,
        "finished_at": created,
        "state": state,
    }
    message.update(extra)
    return message


RUNS = [
    run_message(
        RUN_1,
        "penguins 1",
        "2026-11-30T10:00:00Z",
        "SUCCEEDED",
        pipeline_spec={"pipelineInfo": {"name": PIPELINE}},
        tasks=[
            root_task(RUN_1),
            task(
                RUN_1,
                "t11",
                "CsvExampleGen",
                "SUCCEEDED",
                "2026-11-30T10:00:01Z",
                "2026-11-30T10:00:31Z",
                outputs=[("examples", EXAMPLES_1)],
                parameters={"input_base": "gs://bucket/data"},
            ),
            task(
                RUN_1,
                "t12",
                "StatisticsGen",
                "SUCCEEDED",
                "2026-11-30T10:00:32Z",
                "2026-11-30T10:01:02Z",
                inputs=[("examples", "CsvExampleGen", EXAMPLES_1)],
                outputs=[("statistics", STATISTICS_1)],
            ),
        ],
    ),
    # Listed without tasks: read through ListTasks. Cached: the cache satisfied both tasks.
    run_message(
        RUN_2,
        "penguins 2",
        "2026-11-30T11:00:00Z",
        "SUCCEEDED",
        pipeline_spec={"pipelineInfo": {"name": PIPELINE}},
    ),
]
TASKS_2 = [
    root_task(RUN_2),
    task(
        RUN_2,
        "t21",
        "CsvExampleGen",
        "SKIPPED",
        "2026-11-30T11:00:01Z",
        "2026-11-30T11:00:02Z",
        outputs=[("examples", EXAMPLES_1)],
        parameters={"input_base": "gs://bucket/data"},
    ),
    task(
        RUN_2,
        "t22",
        "StatisticsGen",
        "SKIPPED",
        "2026-11-30T11:00:03Z",
        "2026-11-30T11:00:04Z",
        inputs=[("examples", "CsvExampleGen", EXAMPLES_1)],
        outputs=[("statistics", STATISTICS_1)],
    ),
]
# A server before the KEP: task details with artifact ids (and the root DAG and drivers as
# tasks), the pipeline named by id only.
RUN_3_MESSAGE = run_message(
    RUN_3,
    "penguins 3",
    "2026-11-30T12:00:00Z",
    "FAILED",
    run_details={
        "pipeline_context_id": "7",
        "pipeline_run_context_id": "8",
        "task_details": [
            {
                "run_id": RUN_3,
                "task_id": "t30",
                "display_name": "root",
                "state": "FAILED",
                "create_time": "2026-11-30T12:00:00Z",
            },
            {
                "run_id": RUN_3,
                "task_id": "t31d",
                "display_name": "CsvExampleGen-driver",
                "state": "SUCCEEDED",
                "create_time": "2026-11-30T12:00:00Z",
            },
            {
                "run_id": RUN_3,
                "task_id": "t31",
                "display_name": "CsvExampleGen",
                "state": "SUCCEEDED",
                "execution_id": "31",
                "create_time": "2026-11-30T12:00:01Z",
                "start_time": "2026-11-30T12:00:01Z",
                "end_time": "2026-11-30T12:00:41Z",
                "outputs": {"examples": {"artifact_ids": ["301"]}},
            },
            {
                "run_id": RUN_3,
                "task_id": "t32",
                "display_name": "StatisticsGen",
                "state": "FAILED",
                "execution_id": "32",
                "create_time": "2026-11-30T12:00:42Z",
                "start_time": "2026-11-30T12:00:42Z",
                "end_time": "2026-11-30T12:00:50Z",
                "inputs": {"examples": {"artifact_ids": ["301"]}},
                "error": {"code": 2, "message": "OOMKilled"},
            },
        ],
    },
)
ARTIFACTS = {"301": EXAMPLES_3}


class KfpStub(http.server.BaseHTTPRequestHandler):
    """Routes of the KFP API server; everything else 404 with the API's error body."""

    requests: list[tuple[str, dict, str | None]] = []
    fail_with: tuple[int, dict] | None = None

    def log_message(self, *args):  # quiet
        return

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        KfpStub.requests.append((url.path, query, self.headers.get("Authorization")))
        if KfpStub.fail_with:
            self._send(*KfpStub.fail_with)
            return
        path = url.path
        if path == "/apis/v2beta1/runs":
            # Two pages: the first two runs, then the third.
            if query.get("page_token") == "page-2":
                self._send(200, {"runs": [RUN_3_MESSAGE], "total_size": 3})
            else:
                self._send(200, {"runs": RUNS, "total_size": 3, "next_page_token": "page-2"})
        elif path == "/apis/v2beta1/tasks":
            tasks = TASKS_2 if query.get("run_id") == RUN_2 else []
            self._send(200, {"tasks": tasks, "total_size": len(tasks)})
        elif path.startswith("/apis/v2beta1/artifacts/") and path.rsplit("/", 1)[1] in ARTIFACTS:
            self._send(200, ARTIFACTS[path.rsplit("/", 1)[1]])
        elif path == f"/apis/v2beta1/pipelines/{PIPELINE_ID}":
            self._send(200, {"pipeline_id": PIPELINE_ID, "display_name": PIPELINE})
        elif path == "/apis/v2beta1/healthz":
            self._send(200, {"commit_sha": "unknown", "tag_name": "2.5.0", "multi_user": True})
        else:
            self._send(404, {"error": "Not Found", "code": 5, "message": "Not Found"})


@pytest.fixture
def kfp_api():
    KfpStub.requests = []
    KfpStub.fail_with = None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), KfpStub)
    server.timeout = 10
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def inspect(host, *args, code=0):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert inspect_mlmd.main(["--kfp_host", host, *args]) == code, err.getvalue()
    return out.getvalue() if code == 0 else err.getvalue()


def test_runs_tasks_and_states(kfp_api, monkeypatch):
    monkeypatch.setenv("KFP_API_TOKEN", TOKEN)
    rows = json.loads(inspect(kfp_api, "--json", "runs"))
    summary = [(r["run"], r["status"], r["executed"], r["cached"], r["failed"]) for r in rows]
    assert summary == [
        (RUN_1, "COMPLETE", 2, 0, 0),
        (RUN_2, "COMPLETE", 0, 2, 0),
        (RUN_3, "FAILED", 1, 0, 1),
    ]
    # Times from the API, not from when the in-memory store was written.
    assert (rows[0]["start"], rows[0]["end"]) == ("2026-11-30 10:00:01", "2026-11-30 10:01:02")
    # Every request carried the token; the runs were read page by page.
    assert {auth for _, _, auth in KfpStub.requests} == {f"Bearer {TOKEN}"}
    pages = [q.get("page_token") for path, q, _ in KfpStub.requests if path.endswith("/runs")]
    assert pages == [None, "page-2"]

    executions = json.loads(inspect(kfp_api, "executions", "1", "--json"))
    assert [(e["component"], e["state"], e["seconds"]) for e in executions] == [
        ("CsvExampleGen", "COMPLETE", 30.0),
        ("StatisticsGen", "COMPLETE", 30.0),
    ]
    example_gen, statistics_gen = executions
    assert example_gen["properties"]["input_base"] == "gs://bucket/data"
    assert statistics_gen["inputs"] == example_gen["outputs"]


def test_artifacts_types_and_the_artifact_service(kfp_api):
    rows = json.loads(inspect(kfp_api, "--json", "artifacts", "1"))
    # The API types TFX's artifacts "Artifact"; the output key names their TFX type.
    assert [(r["type"], r["uri"]) for r in rows] == [
        ("Examples", EXAMPLES_1["uri"]),
        ("ExampleStatistics", STATISTICS_1["uri"]),
    ]
    assert rows[0]["properties"]["split_names"] == '["train", "eval"]'
    assert rows[0]["properties"]["kfp_artifact_id"] == "101"
    # A run from before the KEP: artifact ids resolved through the artifact service; the root
    # DAG and the drivers are not components.
    third = json.loads(inspect(kfp_api, "--json", "executions", "3"))
    assert [(e["component"], e["state"]) for e in third] == [
        ("CsvExampleGen", "COMPLETE"),
        ("StatisticsGen", "FAILED"),
    ]
    KfpStub.requests = []
    [examples] = json.loads(inspect(kfp_api, "--json", "artifacts", "3"))
    assert (examples["type"], examples["uri"]) == ("Examples", EXAMPLES_3["uri"])
    assert ("/apis/v2beta1/artifacts/301", {}, None) in KfpStub.requests
    # The pipeline of that run is named by id only: looked up once per command.
    assert [p for p, _, _ in KfpStub.requests].count(f"/apis/v2beta1/pipelines/{PIPELINE_ID}") == 1


def test_lineage_diff_and_report(kfp_api, tmp_path):
    store = kfp_api_read.load(kfp_api)
    db = records.Store(store, schema=records.KFP_SCHEMA, pipeline=PIPELINE)
    [statistics] = [a for a in artifacts.describe_artifacts(db, db.run("1"), "ExampleStatistics")]
    graph = json.loads(inspect(kfp_api, "--json", "lineage", str(statistics["artifact"])))
    upstream = graph["upstream"]
    assert [e["component"] for e in lineage.topological_executions(upstream)] == [
        "CsvExampleGen",
        "StatisticsGen",
    ]
    assert upstream["executions"][0]["source"] == "gs://bucket/data"
    # Cached in run 2: the same artifacts, and downstream lists both runs' StatisticsGen once each.
    examples = next(a for a in upstream["artifacts"] if a["type"] == "Examples")
    down = json.loads(inspect(kfp_api, "--json", "lineage", str(examples["artifact"])))[
        "downstream"
    ]
    assert sorted(e["run"] for e in down["executions"]) == [RUN_1, RUN_2]

    changes = json.loads(inspect(kfp_api, "--json", "diff", "1", "3"))
    states = {c["component"]: (c["a"], c["b"]) for c in changes if c["change"] == "state"}
    assert states == {"StatisticsGen": ("COMPLETE", "FAILED")}

    out = tmp_path / "report.html"
    inspect(kfp_api, "report", "2", "--out", str(out))
    page = out.read_text()
    assert "Status COMPLETE: 0 executed,\n2 cached" in page
    assert "outputs reused from <a href='report-1.html'>run 1</a>" in page


def test_unreachable_and_refusing_servers(kfp_api):
    err = inspect("http://127.0.0.1:9", "runs", code=2)
    assert err.startswith("error: cannot reach the KFP API at http://127.0.0.1:9: ")
    assert err.count("\n") == 1
    KfpStub.fail_with = (403, {"error": "denied", "code": 7, "message": "User is not authorized"})
    err = inspect(kfp_api, "runs", code=2)
    assert err == (
        f"error: the KFP API at {kfp_api} answered 403 to GET /apis/v2beta1/runs: "
        "User is not authorized\n"
    )
    KfpStub.fail_with = (404, {"error": "Not Found", "code": 5, "message": "Not Found"})
    err = inspect(kfp_api, "runs", code=2)
    assert (
        err == f"error: {kfp_api} does not serve the KFP v2beta1 API (no /apis/v2beta1/healthz)\n"
    )


def test_one_store_flag_at_a_time(kfp_api):
    err = inspect(kfp_api, "--grpc_host", "localhost", "--mysql_host", "localhost", "runs", code=2)
    assert err == "error: --grpc_host and --mysql_host each name a store; pass one\n"
