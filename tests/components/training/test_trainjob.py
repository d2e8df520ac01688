"""The Trainer v2 TrainJob and this project's TensorFlow runtimes: validated against the vendored
TrainJob / TrainingRuntime / ClusterTrainingRuntime CRDs; the JobSet Trainer builds from them
(emulated here the way Trainer v2.3's jobset and plainml plugins merge a TrainJob into its
runtime) validated against the JobSet CRD, and every one of its pods computing the TF_CONFIG
TensorFlow's resolver expects; the rules of Trainer's webhook this project relies on; the
shipped runtime file; and the launcher's runtime check against a real API server."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
from unittest import mock

import pytest
import tensorflow as tf
import yaml

from components.training import cluster, kubernetes_job, tf_config, trainjob
from components.training.settings import GpuPool, Resources, Toleration, TrainJobConfig
from tests.components.training import crd_schema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
IMAGE = "registry.example.com/tfx-scaleout-gpu@sha256:" + "b" * 64
TASK_URI = "gs://bucket/root/Trainer/model_run/7/trainjob/task.json"
NAME = "tfx-train-0123456789ab"
POOL = GpuPool(
    node_selector=(("cloud.google.com/gke-accelerator", "nvidia-l4"),),
    tolerations=(Toleration(key="nvidia.com/gpu"),),
)
MWMS = cluster.ClusterSpec("multi_worker_mirrored", workers=2)
PS = cluster.ClusterSpec("parameter_server", workers=2, ps=1)
OWNER = kubernetes_job.OwnerPod("trainer-pod", "uid-1", "team-a", "default-editor")


def _settings(**changes) -> TrainJobConfig:
    values: dict = dict(image=IMAGE, gpu_pool=POOL, pvc_name="root", mount_path="/mnt/root")
    values.update(changes)
    settings = TrainJobConfig(**values)
    settings.validate()
    return settings


def _placement() -> kubernetes_job.Placement:
    return kubernetes_job.Placement("team-a", "default-editor", OWNER)


def _yaml_round_trip(obj: dict) -> dict:
    return yaml.safe_load(yaml.safe_dump(obj))


def jobset_from(runtime: dict, job: dict) -> dict:
    """The JobSet Trainer v2.3 creates for `job` on `runtime`: the runtime's JobSet template,
    the trainer-ancestor job's "node" container given spec.trainer (image, env, resources) and
    its count (plainml: numNodes -> parallelism and completions), then runtimePatches merged by
    replicated job and container name."""
    spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
    trainer = job["spec"]["trainer"]
    patches = {
        patch["name"]: patch["template"]["spec"]["template"]["spec"]
        for entry in job["spec"].get("runtimePatches", [])
        for patch in entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    }
    for replicated in spec["replicatedJobs"]:
        job_spec = replicated["template"]["spec"]
        pod_spec = job_spec["template"]["spec"]
        labels = replicated["template"].get("metadata", {}).get("labels", {})
        if labels.get(trainjob.ANCESTOR_LABEL) == "trainer":
            job_spec["parallelism"] = job_spec["completions"] = trainer["numNodes"]
            (node,) = [c for c in pod_spec["containers"] if c["name"] == "node"]
            node["image"] = trainer["image"]
            node["resources"] = trainer["resourcesPerNode"]
            node["env"] = node.get("env", []) + trainer.get("env", [])
        patch = patches.pop(replicated["name"], {})
        for key in ("serviceAccountName", "nodeSelector", "tolerations", "volumes"):
            if key in patch:
                pod_spec[key] = patch[key]
        for container_patch in patch.get("containers", []):
            (container,) = [
                c for c in pod_spec["containers"] if c["name"] == container_patch["name"]
            ]
            container["env"] = container.get("env", []) + container_patch.get("env", [])
            if "volumeMounts" in container_patch:
                container["volumeMounts"] = container_patch["volumeMounts"]
    assert not patches, f"patches for replicated jobs the runtime lacks: {sorted(patches)}"
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": job["metadata"]["name"], "namespace": job["metadata"]["namespace"]},
        "spec": spec,
    }


def jobset_pods(jobset: dict):
    """(host name, environment) of every pod of the JobSet, as Kubernetes would set them up:
    JobSet's labels resolved through the container's downward-API env, JOB_COMPLETION_INDEX
    of an Indexed Job."""
    name = jobset["metadata"]["name"]
    for replicated in jobset["spec"]["replicatedJobs"]:
        job_spec = replicated["template"]["spec"]
        assert job_spec["completionMode"] == "Indexed"
        for job_index in range(replicated["replicas"]):
            labels = {
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": replicated["name"],
                "jobset.sigs.k8s.io/job-index": str(job_index),
            }
            for pod_index in range(job_spec["completions"]):
                (container,) = job_spec["template"]["spec"]["containers"]
                environ = {"JOB_COMPLETION_INDEX": str(pod_index)}
                for env in container["env"]:
                    if "value" in env:
                        environ[env["name"]] = env["value"]
                    else:
                        path = env["valueFrom"]["fieldRef"]["fieldPath"]
                        label = re.fullmatch(r"metadata\.labels\['(.+)'\]", path).group(1)
                        environ[env["name"]] = labels[label]
                host = f"{name}-{replicated['name']}-{job_index}-{pod_index}"
                yield host, container, environ


@pytest.mark.parametrize("spec", [MWMS, PS], ids=["mwms", "ps"])
@pytest.mark.parametrize("kind", ["TrainingRuntime", "ClusterTrainingRuntime"])
def test_runtime_trainjob_and_their_jobset_fit_the_crds(spec, kind):
    settings = _settings(runtime_kind=kind, gang_scheduling="coscheduling")
    runtime = _yaml_round_trip(trainjob.runtime_manifest(spec, settings, "team-a"))
    job = _yaml_round_trip(trainjob.trainjob_manifest(NAME, spec, TASK_URI, settings, _placement()))
    crd_schema.validate(runtime)
    crd_schema.validate(job)
    assert ("namespace" in runtime["metadata"]) == (kind == "TrainingRuntime")
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": kind,
        "name": runtime["metadata"]["name"],
    }
    crd_schema.validate(jobset_from(runtime, job))


def test_crd_validation_catches_what_the_api_server_would_reject_or_prune():
    job = trainjob.trainjob_manifest(NAME, MWMS, TASK_URI, _settings())
    job["spec"]["trainer"]["numNodes"] = "2"
    job["spec"]["trainer"]["gpus"] = 1
    errors = crd_schema.errors_in(job)
    assert any(".spec.trainer.numNodes: expected integer" in e for e in errors)
    assert any(".spec.trainer.gpus: unknown field" in e for e in errors)


def test_every_pod_of_the_jobset_computes_the_tf_config_tensorflow_expects():
    for spec in (MWMS, PS):
        settings = _settings()
        runtime = trainjob.runtime_manifest(spec, settings, "team-a")
        job = trainjob.trainjob_manifest(NAME, spec, TASK_URI, settings, _placement())
        pods = list(jobset_pods(jobset_from(runtime, job)))
        assert len(pods) == len(spec.tasks())
        roles = []
        for host, container, environ in pods:
            # The command's $(TFX_SCALEOUT_TASK) names a variable the container has.
            assert container["command"][-1] == f"$({trainjob.TASK_ENV})"
            assert environ[trainjob.TASK_ENV] == TASK_URI
            config = tf_config.from_environ(environ, spec)
            assert config is not None
            with mock.patch.dict(os.environ, {"TF_CONFIG": config}):
                resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
                cluster_spec = resolver.cluster_spec().as_dict()
                task_type, task_id = resolver.task_type, resolver.task_id
            # Its own address is its JobSet host name in the JobSet's subdomain.
            assert cluster_spec[task_type][task_id] == f"{host}.{NAME}:{tf_config.PORT}"
            assert {"name": "tf", "containerPort": tf_config.PORT} in container["ports"]
            roles.append((task_type, task_id))
        assert sorted(roles) == sorted(spec.tasks())


def test_gpus_only_on_workers_and_the_pool_only_for_them():
    settings = _settings(worker=Resources(cpu=8, memory_gb=30, gpus=2))
    runtime = trainjob.runtime_manifest(PS, settings, "team-a")
    job = trainjob.trainjob_manifest(NAME, PS, TASK_URI, settings, _placement())
    jobset = jobset_from(runtime, job)
    by_job = {
        rj["name"]: rj["template"]["spec"]["template"]["spec"]
        for rj in jobset["spec"]["replicatedJobs"]
    }
    node = by_job["node"]["containers"][0]["resources"]
    assert node["limits"] == {"cpu": "8", "memory": "30G", "nvidia.com/gpu": "2"}
    assert node["requests"] == {"cpu": "8", "memory": "30G"}
    for name in ("coordinator", "ps"):
        resources = by_job[name]["containers"][0]["resources"]
        assert "nvidia.com/gpu" not in resources["limits"], name
        assert "nodeSelector" not in by_job[name] and "tolerations" not in by_job[name]
    assert by_job["node"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert by_job["node"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    for pod_spec in by_job.values():
        assert pod_spec["serviceAccountName"] == "default-editor"
        assert pod_spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == "root"
        assert pod_spec["containers"][0]["volumeMounts"][0]["mountPath"] == "/mnt/root"


def test_hardening_istio_restarts_deadline_gang_and_owner():
    settings = _settings(gang_scheduling="volcano", active_deadline_seconds=7200, max_restarts=2)
    runtime = trainjob.runtime_manifest(PS, settings)
    job = trainjob.trainjob_manifest(NAME, PS, TASK_URI, settings, _placement())
    jobset_spec = runtime["spec"]["template"]["spec"]
    for replicated in jobset_spec["replicatedJobs"]:
        pod_template = replicated["template"]["spec"]["template"]
        assert pod_template["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        assert pod_template["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
        assert pod_template["spec"]["restartPolicy"] == "Never"
        job_spec = replicated["template"]["spec"]
        assert job_spec["backoffLimit"] == 0
        (rule,) = job_spec["podFailurePolicy"]["rules"]
        # ExitCode semantics: a code error (1-127) fails; a signal (128+: killed) restarts.
        assert rule["action"] == "FailJob"
        assert rule["onExitCodes"] == {"operator": "In", "values": list(range(1, 128))}
    assert jobset_spec["failurePolicy"] == {
        "maxRestarts": 2,
        "rules": [
            {
                "name": "CodeError",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
            }
        ],
    }
    # Parameter servers never exit: the coordinator's success is the JobSet's.
    assert jobset_spec["successPolicy"] == {
        "operator": "All",
        "targetReplicatedJobs": ["coordinator"],
    }
    assert jobset_spec["network"]["enableDNSHostnames"] is True
    assert runtime["spec"]["podGroupPolicy"] == {"volcano": {}}
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_what_trainers_webhook_and_cel_rules_require():
    """Rules of Trainer v2.3 the schema cannot express (jobset plugin Validate, CEL)."""
    for spec in (MWMS, PS):
        runtime = trainjob.runtime_manifest(spec, _settings())
        job = trainjob.trainjob_manifest(NAME, spec, TASK_URI, _settings(), _placement())
        # metadata.name must match RFC 1035 DNS label format, at most 63.
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", job["metadata"]["name"])
        containers = {
            rj["name"]: {
                c["name"] for c in rj["template"]["spec"]["template"]["spec"]["containers"]
            }
            for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]
        }
        for entry in job["spec"]["runtimePatches"]:
            assert re.fullmatch(r"[a-z0-9.-]+/[a-z0-9-]+", entry["manager"])  # domain-prefixed
            for patch in entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
                pod_patch = patch["template"]["spec"]["template"]["spec"]
                for container in pod_patch.get("containers", []):
                    # The container exists in that replicated job of the runtime ...
                    assert container["name"] in containers[patch["name"]]
                    # ... and the "node" container's env comes only from spec.trainer.env.
                    assert not (container["name"] == "node" and container.get("env"))
        # Trainer applies spec.trainer to the "node" container of the trainer-ancestor job.
        (ancestor,) = [
            rj
            for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]
            if rj["template"].get("metadata", {}).get("labels", {}).get(trainjob.ANCESTOR_LABEL)
            == "trainer"
        ]
        assert ancestor["name"] == "node" and "node" in containers["node"]
        # Hostnames fit a DNS label.
        assert len(f"{NAME}-coordinator-0-0") <= 63


def test_the_shipped_runtimes_are_the_generated_ones():
    with open(os.path.join(ROOT, "kubeflow", "trainjob-runtimes.yaml")) as handle:
        shipped = list(yaml.safe_load_all(handle))
    assert shipped == trainjob.shipped_runtimes()
    for runtime in shipped:
        crd_schema.validate(runtime)
    assert [r["metadata"]["name"] for r in shipped] == [
        "tfx-scaleout-tf-multi-worker",
        "tfx-scaleout-tf-parameter-server-1ps",
    ]


# --- the launcher's runtime check, against the real API server (the `kube` fixture) ------------


def _launcher(kube, settings):
    from kubernetes import client as k8s

    admin = kube.api_client()
    return trainjob.TrainJobLauncher(
        settings, custom_api=k8s.CustomObjectsApi(admin), core_api=k8s.CoreV1Api(admin)
    )


def _namespace(kube, name: str) -> kubernetes_job.Placement:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return kubernetes_job.Placement(name, "default-editor", None)


@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_a_missing_runtime_says_how_to_get_it(kube):
    placement = _namespace(kube, "preflight-missing")
    launcher = _launcher(kube, _settings())
    with pytest.raises(
        cluster.ClusterError,
        match=r"no TrainingRuntime tfx-scaleout-tf-multi-worker in namespace preflight-missing: "
        r"apply it .*manifests",
    ):
        launcher.preflight(MWMS, placement)


@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_a_runtime_that_differs_names_the_first_difference(kube):
    from kubernetes import client as k8s

    placement = _namespace(kube, "preflight-differs")
    applied = trainjob.runtime_manifest(PS, _settings(image="registry.example.com/old:1"))
    stored = kube.apply(applied, placement.namespace)
    # What the API server adds (its defaults) is fine; a changed image is not.
    launcher = _launcher(kube, _settings())
    with pytest.raises(cluster.ClusterError) as error:
        launcher.preflight(PS, placement)
    assert (
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].image"
        in str(error.value)
    )
    assert "registry.example.com/old:1" in str(error.value)

    fixed = trainjob.runtime_manifest(PS, _settings())
    fixed["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    k8s.CustomObjectsApi(kube.api_client()).replace_namespaced_custom_object(
        trainjob.GROUP,
        trainjob.VERSION,
        placement.namespace,
        "trainingruntimes",
        fixed["metadata"]["name"],
        fixed,
    )
    launcher.preflight(PS, placement)


@pytest.mark.system_packages("etcd-server")
@pytest.mark.slow
def test_a_cluster_runtime_is_read_cluster_wide(kube):
    placement = _namespace(kube, "preflight-cluster")
    settings = _settings(runtime_kind="ClusterTrainingRuntime", runtime_name="team-tf")
    runtime = trainjob.runtime_manifest(MWMS, settings, placement.namespace)
    assert runtime["metadata"]["name"] == "team-tf" and "namespace" not in runtime["metadata"]
    kube.apply(runtime)
    try:
        _launcher(kube, settings).preflight(MWMS, placement)
    finally:
        kube.delete(runtime["apiVersion"], runtime["kind"], "team-tf")


def test_settings_survive_the_trainer_custom_config():
    settings = _settings(gang_scheduling="coscheduling", runtime_name="x", max_restarts=1)
    carried = json.loads(json.dumps(settings.to_dict()))
    assert carried["kind"] == "trainjob"
    assert TrainJobConfig.from_dict(carried) == settings
    assert dataclasses.replace(settings, namespace="a") != settings


@pytest.mark.parametrize(
    ("changes", "flag"),
    [
        ({"runtime_kind": "Runtime"}, "--trainjob_runtime_kind"),
        ({"runtime_name": "Bad_Name"}, "--trainjob_runtime"),
        ({"namespace": "Team_A"}, "--job_namespace"),
        ({"service_account": "-sa"}, "--job_service_account"),
        ({"gang_scheduling": "kueue"}, "--gang_scheduling"),
        ({"active_deadline_seconds": 0}, "--job_deadline_seconds"),
        ({"chief": Resources(cpu=1, gpus=1)}, "trainjob.chief.gpus"),
        ({"ps": Resources(cpu=1, gpus=1)}, "trainjob.ps.gpus"),
        ({"worker": Resources(cpu=-1)}, "--worker_cpu"),
    ],
)
def test_invalid_settings_name_the_flag(changes, flag):
    with pytest.raises(Exception, match=re.escape(flag)):
        _settings(**changes)
