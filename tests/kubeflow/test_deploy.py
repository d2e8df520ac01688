"""deploy through kfp.Client against a real HTTP server on loopback that implements the KFP
v2beta1 REST endpoints the client calls, checking each request; and the error paths
(unreachable endpoint, rejected upload, failed run)."""

from __future__ import annotations

import http.server
import json
import re
import socket
import threading
import urllib.parse
from unittest import mock

import kfp
import pytest

from kubeflow import deploy, run_kubeflow

TOKEN = "test-token-from-the-environment"
API = "/apis/v2beta1"


class FakeKfp:
    """State and the request log of the fake Kubeflow Pipelines API server."""

    def __init__(self):
        self.requests: list[dict] = []
        self.pipelines: dict[str, str] = {}  # display name -> id
        self.versions: dict[str, list[str]] = {}
        self.experiments: dict[str, str] = {}
        self.runs: dict[str, dict] = {}
        self.run_states = ["PENDING", "RUNNING", "SUCCEEDED"]
        self.reject_upload: str | None = None
        self.workflow: dict | None = None  # the run's Argo Workflow (v1beta1 GetRun)
        self.logs: dict[str, str] = {}  # pod name -> its log (the node log endpoint)
        # (namespace, pod) -> its `main` log, served as Kubernetes serves pods/log.
        self.kube_logs: dict[tuple[str, str], str] = {}

    def handle(self, method: str, path: str, query: dict, body: bytes, headers) -> tuple[int, dict]:
        self.requests.append(
            {
                "method": method,
                "path": path,
                "query": query,
                "body": body,
                "authorization": headers.get("Authorization"),
            }
        )
        if method == "GET" and path == f"{API}/healthz":
            return 200, {"multi_user": False}
        if method == "GET" and path == f"{API}/pipelines":
            name = json.loads(query["filter"])["predicates"][0]["stringValue"]
            found = [
                {"pipeline_id": pid, "display_name": n}
                for n, pid in self.pipelines.items()
                if n == name
            ]
            return 200, {"pipelines": found} if found else {}
        if method == "POST" and path == f"{API}/pipelines/upload":
            if self.reject_upload:
                return 400, {"error": self.reject_upload, "code": 3, "message": self.reject_upload}
            pid = f"pipeline-{len(self.pipelines) + 1}"
            self.pipelines[query["name"]] = pid
            self.versions[pid] = [f"{pid}-v1"]
            return 200, {"pipeline_id": pid, "display_name": query["name"]}
        if method == "GET" and path.startswith(f"{API}/pipelines/") and path.endswith("/versions"):
            pid = path.split("/")[-2]
            newest = list(reversed(self.versions[pid]))
            return 200, {
                "pipeline_versions": [
                    {"pipeline_id": pid, "pipeline_version_id": v} for v in newest
                ][: int(query.get("page_size", 10))]
            }
        if method == "POST" and path == f"{API}/pipelines/upload_version":
            pid = query["pipelineid"]
            version = f"{pid}-v{len(self.versions[pid]) + 1}"
            self.versions[pid].append(version)
            return 200, {
                "pipeline_id": pid,
                "pipeline_version_id": version,
                "display_name": query["name"],
            }
        if method == "GET" and path == f"{API}/experiments":
            name = json.loads(query["filter"])["predicates"][0]["stringValue"]
            if name in self.experiments:
                return 200, {
                    "experiments": [{"experiment_id": self.experiments[name], "display_name": name}]
                }
            return 200, {}
        if method == "POST" and path == f"{API}/experiments":
            request = json.loads(body)
            eid = f"experiment-{len(self.experiments) + 1}"
            self.experiments[request["display_name"]] = eid
            return 200, {"experiment_id": eid, "display_name": request["display_name"]}
        if method == "POST" and path == f"{API}/runs":
            run = json.loads(body)
            run_id = f"run-{len(self.runs) + 1}"
            self.runs[run_id] = run
            return 200, {**run, "run_id": run_id, "state": "PENDING"}
        if method == "GET" and path.startswith("/apis/v1beta1/runs/") and self.workflow:
            manifest = json.dumps(self.workflow)
            return 200, {"run": {}, "pipeline_runtime": {"workflow_manifest": manifest}}
        if method == "GET" and path.startswith("/apis/v1alpha1/runs/"):
            pod = path.split("/nodes/", 1)[1].removesuffix("/log")
            if pod in self.logs:
                return 200, self.logs[pod].encode()
        kube_log = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", path)
        if method == "GET" and kube_log and query.get("container") == "main":
            key = (kube_log.group(1), kube_log.group(2))
            if key in self.kube_logs:
                return 200, self.kube_logs[key].encode()
            return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}
        if method == "GET" and path.startswith(f"{API}/runs/"):
            run_id = path.rsplit("/", 1)[-1]
            state = self.run_states.pop(0) if len(self.run_states) > 1 else self.run_states[0]
            tasks = [
                {"task_id": "t1", "display_name": "CsvExampleGen", "state": "SUCCEEDED"},
                {"task_id": "t2", "display_name": "Trainer", "state": state},
            ]
            if state == "FAILED":
                tasks[1]["error"] = {"message": "pod tfx-trainer OOMKilled"}
            return 200, {"run_id": run_id, "state": state, "run_details": {"task_details": tasks}}
        return 404, {"error": f"not implemented: {method} {path}", "code": 5}


def _handler(fake: FakeKfp):
    class Handler(http.server.BaseHTTPRequestHandler):
        def _serve(self):
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, payload = fake.handle(self.command, url.path, query, body, self.headers)
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, *args):  # keep the test output clean
            pass

    return Handler


@pytest.fixture
def kfp_server(tmp_path, monkeypatch):
    fake = FakeKfp()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(deploy.TOKEN_ENV, TOKEN)
    # kfp.Client keeps a context file under the home directory; keep it in the test's.
    with mock.patch.object(kfp.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "context.json")):
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def package(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        "pipelineInfo:\n  name: penguins-pipeline\nroot: {}\nschemaVersion: 2.1.0\n"
        "sdkVersion: tfx-1.16.0\ndeploymentSpec: {}\ncomponents: {}\n"
        "defaultPipelineRoot: gs://bucket/tfx\n"
    )
    return str(path)


def _deploy(endpoint, package, *flags):
    return run_kubeflow.main(["deploy", f"--package={package}", f"--endpoint={endpoint}", *flags])


def test_upload_new_pipeline_then_a_version_and_run_to_the_end(kfp_server, package, capsys):
    fake, endpoint = kfp_server
    assert _deploy(endpoint, package, "--version_name=v1") == 0
    assert fake.pipelines == {"penguins-pipeline": "pipeline-1"}
    upload = next(r for r in fake.requests if r["path"] == f"{API}/pipelines/upload")
    assert upload["method"] == "POST" and upload["query"]["name"] == "penguins-pipeline"
    # The file goes as multipart form data, unchanged.
    assert b'name="uploadfile"' in upload["body"]
    assert b"name: penguins-pipeline" in upload["body"]
    out = capsys.readouterr().out
    assert "pipeline penguins-pipeline: id pipeline-1, version pipeline-1-v1" in out

    code = _deploy(
        endpoint,
        package,
        "--version_name=v2",
        "--run",
        "--experiment=penguins",
        "--run_name=nightly",
        "--param=data_root=gs://bucket/penguins",
        "--run_pipeline_root=gs://bucket/runs",
        "--wait",
        "--poll=0.01",
    )
    assert code == 0
    calls = [(r["method"], r["path"]) for r in fake.requests]
    version = next(r for r in fake.requests if r["path"] == f"{API}/pipelines/upload_version")
    assert version["query"] == {"name": "v2", "pipelineid": "pipeline-1"}
    assert ("POST", f"{API}/experiments") in calls
    run = fake.runs["run-1"]
    assert run["display_name"] == "nightly" and run["experiment_id"] == "experiment-1"
    assert run["pipeline_version_reference"] == {
        "pipeline_id": "pipeline-1",
        "pipeline_version_id": "pipeline-1-v2",
    }
    assert run["runtime_config"]["parameters"] == {"data_root": "gs://bucket/penguins"}
    assert run["runtime_config"]["pipeline_root"] == "gs://bucket/runs"
    assert calls.count(("GET", f"{API}/runs/run-1")) == 3
    # Every request carries the token from the environment, none carries it in its body.
    assert {r["authorization"] for r in fake.requests} == {f"Bearer {TOKEN}"}
    assert not any(TOKEN.encode() in r["body"] for r in fake.requests)
    out = capsys.readouterr().out
    assert "run run-1 started" in out
    assert "run run-1: RUNNING" in out and "  Trainer: SUCCEEDED" in out
    assert out.rstrip().endswith("run run-1 SUCCEEDED")


def test_existing_experiment_is_reused(kfp_server, package):
    fake, endpoint = kfp_server
    fake.experiments["penguins"] = "experiment-7"
    assert _deploy(endpoint, package, "--run", "--experiment=penguins") == 0
    assert fake.runs["run-1"]["experiment_id"] == "experiment-7"
    assert ("POST", f"{API}/experiments") not in [(r["method"], r["path"]) for r in fake.requests]


def test_a_run_is_started_with_the_root_the_file_was_compiled_for(kfp_server, package):
    """KFP's backend ignores the file's defaultPipelineRoot (kubeflow/pipelines 2.14.3: no Go code
    reads it; the run's runtime_config.pipeline_root, else the kfp-launcher ConfigMap's, else
    minio://mlpipeline/v2/artifacts, which TFX cannot write): the run request carries it."""
    fake, endpoint = kfp_server
    assert _deploy(endpoint, package, "--run") == 0
    assert fake.runs["run-1"]["runtime_config"]["pipeline_root"] == "gs://bucket/tfx"


def test_no_cache_runs_the_files_spec_with_every_tasks_cache_off(kfp_server, tmp_path, capsys):
    """--no_cache: KFP's v2beta1 run has no cache switch, so the run carries the file's spec with
    every task's cachingOptions off (kfp.Client's enable_caching=False) and no version reference;
    the version is still uploaded. Without --run it is one line naming the flag."""
    fake, endpoint = kfp_server
    path = tmp_path / "pipeline.yaml"
    tasks = {
        name: {
            "taskInfo": {"name": name},
            "componentRef": {"name": f"comp-{name}"},
            "cachingOptions": {"enableCache": True},
        }
        for name in ("csvexamplegen", "trainer")
    }
    spec = {
        "pipelineInfo": {"name": "penguins-pipeline"},
        "root": {"dag": {"tasks": tasks}},
        "schemaVersion": "2.1.0",
        "sdkVersion": "tfx-1.16.0",
        "deploymentSpec": {},
        "components": {"comp-csvexamplegen": {}, "comp-trainer": {}},
        "defaultPipelineRoot": "gs://bucket/tfx",
    }
    path.write_text(json.dumps(spec))
    assert _deploy(endpoint, str(path), "--run", "--no_cache") == 0
    run = fake.runs["run-1"]
    assert "pipeline_version_reference" not in run or not run["pipeline_version_reference"]
    sent = run["pipeline_spec"]["root"]["dag"]["tasks"]
    assert {name: task["cachingOptions"] for name, task in sent.items()} == {
        "csvexamplegen": {},  # enableCache false: proto3 JSON leaves the default out
        "trainer": {},
    }
    assert run["runtime_config"]["pipeline_root"] == "gs://bucket/tfx"
    assert any(r["path"] == f"{API}/pipelines/upload" for r in fake.requests)
    # Without --no_cache the same file runs its uploaded version, cache settings as compiled.
    assert _deploy(endpoint, str(path), "--run") == 0
    assert fake.runs["run-2"]["pipeline_version_reference"]["pipeline_id"] == "pipeline-1"
    capsys.readouterr()
    assert _deploy(endpoint, str(path), "--no_cache") == 2
    assert "--no_cache applies to the run that --run starts: add --run" in capsys.readouterr().err


def test_failed_run_names_the_failed_task(kfp_server, package, capsys):
    fake, endpoint = kfp_server
    fake.run_states = ["RUNNING", "FAILED"]
    code = _deploy(endpoint, package, "--run", "--wait", "--poll=0.01")
    assert code == run_kubeflow.EXIT_FAILED
    err = capsys.readouterr().err
    assert "run run-1 ended FAILED; failed: Trainer: pod tfx-trainer OOMKilled" in err


def test_rejected_upload_is_one_clear_line(kfp_server, package, capsys):
    fake, endpoint = kfp_server
    fake.reject_upload = "Failed to create a pipeline: invalid pipeline spec"
    assert _deploy(endpoint, package) == run_kubeflow.EXIT_FAILED
    err = capsys.readouterr().err
    assert err.startswith(f"error: uploading {package} at {endpoint} was rejected: HTTP 400")
    assert "invalid pipeline spec" in err


def test_unreachable_endpoint_names_it(package, capsys, tmp_path):
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    with mock.patch.object(kfp.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "context.json")):
        assert _deploy(endpoint, package) == run_kubeflow.EXIT_FAILED
    err = capsys.readouterr().err
    assert f"Kubeflow Pipelines endpoint {endpoint} is unreachable" in err
    assert "--endpoint" in err


def test_missing_endpoint_and_package(package, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv(deploy.ENDPOINT_ENV, raising=False)
    assert run_kubeflow.main(["deploy", f"--package={package}"]) == run_kubeflow.EXIT_FAILED
    assert "no Kubeflow Pipelines endpoint" in capsys.readouterr().err
    missing = tmp_path / "none.yaml"
    assert run_kubeflow.main(["deploy", f"--package={missing}"]) == run_kubeflow.EXIT_BAD_INPUT
    assert "run `compile` first" in capsys.readouterr().err


WORKFLOW = "penguins-x7k2q"


def _node(node_id, name, display, node_type, phase, children=(), **extra) -> dict:
    return {
        "id": node_id,
        "name": f"{WORKFLOW}.root.{name}",
        "displayName": display,
        "type": node_type,
        "phase": phase,
        "children": list(children),
        **extra,
    }


def _penguin_workflow() -> dict:
    """The nodes KFP 2.14.3's Argo compiler makes for three tasks (argocompiler/container.go:
    `<task>-driver` pod, `<task>` DAG, its `executor` pod run unless the driver found a cache
    entry): ImportSchemaGen served from the cache, CsvExampleGen failed in its executor, Pusher
    failed in its driver."""
    nodes = [
        _node("n1", "ImportSchemaGen-driver", "ImportSchemaGen-driver", "Pod", "Succeeded"),
        _node("n2", "ImportSchemaGen", "ImportSchemaGen", "DAG", "Succeeded", ["n3"]),
        _node("n3", "ImportSchemaGen.executor", "executor", "Skipped", "Skipped"),
        _node("n4", "CsvExampleGen-driver", "CsvExampleGen-driver", "Pod", "Succeeded"),
        _node("n5", "CsvExampleGen", "CsvExampleGen", "DAG", "Failed", ["n6"]),
        _node(
            "n6",
            "CsvExampleGen.executor",
            "executor",
            "Pod",
            "Failed",
            message="Error (exit code 1)",
            templateName="system-container-impl",
        ),
        _node(
            "n7",
            "Pusher-driver",
            "Pusher-driver",
            "Pod",
            "Error",
            message="Error (exit code 2)",
            templateName="system-container-driver",
        ),
    ]
    for index, node in enumerate(nodes):
        node["startedAt"] = f"2026-12-04T18:00:{index:02d}Z"
    return {"metadata": {"name": WORKFLOW}, "status": {"nodes": {n["id"]: n for n in nodes}}}


def test_pod_names_are_argos():
    """Argo v3.6.7's v2 pod names (its workflow/util/pod_name_v2_test.go cases; the FNV-1a
    sums computed with Go's hash/fnv)."""
    node = {"id": "1", "name": "nodename", "templateName": "templatename"}
    assert deploy.pod_name({"metadata": {"name": "wfname"}}, node) == (
        "wfname-templatename-1454367246"
    )
    long_workflow, long_template = "w" * 130, "t" * 150
    name = deploy.pod_name(
        {"metadata": {"name": long_workflow}}, {**node, "templateName": long_template}
    )
    assert name == f"{long_workflow}-{long_template}"[:242] + "-1454367246"
    v1 = {"metadata": {"name": "wfname", "annotations": {deploy.POD_NAME_VERSION_ANNOTATION: "v1"}}}
    assert deploy.pod_name(v1, node) == "1"
    executor = _penguin_workflow()["status"]["nodes"]["n6"]
    assert deploy.pod_name(_penguin_workflow(), executor) == (
        f"{WORKFLOW}-system-container-impl-3444939165"
    )


def test_task_outcomes_from_the_workflow():
    outcomes = deploy.task_outcomes(_penguin_workflow())
    assert [(o.name, o.state, o.message) for o in outcomes] == [
        ("ImportSchemaGen", "cached", ""),
        ("CsvExampleGen", "failed", "Error (exit code 1)"),
        ("Pusher", "failed", "driver: Error (exit code 2)"),
    ]
    assert outcomes[1].pod == f"{WORKFLOW}-system-container-impl-3444939165"


def test_the_error_line_of_a_log():
    traceback = (
        "INFO:absl:Running executor\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "components.tfx_components.example_gen.executor.TooManyRejectedRowsError: 1 of 344 CSV "
        "row(s) rejected; all are listed in /minio/x.jsonl:\n"
        "  /data/penguins.csv:11: column 'bill_length_mm': 'x' is not a float\n"
        "F1204 18:01:02.123456      1 main.go:52] failed to execute component: exit status 1\n"
    )
    assert deploy.error_line(traceback) == (
        "components.tfx_components.example_gen.executor.TooManyRejectedRowsError: 1 of 344 CSV "
        "row(s) rejected; all are listed in /minio/x.jsonl:; "
        "/data/penguins.csv:11: column 'bill_length_mm': 'x' is not a float"
    )
    launcher_only = "I1204 18:01:00.1 1 launcher.go:1] start\nF1204 18:01:02.1 1 main.go:52] boom\n"
    assert deploy.error_line(launcher_only) == "boom"
    assert deploy.error_line("just output\n") is None


def test_a_failed_run_names_each_failed_task_with_its_logs_error_line(kfp_server, package, capsys):
    fake, endpoint = kfp_server
    fake.run_states = ["RUNNING", "FAILED"]
    fake.workflow = _penguin_workflow()
    fake.logs[f"{WORKFLOW}-system-container-impl-3444939165"] = (
        "Traceback (most recent call last):\nValueError: row 11 of /data/penguins.csv is bad\n"
    )
    code = _deploy(endpoint, package, "--run", "--wait", "--poll=0.01")
    assert code == run_kubeflow.EXIT_FAILED
    captured = capsys.readouterr()
    assert (
        "failed: CsvExampleGen: ValueError: row 11 of /data/penguins.csv is bad "
        "(Error (exit code 1)); Pusher: no error line in its log (the API server: empty; pass "
        "--kubeconfig (or set KUBECONFIG) to read it from Kubernetes) (driver: Error (exit code 2))"
    ) in captured.err
    assert "tasks: 1 cached, 2 failed" in captured.out
    assert "  ImportSchemaGen: cached" in captured.out
    log_reads = [r for r in fake.requests if r["path"].endswith("/log")]
    assert {r["authorization"] for r in log_reads} == {f"Bearer {TOKEN}"}


REJECTED = "components.tfx_components.example_gen.executor.TooManyRejectedRowsError"


def test_a_failed_tasks_log_the_api_server_cannot_read_is_read_from_kubernetes(
    kfp_server, package, capsys, tmp_path, monkeypatch
):
    """KFP 2.14.3 single-user reads a pod's log at cluster scope and its API server's Role is
    namespaced: the node log endpoint answers 200, then its error. With --kubeconfig, deploy
    reads the pod's `main` log in the Workflow's namespace from Kubernetes (the request shape the
    kubernetes client sends: container=main), and says what each source answered when neither
    has an error line."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    fake, endpoint = kfp_server
    fake.run_states = ["FAILED"]
    fake.workflow = _penguin_workflow()
    fake.workflow["metadata"]["namespace"] = "kubeflow"
    executor = f"{WORKFLOW}-system-container-impl-3444939165"
    fake.logs[executor] = (
        '{"error_message":"pods \\"x\\" is forbidden: cannot get resource \\"pods/log\\" '
        'at the cluster scope"}'
    )
    fake.kube_logs[("kubeflow", executor)] = (
        "I1204 launcher_v2.go:150] running\nTraceback (most recent call last):\n"
        f"{REJECTED}: 1 of 344 rows rejected\n  /data/penguins.csv:11: not a float\n"
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{endpoint}'}}}}]\n"
        "users: [{name: u, user: {token: kube-token}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    code = _deploy(
        endpoint, package, "--run", "--wait", "--poll=0.01", f"--kubeconfig={kubeconfig}"
    )
    assert code == run_kubeflow.EXIT_FAILED
    err = capsys.readouterr().err
    assert (
        f"CsvExampleGen: {REJECTED}: 1 of 344 rows rejected; "
        "/data/penguins.csv:11: not a float (Error (exit code 1))"
    ) in err
    # The driver pod's log is in neither: both answers are named.
    assert (
        "Pusher: no error line in its log (the API server: empty; Kubernetes: 404 Not Found "
        f"reading pod kubeflow/{WORKFLOW}-system-container-driver-"
    ) in err
    kube_reads = [r for r in fake.requests if r["path"].startswith("/api/v1/")]
    assert {r["authorization"] for r in kube_reads} == {"Bearer kube-token"}


def test_a_kubeconfig_that_is_not_there_is_one_line(package, capsys, tmp_path):
    code = _deploy("http://127.0.0.1:9", package, f"--kubeconfig={tmp_path}/nope")
    assert code != 0
    assert f"--kubeconfig {tmp_path}/nope: no such file" in capsys.readouterr().err
