"""Every Kubernetes object this project produces, created through a real kube-apiserver with the
vendored CRDs installed (the `kube` fixture): what `run_kubeflow.py manifests` prints for each
launcher variant, the objects the launchers create (owner reference, service account, GPU
pool, volume), the shipped runtimes and RBAC files. Each goes through a server-side dry run and
then a real create, so the server's defaulting, structural-schema pruning and the CRDs' CEL
rules (x-kubernetes-validations) decide; whatever the server drops or changes of what was sent
fails the test (what it adds, its defaults, is fine)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
import yaml

from components.training import cluster, kubernetes_job, tfjob, trainjob
from components.training.settings import GpuPool, Resources, TFJobConfig, Toleration, TrainJobConfig
from kubeflow import run_kubeflow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
IMAGE = "registry.example.com/tfx-scaleout@sha256:" + "1" * 64
GPU_IMAGE = "registry.example.com/tfx-scaleout-gpu:1.0@sha256:" + "2" * 64
BASE = ["--pipeline_root=gs://bucket/tfx", f"--image={IMAGE}", f"--gpu_image={GPU_IMAGE}"]
# The metadata the server writes itself.
SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")

# run_kubeflow.py manifests, one variant per launcher, strategy and option that shapes a field.
VARIANTS = {
    "tfjob-mwms": ["--strategy=multi_worker_mirrored", "--workers=3", "--job_delete=always"],
    "tfjob-ps-gang-pvc-pool": [
        "--strategy=parameter_server",
        "--workers=2",
        "--ps=2",
        "--job_namespace=ml",
        "--job_service_account=trainer",
        "--gang_scheduling=coscheduling",
        "--pvc_name=pipeline-root",
        "--mount_path=/mnt/pipeline",
        "--node_selector=cloud.google.com/gke-accelerator=nvidia-l4",
        "--toleration=nvidia.com/gpu",
        "--toleration=dedicated=gpu:NoExecute",
        "--job_deadline_seconds=3600",
    ],
    "tfjob-volcano-cpu": [
        "--strategy=multi_worker_mirrored",
        "--workers=2",
        "--gpus=0",
        "--gang_scheduling=volcano",
        "--worker_cpu=2.5",
        "--worker_memory_gb=0.5",
    ],
    "trainjob-mwms": ["--launcher=trainjob", "--strategy=multi_worker_mirrored", "--workers=2"],
    "trainjob-ps-gang-pvc-pool": [
        "--launcher=trainjob",
        "--strategy=parameter_server",
        "--workers=2",
        "--ps=1",
        "--job_namespace=team-a",
        "--job_service_account=trainer",
        "--gang_scheduling=coscheduling",
        "--pvc_name=pipeline-root",
        "--mount_path=/mnt/pipeline",
        "--node_selector=pool=gpu",
        "--worker_cpu=6",
        "--worker_memory_gb=24",
    ],
    "trainjob-cluster-runtime-volcano": [
        "--launcher=trainjob",
        "--strategy=parameter_server",
        "--workers=3",
        "--ps=2",
        "--trainjob_runtime_kind=ClusterTrainingRuntime",
        "--trainjob_runtime=team-tf-ps",
        "--gang_scheduling=volcano",
        "--gpus=2",
    ],
    "trainjob-cluster-runtime-cpu": [
        "--launcher=trainjob",
        "--strategy=multi_worker_mirrored",
        "--workers=4",
        "--trainjob_runtime_kind=ClusterTrainingRuntime",
        "--gpus=0",
    ],
}


def _namespace(kube, name: str) -> str:
    from kubernetes.client.exceptions import ApiException

    try:
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ApiException as error:
        assert error.status == 409, error
    return name


def _without_server_metadata(stored: dict) -> dict:
    stored = dict(stored, metadata=dict(stored["metadata"]))
    for key in SERVER_METADATA:
        stored["metadata"].pop(key, None)
    return stored


def create_as_sent(kube, document: dict, namespace: str) -> dict:
    """Dry run, then create: both hold all of `document` and agree; returns the stored object.
    A cluster-scoped object is deleted again (names repeat across variants)."""
    sent = yaml.safe_load(yaml.safe_dump(document))  # as kubectl apply -f reads it
    dry = kube.apply(sent, namespace, dry_run=True)
    difference = trainjob.first_difference(sent, dry)
    assert difference is None, f"dry run of {document['kind']}: the server changed {difference}"
    stored = kube.apply(sent, namespace)
    difference = trainjob.first_difference(sent, stored)
    assert difference is None, f"{document['kind']}: the server changed {difference}"
    assert _without_server_metadata(dry) == _without_server_metadata(stored)
    if not kube.is_namespaced(sent["apiVersion"], sent["kind"]):
        kube.delete(sent["apiVersion"], sent["kind"], sent["metadata"]["name"])
    return stored


def _printed(capsys, flags: list[str]) -> list[dict]:
    assert run_kubeflow.main(["manifests", *BASE, *flags]) == 0
    return [document for document in yaml.safe_load_all(capsys.readouterr().out) if document]


@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_printed_manifest_is_created_as_printed(kube, capsys, variant):
    documents = _printed(capsys, VARIANTS[variant])
    assert documents
    namespace = _namespace(kube, f"manifests-{variant}")
    for document in documents:
        if document["metadata"].get("namespace"):
            _namespace(kube, document["metadata"]["namespace"])
        stored = create_as_sent(kube, document, namespace)
        assert stored["kind"] == document["kind"]


def _full_settings(kind: str):
    """Every option the launchers turn into a field, at once."""
    pool = GpuPool(
        node_selector=(("cloud.google.com/gke-accelerator", "nvidia-l4"),),
        tolerations=(Toleration(key="nvidia.com/gpu"), Toleration.parse("dedicated=gpu:NoExecute")),
    )
    shared = dict(
        image=GPU_IMAGE,
        worker=Resources(cpu=8, memory_gb=30, gpus=2),
        gpu_pool=pool,
        pvc_name="pipeline-root",
        mount_path="/mnt/pipeline",
        active_deadline_seconds=7200,
        gang_scheduling="coscheduling",
    )
    if kind == "TFJob":
        return TFJobConfig(**shared)
    return TrainJobConfig(**shared, max_restarts=2)


@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["TFJob", "TrainJob"])
@pytest.mark.parametrize(
    "spec",
    [
        cluster.ClusterSpec("multi_worker_mirrored", workers=2),
        cluster.ClusterSpec("parameter_server", workers=2, ps=2),
    ],
    ids=["mwms", "ps"],
)
def test_the_launchers_objects_are_created_as_built(kube, kind, spec):
    """With a placement as the Trainer's pod resolves it: owner, service account."""
    namespace = _namespace(kube, f"launcher-{kind.lower()}-{spec.strategy.replace('_', '-')}")
    # No controller creates a namespace's "default" account here: the Trainer's pod runs as this.
    kube.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default-editor"}},
        namespace,
    )
    owner_pod = kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer"},
            "spec": {
                "serviceAccountName": "default-editor",
                "containers": [{"name": "main", "image": IMAGE}],
            },
        },
        namespace,
    )
    owner = kubernetes_job.OwnerPod("trainer", owner_pod["metadata"]["uid"], namespace)
    placement = kubernetes_job.Placement(namespace, "default-editor", owner)
    settings = _full_settings(kind)
    task_uri = "gs://bucket/tfx/run/Trainer/model_run/7/task.json"
    if kind == "TFJob":
        documents = [
            tfjob.tfjob_manifest(
                "tfx-train-abc", spec, cluster.pod_command(task_uri), settings, placement
            )
        ]
    else:
        documents = [
            trainjob.runtime_manifest(spec, settings, namespace),
            trainjob.trainjob_manifest("tfx-train-abc", spec, task_uri, settings, placement),
        ]
    for document in documents:
        stored = create_as_sent(kube, document, namespace)
    assert stored["metadata"]["ownerReferences"][0]["uid"] == owner.uid


@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_the_shipped_runtimes_and_rbac_files_are_created_as_shipped(kube):
    namespace = _namespace(kube, "shipped")
    for file_name in ("trainjob-runtimes.yaml", "tfjob-rbac.yaml", "trainjob-rbac.yaml"):
        with open(os.path.join(ROOT, "kubeflow", file_name)) as handle:
            for document in yaml.safe_load_all(handle):
                if document:
                    create_as_sent(kube, document, namespace)


@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_the_servers_rules_refuse_what_the_crds_forbid(kube):
    """The CRDs' CEL rules and schema run in the server (a JSON-schema validator skips CEL)."""
    from kubernetes.client.exceptions import ApiException

    namespace = _namespace(kube, "refused")
    settings = TrainJobConfig(image=GPU_IMAGE)
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
    job = trainjob.trainjob_manifest("tfx-train-abc", spec, "gs://b/t.json", settings)
    # Trainer's CEL rule on the TrainJob's name (an RFC 1035 label: it names the JobSet's hosts).
    bad_name = dict(job, metadata=dict(job["metadata"], name="9-starts-with-a-digit"))
    with pytest.raises(ApiException) as error:
        kube.apply(bad_name, namespace, dry_run=True)
    assert error.value.status == 422, error.value.body
    assert "metadata.name must match RFC 1035 DNS label format" in error.value.body
    # The TFJob CRD's schema: a mistyped count is refused ...
    tf_job = tfjob.tfjob_manifest(
        "x", spec, ["python"], TFJobConfig(image=GPU_IMAGE, namespace=namespace)
    )
    tf_job["spec"]["runPolicy"]["backoffLimit"] = "3"
    with pytest.raises(ApiException) as error:
        kube.apply(tf_job, namespace, dry_run=True)
    assert error.value.status == 422 and "spec.runPolicy.backoffLimit" in error.value.body
    # ... and an unknown field is pruned without a word: what create_as_sent catches.
    tf_job["spec"]["runPolicy"]["backoffLimit"] = 3
    tf_job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["gpu"] = 1
    stored = kube.apply(tf_job, namespace, dry_run=True)
    assert trainjob.first_difference(tf_job, stored) == (
        ".spec.tfReplicaSpecs.Worker.template.spec.gpu: missing (expected 1)"
    )


def _succeed(kube, api_version: str, kind: str, name: str, namespace: str) -> None:
    """What the operator does when the job's pods are done: its status says so."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    job = kube.get(api_version, kind, name, namespace)
    succeeded = "Succeeded" if kind == "TFJob" else "Complete"
    job["status"] = {
        "conditions": [
            {
                "type": succeeded,
                "status": "True",
                "reason": "JobSucceeded",
                "message": "every worker exited 0",
                "lastTransitionTime": now,
                "lastUpdateTime": now,
            }
        ]
    }
    if kind == "TrainJob":
        for condition in job["status"]["conditions"]:
            condition.pop("lastUpdateTime")
    path = kube.resource_path(api_version, kind, namespace)
    kube.request("PUT", f"{path}/{name}/status", job)


@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "root"), [("TFJob", "shared"), ("TrainJob", "shared"), ("TFJob", "minio")]
)
def test_the_tuners_workers_are_a_job_of_the_trainers_launcher(kube, kind, root, tmp_path):
    """--tune --tune_workers 2 with --launcher tfjob|trainjob: the Tuner's executor path
    (distributed.run_on_launcher) goes through the Trainer's launcher (a kubeconfig, as
    run_local.py gives it) and creates a job of 3 workers on the API server, each pod running
    run_task on the search's TunerJobTask; every replica's KerasTuner role follows from the
    TF_CONFIG that job gives it (worker 0 the oracle chief on all its addresses, workers 1 and 2
    tuners 0 and 1 dialing worker 0's host name); the launcher waits until the job succeeds
    (its status set here as the operator would, once the chief's summary is written) and the
    search's result is the chief's summary. Under a minio:// root (root "minio": the artifacts
    are KFP's launcher's local copies, /minio/... here a folder) the job reads a search staged
    on its volume (--pvc_name, --mount_path) and the chief's results come back."""
    from unittest import mock

    from tfx.types import standard_artifacts

    from components.tfx_components.tuner import distributed
    from components.training import loop, staging, tf_config, tuner_job
    from components.training import settings as settings_lib

    namespace = _namespace(kube, f"tuner-{kind.lower()}-{root}")
    kubeconfig = kube.write_kubeconfig(str(tmp_path / "kubeconfig"), kube.admin_token, namespace)
    mount = tmp_path / "volume"
    shared = dict(
        image=IMAGE,
        namespace=namespace,
        kubeconfig=kubeconfig,
        worker=Resources(cpu=0.5, memory_gb=1, gpus=0),
        poll_seconds=0.2,
        delete_policy="never",
        **({"pvc_name": "pipeline-root", "mount_path": str(mount)} if root == "minio" else {}),
    )
    artifacts_root = tmp_path / "minio" if root == "minio" else tmp_path
    launcher_local = mock.patch.object(staging, "POD_LOCAL_PREFIXES", (f"{tmp_path}/minio/",))
    settings = TFJobConfig(**shared) if kind == "TFJob" else TrainJobConfig(**shared)
    spec = cluster.ClusterSpec("multi_worker_mirrored", workers=3)
    if kind == "TrainJob":  # what a platform team applies once (run_kubeflow.py manifests)
        create_as_sent(kube, trainjob.runtime_manifest(spec, settings, namespace), namespace)
    inputs = {
        "examples": standard_artifacts.Examples(),
        "schema": standard_artifacts.Schema(),
        "transform_graph": standard_artifacts.TransformGraph(),
    }
    outputs = {
        "best_hyperparameters": standard_artifacts.HyperParameters(),
        "tuner_results": standard_artifacts.TunerResults(),
    }
    for key, artifact in {**inputs, **outputs}.items():
        artifact.uri = str(artifacts_root / key)
        os.makedirs(artifact.uri)
    working_dir = str(artifacts_root / "tuner_results" / "search")
    name = kubernetes_job.job_name_for(working_dir, tuner_job.TunerJobTask.JOB_PREFIX)
    # Where the job's pods find the search: the Tuner's own folder, or its copy on the volume.
    staged = f"{mount}/{staging.STAGING_DIR}/{name}" if root == "minio" else ""
    job_working_dir = staged + working_dir
    summary = {"trials": 4, "best_score": 0.25, "objective": "val_loss", "best_values": {"a": 1}}
    api_version = (
        f"{tfjob.GROUP}/{tfjob.VERSION}"
        if kind == "TFJob"
        else (f"{trainjob.GROUP}/{trainjob.VERSION}")
    )
    seen: dict = {}

    def operator() -> None:
        from kubernetes.client.exceptions import ApiException

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                seen["job"] = kube.get(api_version, kind, name, namespace)
                break
            except ApiException as error:
                assert error.status == 404, error
                time.sleep(0.1)
        else:
            return
        # What the pods read while the job runs (a staged search is gone afterwards).
        seen["task"] = loop.load_task(os.path.join(job_working_dir, kind.lower(), "task.json"))
        seen["search"] = distributed.TunerTask.load(seen["task"].tuner_task)
        with open(os.path.join(job_working_dir, distributed.SUMMARY_FILE), "w") as handle:
            json.dump(summary, handle)
        _succeed(kube, api_version, kind, name, namespace)

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    with launcher_local:
        result = distributed.run_on_launcher(
            {key: [artifact] for key, artifact in inputs.items()},
            {key: [artifact] for key, artifact in outputs.items()},
            {"tuner_fn": "components.training.tuning.tuner_fn", "custom_config": "{}"},
            working_dir,
            workers=2,
            max_trials=4,
            launcher=settings_lib.to_dict(settings),
            max_restarts=1,
        )
    thread.join(timeout=5)
    assert result == {**summary, "restarts": None}
    if staged:  # the chief's summary came back to the Tuner's output; the volume's copy is gone
        assert not os.path.exists(staged)
        with open(os.path.join(working_dir, distributed.SUMMARY_FILE)) as handle:
            assert json.load(handle) == summary
    job = seen["job"]
    assert job["metadata"]["name"].startswith("tfx-tune-")
    task_uri = os.path.join(job_working_dir, kind.lower(), "task.json")
    if kind == "TFJob":
        [replicas] = job["spec"]["tfReplicaSpecs"].values()
        assert list(job["spec"]["tfReplicaSpecs"]) == ["Worker"] and replicas["replicas"] == 3
        [container] = replicas["template"]["spec"]["containers"]
        assert container["command"] == cluster.pod_command(task_uri)
        if staged:  # every pod mounts the volume the search is staged on
            mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
            volumes = replicas["template"]["spec"]["volumes"]
            claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in volumes}
            assert str(mount) in mounts.values() and "pipeline-root" in claims.values()
        # As the Training Operator sets it in each pod (its headless service per replica).
        hosts = [f"{name}-worker-{i}.{namespace}.svc:2222" for i in range(3)]
        configs = [
            {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}} for i in range(3)
        ]
    else:
        assert job["spec"]["trainer"]["numNodes"] == 3
        assert job["spec"]["runtimeRef"]["name"] == trainjob.runtime_name(spec, settings)
        configs = [
            json.loads(
                tf_config.from_environ(
                    {
                        tf_config.ENV_JOBSET_NAME: name,
                        tf_config.ENV_REPLICATED_JOB: "node",
                        tf_config.ENV_JOB_INDEX: "0",
                        tf_config.ENV_COMPLETION_INDEX: str(i),
                    },
                    spec,
                )
            )
            for i in range(3)
        ]
        hosts = configs[0]["cluster"]["worker"]
    task = seen["task"]
    assert isinstance(task, tuner_job.TunerJobTask)
    assert task.settings.workers == 3 and task.settings.launcher == settings
    searched = seen["search"]
    assert searched.working_dir == job_working_dir and searched.max_trials == 4
    assert staged + str(artifacts_root / "examples") in searched.input_dict
    chief_host, _, port = hosts[0].rpartition(":")
    assert [tuner_job.role(config) for config in configs] == [
        {"KERASTUNER_TUNER_ID": "chief", "KERASTUNER_ORACLE_IP": "0.0.0.0",
         "KERASTUNER_ORACLE_PORT": port},
        {"KERASTUNER_TUNER_ID": "tuner0", "KERASTUNER_ORACLE_IP": chief_host,
         "KERASTUNER_ORACLE_PORT": port},
        {"KERASTUNER_TUNER_ID": "tuner1", "KERASTUNER_ORACLE_IP": chief_host,
         "KERASTUNER_ORACLE_PORT": port},
    ]  # fmt: skip
