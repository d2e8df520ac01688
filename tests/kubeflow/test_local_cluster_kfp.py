"""Kubeflow Pipelines on the local cluster (`up --kfp`, the `kfp_cluster` fixture): each component
asked through its own API. KFP's API server through its REST API and kfp.Client from this machine
(an upload read back; its bucket on the S3 server); Argo's workflow
controller by its leader lease and its metrics; the MLMD gRPC server by MLMD's own Python client
over gRPC, its tables in MariaDB; the driver's, launcher's and executor's images as the API server
and the controller name them, present in the node's containerd under explicit tags; and a run of
a one-task pipeline, which must succeed per KFP's API with its executor's log in the bucket.

The killed `up --kfp` and what `down` removes: tests/kubeflow/test_local_cluster.py (first test).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from kubeflow.local_cluster import builds, images, kfp, node
from tests.kubeflow.conftest import CLUSTER_PACKAGES
from tests.kubeflow.pods import container_pids
from tests.pipeline_components import CSV_COMPONENTS

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.system_packages(*CLUSTER_PACKAGES, "mariadb-server"),
]


def _status(root: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "kubeflow.local_cluster", "--root", root, "status"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_status_names_the_kfp_url_and_every_component(kfp_cluster):
    status = _status(kfp_cluster.root)
    assert f"kfp: http://{node.NODE_IP}:{kfp.API_NODE_PORT}" in status.splitlines()
    for name in kfp.HOST_DAEMONS:
        assert re.search(rf"^{name}: running \(pid \d+\)$", status, re.M), status
    for name in kfp.DEPLOYMENTS:
        assert f"{name}: 1/1 ready" in status.splitlines(), status
    assert "kfp api: healthy (/apis/v2beta1/healthz)" in status.splitlines()


def test_the_api_server_answers_from_this_machine_and_stores_an_upload(kfp_cluster, tmp_path):
    url = kfp_cluster.info["kfp"]["url"]
    with urllib.request.urlopen(f"{url}/apis/v2beta1/healthz", timeout=10) as response:
        health = json.loads(response.read())
    assert health["multi_user"] is False and health["pipeline_store"] == "database", health
    import kfp as kfp_sdk
    from kfp import compiler

    client = kfp_sdk.Client(host=url)
    names = [e.display_name for e in client.list_experiments().experiments or []]
    assert "Default" in names
    package = str(tmp_path / "hello.yaml")
    compiler.Compiler().compile(_hello_pipeline(_driver_image(kfp_cluster)), package)
    name = f"local-cluster-upload-{int(time.time())}"
    pipeline = client.upload_pipeline(package, pipeline_name=name)
    # Read back through the API: the spec comes from the object store, the rows from MariaDB.
    versions = client.list_pipeline_versions(pipeline.pipeline_id).pipeline_versions
    assert len(versions) == 1
    spec = versions[0].pipeline_spec
    assert spec["pipelineInfo"]["name"] == "hello-local-cluster", spec
    # The bucket is a folder of versitygw's posix backend: the API server made it at start
    # (it checks or creates its bucket and exits when it cannot).
    bucket = os.path.join(kfp.KfpLayout(kfp_cluster.layout).s3_root, kfp.BUCKET)
    assert os.path.isdir(bucket), bucket


def _driver_image(kfp_cluster) -> str:
    return kfp_cluster.info["kfp"]["images"]["kfp-driver"]


def _hello_pipeline(image: str):
    """A one-task pipeline whose task runs a program of the driver's image (a static binary that
    exits 0 with -help): no other image is needed for the task."""
    from kfp import dsl

    @dsl.container_component
    def hello():
        return dsl.ContainerSpec(image=image, command=["/bin/driver"], args=["-help"])

    @dsl.pipeline(name="hello-local-cluster")
    def pipeline():
        hello()

    return pipeline


def test_argo_controller_holds_its_lease_and_serves_metrics(kfp_cluster):
    kube = kfp_cluster.kube()
    pods = kube.get("-n", kfp.NAMESPACE, "pods", "-l", "app=workflow-controller")["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]
    name = pods[0]["metadata"]["name"]
    lease = kube.get("-n", kfp.NAMESPACE, "lease", "workflow-controller")
    assert lease["spec"]["holderIdentity"] == name
    # Argo 3.6 serves its metrics over TLS on 9090; through the API server's pod proxy.
    metrics = kube.kubectl(
        "get", "--raw", f"/api/v1/namespaces/{kfp.NAMESPACE}/pods/https:{name}:9090/proxy/metrics"
    )
    assert re.search(r"^argo_workflows_\w+", metrics, re.M), metrics[:2000]
    args = pods[0]["spec"]["containers"][0]["args"]
    assert args[args.index("--executor-image") + 1] == kfp_cluster.info["kfp"]["images"]["argoexec"]


def test_mlmd_grpc_serves_mlmd_on_mariadb(kfp_cluster):
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.MetadataStoreClientConfig(host=node.NODE_IP, port=kfp.MLMD_PORT)
    store = metadata_store.MetadataStore(config)
    type_name = f"tfx_scaleout.Probe{int(time.time() * 1000)}"
    artifact_type = metadata_store_pb2.ArtifactType(name=type_name)
    artifact_type.properties["size"] = metadata_store_pb2.INT
    type_id = store.put_artifact_type(artifact_type)
    artifact = metadata_store_pb2.Artifact(type_id=type_id, uri="s3://mlpipeline/probe")
    artifact.properties["size"].int_value = 7
    [artifact_id] = store.put_artifacts([artifact])
    [read] = store.get_artifacts_by_id([artifact_id])
    assert (read.uri, read.properties["size"].int_value) == ("s3://mlpipeline/probe", 7)
    # The rows are MariaDB's, written through the user the pods use (mysql_native_password).
    with open(kfp.KfpLayout(kfp_cluster.layout).credentials) as handle:
        password = json.load(handle)["db_password"]
    query = (
        f"SELECT name FROM {kfp.MLMD_DB}.Type WHERE name = '{type_name}';"
        f"SELECT plugin FROM mysql.user WHERE user = '{kfp.DB_USER}';"
    )
    result = subprocess.run(
        ["mariadb", f"--host={node.NODE_IP}", f"--user={kfp.DB_USER}", "-N", "-e", query],
        env={"MYSQL_PWD": password, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [type_name, "mysql_native_password"], result.stdout


def test_the_driver_and_launcher_images_have_explicit_tags_present_in_containerd(kfp_cluster):
    kube = kfp_cluster.kube()
    deployment = kube.get("-n", kfp.NAMESPACE, "deployment", "ml-pipeline")
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    references = kfp_cluster.info["kfp"]["images"]
    assert env["V2_DRIVER_IMAGE"] == references["kfp-driver"]
    assert env["V2_LAUNCHER_IMAGE"] == references["kfp-launcher"]
    runtime = images.Containerd(kfp_cluster.layout.containerd_socket)
    for name in ("kfp-driver", "kfp-launcher", "argoexec"):
        reference = references[name]
        tag = reference.rsplit(":", 1)[1]
        assert tag != "latest" and re.fullmatch(r"[0-9a-f]{16}", tag), reference
        assert runtime.config_digest(reference) == images.podman_image_id(reference), reference


def test_a_run_succeeds_and_its_executor_log_lands_in_the_bucket(kfp_cluster, tmp_path):
    """A run of a one-task pipeline through everything a v2 run needs: Argo's controller
    schedules the root DAG driver and the task's driver (KFP's driver image, MLMD on MariaDB,
    the pipeline-runner account, argoexec's emissary), the launcher runs the task's command and
    uploads its log to the pipeline root (minio://mlpipeline/v2/artifacts on versitygw), and the
    persistence agent reports the run SUCCEEDED to the API server."""
    import kfp as kfp_sdk
    from kfp import compiler

    client = kfp_sdk.Client(host=kfp_cluster.info["kfp"]["url"])
    package = str(tmp_path / "hello.yaml")
    compiler.Compiler().compile(_hello_pipeline(_driver_image(kfp_cluster)), package)
    run = client.create_run_from_pipeline_package(package, arguments={})
    result = client.wait_for_run_completion(run.run_id, timeout=300, sleep_duration=3)
    kube = kfp_cluster.kube()
    workflows = kube.get("-n", kfp.NAMESPACE, "workflows", "-l", f"pipeline/runid={run.run_id}")
    phases = {
        n["displayName"]: (n["phase"], n.get("message", ""))
        for w in workflows["items"]
        for n in w.get("status", {}).get("nodes", {}).values()
    }
    assert result.state == "SUCCEEDED", phases
    assert {phases[name][0] for name in ("root-driver", "hello-driver", "hello")} == {"Succeeded"}
    # The task's output (the driver's usage text, from its -help) uploaded by the launcher.
    bucket = os.path.join(kfp.KfpLayout(kfp_cluster.layout).s3_root, kfp.BUCKET)
    logs = subprocess.run(
        ["find", bucket, "-path", f"*{run.run_id}*", "-name", "executor-logs", "-type", "f"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert len(logs) == 1, logs
    with open(logs[0]) as handle:
        assert "-mlmd_server_address" in handle.read()


def _failed_pod_logs(cluster) -> str:
    """The last lines of every failed pod's containers in KFP's namespace (for a failed run)."""
    kube = cluster.kube()
    lines = []
    for pod in kube.get("-n", kfp.NAMESPACE, "pods")["items"]:
        if pod.get("status", {}).get("phase") != "Failed":
            continue
        name = pod["metadata"]["name"]
        for container in pod["spec"]["containers"]:
            log = kube.kubectl(
                "-n",
                kfp.NAMESPACE,
                "logs",
                name,
                "-c",
                container["name"],
                "--tail=25",
                check=False,
            )
            lines.append(f"--- {name}/{container['name']}:\n{log}")
    return "\n".join(lines)


PENGUIN_PIPELINE = "penguins-on-the-local-cluster"  # [a-z0-9-]: TFX's KFP v2 rule
# The compiled file's tasks: the components and ExampleGen's span driver task.
PENGUIN_TASKS = {*CSV_COMPONENTS, "CsvExampleGen-span"}
UNCACHED_TASKS = {"CsvExampleGen-span"}  # ExampleGen's driver: compiled with enableCache false


@dataclasses.dataclass(frozen=True)
class PenguinRun:
    package: str
    serving: str
    url: str
    run_id: str
    output: str  # deploy's stdout + stderr
    stdout: str
    seconds: float
    task_pods: dict  # the run's task pods (those with KFP's launcher): {pod: {container: image}}


def _deploy(package: str, url: str, *flags: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    deployed = subprocess.run(
        [sys.executable, "kubeflow/run_kubeflow.py", "deploy", f"--package={package}"]
        + ["--run", "--wait", "--timeout=1400", "--poll=3", f"--endpoint={url}", *flags],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=PROJECT_ROOT,
    )
    return deployed, time.monotonic() - started


def _run_id(output: str) -> str:
    found = re.search(r"^run ([0-9a-f-]{36}) started$", output, re.M)
    assert found, output
    return found.group(1)


def _outcomes(output: str) -> dict[str, str]:
    """deploy --wait's per-task lines after `tasks: ...`: {task: cached|ran|failed...}."""
    tail = output[output.rindex("tasks: ") :]
    return dict(re.findall(r"^  (\S+): (cached|ran|failed)\b", tail, re.M))


@pytest.fixture(scope="module")
def penguin_run(kfp_cluster, tmp_path_factory) -> PenguinRun:
    """`run_kubeflow.py compile` with KFP's own store as pipeline root (the launcher moves the
    artifacts, kubeflow/run_executor.py maps them) and no resource requests (the node has 2
    CPUs), the serving directory on the shared folder's claim in KFP's namespace; then one
    `deploy --run --wait`: compiled and run once for the tests of this module that read it (the
    penguin run, its cache hit, pipeline.mlmd on it, a run of it on bad data)."""
    from kubeflow import run_kubeflow

    image = kfp_cluster.info["image"]
    shared = kfp_cluster.info["shared"]
    folder = tmp_path_factory.mktemp("penguins-on-kfp")
    serving = os.path.join(shared, f"serving-{folder.name}")
    # The task pods' user may not create folders in the shared folder's root (their Pusher
    # failed with PermissionDenied): the serving folder is made writable for them first, as a
    # cluster's admin prepares a volume's folder (or sets fsGroup) for pipelines' pods.
    os.makedirs(serving)
    os.chmod(serving, 0o777)
    package = str(folder / "penguins.yaml")
    sizes = [f"--{k}_{s}=0" for k in ("beam", "trainer", "default") for s in ("cpu", "memory_gb")]
    compiled = run_kubeflow.main(
        [
            "compile",
            "--pipeline_root=minio://mlpipeline/v2/artifacts",
            f"--image={image}",
            f"--gpu_image={image}",
            "--allow_unpinned_images",
            "--pvc_name=tfx-scaleout-shared",
            f"--mount_path={shared}",
            f"--serving_model_dir={serving}",
            f"--pipeline_name={PENGUIN_PIPELINE}",
            "--gpus=0",
            "--epochs=1",
            *sizes,
            f"--output={package}",
        ]
    )
    assert compiled == 0
    url = kfp_cluster.info["kfp"]["url"]
    deployed, seconds = _deploy(package, url)
    output = deployed.stdout + deployed.stderr
    assert deployed.returncode == 0, (
        deployed.stdout[-2000:] + deployed.stderr[-2000:] + _failed_pod_logs(kfp_cluster)
    )
    run_id = _run_id(output)
    # The task pods now, while the run's Workflow is there (the API server deletes it, and so
    # its pods, once the persistence agent's TTL has passed).
    kube = kfp_cluster.kube()
    (workflow,) = kube.get("-n", kfp.NAMESPACE, "workflows", "-l", f"pipeline/runid={run_id}")[
        "items"
    ]
    name = workflow["metadata"]["name"]
    pods = kube.get("-n", kfp.NAMESPACE, "pods", "-l", f"workflows.argoproj.io/workflow={name}")
    task_pods = {
        pod["metadata"]["name"]: {c["name"]: c["image"] for c in pod["spec"]["containers"]}
        for pod in pods["items"]
        if any(c["name"] == "kfp-launcher" for c in pod["spec"].get("initContainers", []))
    }
    return PenguinRun(package, serving, url, run_id, output, deployed.stdout, seconds, task_pods)


def test_the_penguin_pipeline_runs_to_a_pushed_model_on_the_minio_root(kfp_cluster, penguin_run):
    """`deploy --run --wait` reaches SUCCEEDED and says every task ran; every task ran the
    project's image; the pushed model is in the bucket (the PushedModel artifact the launcher
    uploaded) and in the serving directory."""
    import kfp as kfp_sdk

    run = kfp_sdk.Client(host=penguin_run.url).get_run(penguin_run.run_id)
    assert run.state == "SUCCEEDED"
    print(f"penguin run: {penguin_run.seconds:.0f}s")
    assert _outcomes(penguin_run.stdout) == dict.fromkeys(PENGUIN_TASKS, "ran"), penguin_run.stdout
    assert "INFO:" not in penguin_run.output  # each progress line once, on stdout
    tasks = penguin_run.task_pods
    assert len(tasks) == len(PENGUIN_TASKS), tasks
    assert {containers["main"] for containers in tasks.values()} == {kfp_cluster.info["image"]}
    bucket = os.path.join(kfp.KfpLayout(kfp_cluster.layout).s3_root, kfp.BUCKET)
    pushed = subprocess.run(
        ["find", bucket, "-path", f"*{penguin_run.run_id}*Pusher*", "-name", "saved_model.pb"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert len(pushed) == 1, pushed
    (version,) = os.listdir(penguin_run.serving)
    assert os.path.getsize(
        os.path.join(penguin_run.serving, version, "saved_model.pb")
    ) == os.path.getsize(pushed[0])


def _api_json(url: str, path: str, **query) -> dict:
    address = f"{url}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(address, timeout=30) as response:
        return json.loads(response.read())


def _mlmd_executions(run_id: str) -> dict[str, tuple[str, str]]:
    """{task: (MLMD state, cache_fingerprint)} of a run's container executions, from the
    cluster's MLMD over gRPC."""
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.MetadataStoreClientConfig(host=node.NODE_IP, port=kfp.MLMD_PORT)
    store = metadata_store.MetadataStore(config)
    context = store.get_context_by_type_and_name("system.PipelineRun", run_id)
    assert context is not None, run_id
    found = {}
    for execution in store.get_executions_by_context(context.id):
        properties = execution.custom_properties
        if "task_name" not in properties or "cache_fingerprint" not in properties:
            continue
        state = metadata_store_pb2.Execution.State.Name(execution.last_known_state)
        found[properties["task_name"].string_value] = (
            state,
            properties["cache_fingerprint"].string_value,
        )
    return found


def test_a_second_run_of_the_same_file_is_served_from_kfps_cache(kfp_cluster, penguin_run):
    """The same compiled file again: per KFP's API every cacheable task is a cache hit (its
    `executor` pod skipped on the driver's cached-decision, no new cache entry in the API
    server's task store), MLMD records those executions CACHED with the first run's
    fingerprints, only ExampleGen's uncached driver task runs, nothing is pushed twice, and
    `deploy --wait` says so per task."""
    deployed, seconds = _deploy(penguin_run.package, penguin_run.url)
    output = deployed.stdout + deployed.stderr
    assert deployed.returncode == 0, output[-3000:] + _failed_pod_logs(kfp_cluster)
    print(f"cached penguin run: {seconds:.0f}s")
    run_id = _run_id(output)
    expected = {t: "ran" if t in UNCACHED_TASKS else "cached" for t in PENGUIN_TASKS}
    assert _outcomes(deployed.stdout) == expected, output
    assert re.search(r"^tasks: (9 cached, 1 ran|1 ran, 9 cached)$", deployed.stdout, re.M), output
    # KFP's API: the run's Workflow (v1beta1 GetRun) has every cacheable task's executor pod
    # Skipped; the API server's cache entries (v1alpha1 ListTasks, what the driver looks up by
    # fingerprint) hold one per task of the first run and none of this one.
    from kubeflow import deploy

    workflow = json.loads(
        _api_json(penguin_run.url, f"/apis/v1beta1/runs/{run_id}")["pipeline_runtime"][
            "workflow_manifest"
        ]
    )
    assert {o.name: o.state for o in deploy.task_outcomes(workflow)} == expected
    nodes = workflow["status"]["nodes"].values()
    skipped = [n for n in nodes if n["displayName"] == "executor" and n["phase"] == "Skipped"]
    assert len(skipped) == len(PENGUIN_TASKS - UNCACHED_TASKS), skipped
    name = f"pipeline/{PENGUIN_PIPELINE}"
    predicate = {"key": "pipelineName", "op": "EQUALS", "string_value": name}
    entries = _api_json(
        penguin_run.url, "/apis/v1alpha1/tasks", filter=json.dumps({"predicates": [predicate]})
    ).get("tasks", [])
    by_run: dict[str, list[str]] = {}
    for entry in entries:
        by_run.setdefault(entry["runId"], []).append(entry["fingerprint"])
    assert len(by_run.get(penguin_run.run_id, [])) == len(PENGUIN_TASKS - UNCACHED_TASKS), by_run
    assert run_id not in by_run, by_run
    # MLMD: the same fingerprints, this run's executions CACHED.
    first, second = _mlmd_executions(penguin_run.run_id), _mlmd_executions(run_id)
    cacheable = PENGUIN_TASKS - UNCACHED_TASKS
    assert {t: s for t, (s, _) in second.items()} == dict.fromkeys(cacheable, "CACHED"), second
    assert {t: f for t, (_, f) in second.items()} == {t: first[t][1] for t in cacheable}
    assert set(by_run[penguin_run.run_id]) == {first[t][1] for t in cacheable}
    assert len(os.listdir(penguin_run.serving)) == 1  # nothing pushed twice


def _mlmd_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.mlmd", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=PROJECT_ROOT,
    )


def test_pipeline_mlmd_reads_the_run_from_the_api_server_and_mlmd(
    kfp_cluster, penguin_run, tmp_path
):
    """`python -m pipeline.mlmd --kfp_host URL --grpc_host NODE_IP`: the runs the real API
    server lists, their records from the real MLMD store (the gRPC server KFP's driver and
    launcher wrote to): `runs` lists the penguin run with its ten tasks executed, `lineage` of
    its Examples reaches the pushed model, `report` writes the run's page."""
    store = [
        f"--kfp_host={penguin_run.url}",
        f"--grpc_host={node.NODE_IP}",
        f"--grpc_port={kfp.MLMD_PORT}",
        f"--pipeline={PENGUIN_PIPELINE}",
    ]
    started = time.monotonic()
    listed = _mlmd_cli(*store, "--json", "runs")
    assert listed.returncode == 0, listed.stderr
    rows = {row["run"]: row for row in json.loads(listed.stdout)}
    row = rows[penguin_run.run_id]
    assert (row["status"], row["executed"], row["failed"]) == ("COMPLETE", 10, 0), row
    found = _mlmd_cli(*store, "--json", "artifacts", penguin_run.run_id, "--type", "Examples")
    assert found.returncode == 0, found.stderr
    # ExampleGen's output (Transform's transformed examples are Examples too).
    (examples,) = [a for a in json.loads(found.stdout) if "/CsvExampleGen/" in a["uri"]]
    traced = _mlmd_cli(*store, "lineage", str(examples["artifact"]))
    assert traced.returncode == 0, traced.stderr
    downstream = traced.stdout.split("downstream (to pushed models)", 1)[1]
    assert re.search(r"^  Pusher \(execution \d+, COMPLETE", downstream, re.M), traced.stdout
    assert re.search(r"-> PushedModel #\d+  minio://mlpipeline/", downstream), traced.stdout
    page = str(tmp_path / "report.html")
    reported = _mlmd_cli(*store, "report", penguin_run.run_id, "--out", page)
    assert reported.returncode == 0, reported.stderr
    with open(page) as handle:
        html = handle.read()
    assert penguin_run.run_id in html and "PushedModel" in html
    # The API server alone (KFP 2.14.3: its tasks are the Workflow's nodes, without artifacts).
    alone = _mlmd_cli(f"--kfp_host={penguin_run.url}", "runs")
    assert alone.returncode == 2 and "add --grpc_host HOST --grpc_port PORT" in alone.stderr, (
        alone.stdout[-2000:] + alone.stderr
    )
    print(f"pipeline.mlmd runs, artifacts, lineage, report: {time.monotonic() - started:.0f}s")


def test_a_run_on_bad_data_fails_in_example_gen_with_its_error_line(
    kfp_cluster, penguin_run, penguins_csv
):
    """The penguin file on a CSV with a bad number in row 11: ExampleGen (the first task after
    the cached schema import and the span driver) fails, and `deploy --run --wait` ends with its
    executor's own error, the file, line, column and value, read from the pod's log (the API
    server's node log endpoint cannot in single-user mode; deploy's --kubeconfig can)."""
    data = os.path.join(kfp_cluster.info["shared"], f"bad-data-{int(time.time())}")
    os.makedirs(data)
    with open(penguins_csv) as handle:
        lines = handle.read().splitlines()
    assert lines[10].startswith("Adelie,Torgersen,")
    cells = lines[10].split(",")
    cells[2] = "not-a-number"  # bill_length_mm
    lines[10] = ",".join(cells)
    bad = os.path.join(data, "penguins.csv")
    with open(bad, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    # KFP 2.14.3 single-user reads a pod's log at cluster scope with a namespaced Role (the
    # node log endpoint answers `forbidden`): deploy reads it from Kubernetes with --kubeconfig.
    deployed, seconds = _deploy(
        penguin_run.package,
        penguin_run.url,
        f"--param=data_root={data}",
        f"--kubeconfig={kfp_cluster.kubeconfig}",
    )
    print(f"run on bad data: {seconds:.0f}s")
    assert deployed.returncode == 1, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    error = deployed.stderr
    assert _outcomes(deployed.stdout)["CsvExampleGen"] == "failed", deployed.stdout
    assert re.search(r"ended FAILED.*; failed: CsvExampleGen: \S*TooManyRejectedRowsError: ", error)
    assert f"{bad}:11: column 'bill_length_mm': 'not-a-number' is not a float" in error, error
    # Without a kubeconfig: what the API server itself answered for that pod (200 and an empty
    # body; its own log says `forbidden ... at the cluster scope`), and the flag that reads it.
    run_id = _run_id(deployed.stdout + deployed.stderr)
    from kubeflow import deploy

    connection = deploy.Connection(client=None, endpoint=penguin_run.url)
    workflow = deploy.run_workflow(connection, run_id)
    assert workflow is not None
    (failed,) = [o for o in deploy.task_outcomes(workflow) if o.state == "failed"]
    (alone,) = deploy.with_error_lines(connection, run_id, [failed])
    assert alone.error == (
        "no error line in its log (the API server: empty; pass --kubeconfig (or set "
        "KUBECONFIG) to read it from Kubernetes)"
    ), alone


def _sleeper_package(image: str, path: str, name: str) -> str:
    """A one-task pipeline whose task sleeps in the project's image (uncached)."""
    from kfp import compiler, dsl

    @dsl.container_component
    def sleeper():
        return dsl.ContainerSpec(image=image, command=["sleep"], args=["3600"])

    @dsl.pipeline(name=name)
    def pipeline():
        sleeper().set_caching_options(False)

    compiler.Compiler().compile(pipeline, path)
    return path


def _run_pods(kube, run_id: str) -> list[dict]:
    return kube.get("-n", kfp.NAMESPACE, "pods", "-l", f"pipeline/runid={run_id}")["items"]


def _running_executor(kube, run_id: str, deadline: float) -> dict:
    """The run's executor pod (KFP's launcher in front of `main`) once `main` runs."""
    while time.monotonic() < deadline:
        for pod in _run_pods(kube, run_id):
            launched = any(
                c["name"] == "kfp-launcher" for c in pod["spec"].get("initContainers", [])
            )
            statuses = {c["name"]: c for c in pod.get("status", {}).get("containerStatuses", [])}
            if launched and "running" in statuses.get("main", {}).get("state", {}):
                return pod
        time.sleep(1)
    raise AssertionError(f"no running executor pod of run {run_id}")


def test_deleting_a_running_run_stops_its_pods(kfp_cluster, tmp_path):
    """A run whose task sleeps in the project's image, deleted through KFP's API while the task
    runs: the API server deletes its Workflow, and its pods are gone within 60 s."""
    import kfp as kfp_sdk

    client = kfp_sdk.Client(host=kfp_cluster.info["kfp"]["url"])
    package = _sleeper_package(
        kfp_cluster.info["image"], str(tmp_path / "sleeper.yaml"), "sleeper-deleted"
    )
    started = time.monotonic()
    run = client.create_run_from_pipeline_package(package, arguments={})
    kube = kfp_cluster.kube()
    pod = _running_executor(kube, run.run_id, time.monotonic() + 300)
    client.delete_run(run.run_id)
    deleted = time.monotonic()
    while _run_pods(kube, run.run_id) and time.monotonic() - deleted < 60:
        time.sleep(1)
    left = [p["metadata"]["name"] for p in _run_pods(kube, run.run_id)]
    assert not left, f"pods of the deleted run still there after 60 s: {left}"
    assert not kube.get("-n", kfp.NAMESPACE, "workflows", "-l", f"pipeline/runid={run.run_id}")[
        "items"
    ]
    assert not container_pids(pod, "main") if os.path.isdir("/sys/fs/cgroup/pids") else True
    print(
        f"deleted run: its pods gone {time.monotonic() - deleted:.0f}s after the delete, "
        f"{time.monotonic() - started:.0f}s in all"
    )


def test_a_task_killed_by_the_node_fails_the_run_and_deploy_names_it(kfp_cluster, tmp_path):
    """`kill -9` of every process of a running task's main container from the node (what the
    kernel's OOM killer does to a container over its limit): the run ends FAILED instead of
    hanging, and `deploy --run --wait` exits 1 naming the task and its exit code."""
    package = _sleeper_package(
        kfp_cluster.info["image"], str(tmp_path / "sleeper.yaml"), "sleeper-killed"
    )
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "kubeflow/run_kubeflow.py", "deploy", f"--package={package}", "--run"]
        + ["--wait", "--poll=2", "--timeout=600", f"--endpoint={kfp_cluster.info['kfp']['url']}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        kube = kfp_cluster.kube()
        run_id = None
        deadline = time.monotonic() + 300
        while run_id is None and time.monotonic() < deadline and process.poll() is None:
            time.sleep(1)
            runs = kube.get("-n", kfp.NAMESPACE, "workflows")["items"]
            run_id = next(
                (
                    w["metadata"]["labels"]["pipeline/runid"]
                    for w in runs
                    if w["metadata"]["name"].startswith("sleeper-killed")
                ),
                None,
            )
        assert run_id, "no Workflow of the run"
        pod = _running_executor(kube, run_id, time.monotonic() + 300)
        pids = container_pids(pod, "main")
        assert pids, pod["metadata"]["name"]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    print(f"killed task: deploy --wait ended {time.monotonic() - started:.0f}s after its start")
    assert process.returncode == 1, stdout[-3000:] + stderr[-3000:]
    assert re.search(r"ended FAILED.*; failed: sleeper: .*exit code 137", stderr), stderr
    assert re.search(r"^  sleeper: failed", stdout, re.M), stdout


def test_runs_pods_can_claim_the_shared_folder_in_kfps_namespace(tmp_path):
    """The shared folder's claim exists in KFP's namespace too (runs' pods are there; a claim is
    namespaced), on its own PersistentVolume (a volume binds one claim), both removable by
    KFP's labels / name (cluster.remove_kfp)."""
    from collections import defaultdict

    from kubeflow.local_cluster import addons

    references: dict = defaultdict(lambda: "localhost/x:1")
    keys = {"db_password": "p", "s3_access_key": "a", "s3_secret_key": "s"}
    documents = list(yaml.safe_load_all(kfp.manifests(references, keys, str(tmp_path))))
    (volume,) = [d for d in documents if d["kind"] == "PersistentVolume"]
    (claim,) = [d for d in documents if d["kind"] == "PersistentVolumeClaim"]
    assert volume["metadata"]["name"] == kfp.SHARED_VOLUME != addons.SHARED_PVC
    assert volume["spec"]["hostPath"]["path"] == str(tmp_path)
    assert volume["spec"]["claimRef"] == {"namespace": kfp.NAMESPACE, "name": addons.SHARED_PVC}
    assert claim["metadata"]["namespace"] == kfp.NAMESPACE
    assert claim["spec"]["volumeName"] == kfp.SHARED_VOLUME
    assert kfp.LABELS.items() <= claim["metadata"]["labels"].items()
    # The default namespace's pair is unchanged.
    base = list(yaml.safe_load_all(addons.shared_volume_manifests(str(tmp_path), "img")))
    assert [d["metadata"]["name"] for d in base[:2]] == [addons.SHARED_PVC] * 2
    assert base[1]["metadata"]["namespace"] == "default"


def test_the_vendored_manifests_are_the_pinned_releases_files():
    """Each document of manifests/argo-v3.6.7.yaml and kfp-2.14.3.yaml is, byte for byte, the file
    its `# source:` line names in the module the programs are built from."""
    modules = {
        "argo-v3.6.7.yaml": builds.module_dir(builds.ARGO_MODULE, builds.ARGO_VERSION),
        "kfp-2.14.3.yaml": builds.module_dir("github.com/kubeflow/pipelines", builds.kfp_version())
        + "/manifests/kustomize",
    }
    for name, root in modules.items():
        with open(f"{kfp.MANIFESTS}/{name}") as handle:
            parts = handle.read().split("---\n# source: ")[1:]
        assert parts, name
        for part in parts:
            source, body = part.split("\n", 1)
            with open(f"{root}/{source}") as handle:
                upstream = handle.read()
            assert body.rstrip("\n") == upstream.rstrip("\n"), (name, source)
