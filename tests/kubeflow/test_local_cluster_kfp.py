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

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from kubeflow.local_cluster import builds, images, kfp, node
from tests.kubeflow.conftest import CLUSTER_PACKAGES

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


def test_the_penguin_pipeline_runs_to_a_pushed_model_on_the_minio_root(kfp_cluster, tmp_path):
    """`run_kubeflow.py compile` with KFP's own store as pipeline root (the launcher moves the
    artifacts, kubeflow/run_executor.py maps them) and no resource requests (the node has 2
    CPUs), the serving directory on the shared folder's claim in KFP's namespace; `deploy --run
    --wait` reaches SUCCEEDED; every task ran the project's image; the pushed model is in the
    bucket (the PushedModel artifact the launcher uploaded) and in the serving directory."""
    from kubeflow import run_kubeflow

    image = kfp_cluster.info["image"]
    shared = kfp_cluster.info["shared"]
    serving = os.path.join(shared, f"serving-{tmp_path.name}")
    # The task pods' user may not create folders in the shared folder's root (their Pusher
    # failed with PermissionDenied): the serving folder is made writable for them first, as a
    # cluster's admin prepares a volume's folder (or sets fsGroup) for pipelines' pods.
    os.makedirs(serving)
    os.chmod(serving, 0o777)
    package = str(tmp_path / "penguins.yaml")
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
            "--pipeline_name=penguins-on-the-local-cluster",  # [a-z0-9-]: TFX's KFP v2 rule
            "--gpus=0",
            "--epochs=1",
            *sizes,
            f"--output={package}",
        ]
    )
    assert compiled == 0
    url = kfp_cluster.info["kfp"]["url"]
    deployed = subprocess.run(
        [sys.executable, "kubeflow/run_kubeflow.py", "deploy", f"--package={package}"]
        + ["--run", "--wait", "--timeout=1400", "--poll=5", f"--endpoint={url}"],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=PROJECT_ROOT,
    )
    assert deployed.returncode == 0, (
        deployed.stdout[-2000:] + deployed.stderr[-2000:] + _failed_pod_logs(kfp_cluster)
    )
    run_id = re.search(r"run ([0-9a-f-]{36})", deployed.stdout + deployed.stderr)
    assert run_id, deployed.stdout
    import kfp as kfp_sdk

    run = kfp_sdk.Client(host=url).get_run(run_id.group(1))
    assert run.state == "SUCCEEDED"
    kube = kfp_cluster.kube()
    (workflow,) = kube.get(
        "-n", kfp.NAMESPACE, "workflows", "-l", f"pipeline/runid={run_id.group(1)}"
    )["items"]
    name = workflow["metadata"]["name"]
    pods = kube.get("-n", kfp.NAMESPACE, "pods", "-l", f"workflows.argoproj.io/workflow={name}")
    tasks = {
        pod["metadata"]["name"]: {c["name"]: c["image"] for c in pod["spec"]["containers"]}
        for pod in pods["items"]
        if any(c["name"] == "kfp-launcher" for c in pod["spec"].get("initContainers", []))
    }
    # ImportSchemaGen, CsvExampleGen and its driver task, StatisticsGen, ExampleValidator,
    # Transform, Trainer, BaselineModel, Evaluator, Pusher.
    assert len(tasks) == 10, tasks
    assert {containers["main"] for containers in tasks.values()} == {image}, tasks
    bucket = os.path.join(kfp.KfpLayout(kfp_cluster.layout).s3_root, kfp.BUCKET)
    pushed = subprocess.run(
        ["find", bucket, "-path", f"*{run_id.group(1)}*Pusher*", "-name", "saved_model.pb"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert len(pushed) == 1, pushed
    (version,) = os.listdir(serving)
    assert os.path.getsize(os.path.join(serving, version, "saved_model.pb")) == os.path.getsize(
        pushed[0]
    )


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
