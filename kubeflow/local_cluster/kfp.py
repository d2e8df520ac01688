"""Kubeflow Pipelines 2.14.3 on the local cluster (`up --kfp`): what runs where, and why.

As pods, from FROM-scratch images of the programs builds.build_kfp builds (what users run as
pods, so that the pods' service accounts, RBAC, projected tokens and Service names are the real
ones), in namespace `kubeflow`:
- KFP's API server (Deployment and Service `ml-pipeline`, HTTP 8888 and gRPC 8887; the Service is
  a NodePort so that the host reaches it at http://NODE_IP:API_NODE_PORT: `status`'s `kfp:`),
  its V2_DRIVER_IMAGE / V2_LAUNCHER_IMAGE the driver's and launcher's images built here;
- KFP's persistence agent (`ml-pipeline-persistenceagent`, with the projected token of audience
  pipelines.kubeflow.org it reports with);
- KFP's ScheduledWorkflow controller (`ml-pipeline-scheduledworkflow`: recurring runs; it starts
  each run through the API server's gRPC RunService, with the same kind of token);
- Argo v3.6.7's workflow controller (`workflow-controller`, --namespaced, --executor-image the
  argoexec image built here).
The driver's, launcher's and argoexec's images are loaded into containerd under explicit tags
(the hash of what they hold, never `latest`): the driver and launcher containers of a run set
no imagePullPolicy (argocompiler/container.go), so a `latest` tag would make the kubelet pull.

As host processes inside the cluster's network namespace (kfp_host.py), held by a second
supervisor (plan run/kfp-plan.json, cgroup CGROUP_ROOT/kfp; `down` finds them as it finds the
node's), because
each is a Debian package or a Python program on this machine rather than a static binary:
- MariaDB (Debian's mariadbd; a fresh data folder per `up`, user `kfp` with
  mysql_native_password, which ml-metadata's client needs), databases `mlpipeline` (the API
  server's) and `metadb` (MLMD's);
- the S3 server: versitygw v1.8.0 (Apache-2.0), posix backend on run/kfp/s3 (bucket `mlpipeline`
  is a folder there; the API server creates it at start);
- the MLMD gRPC server: the stand-in over the ml-metadata wheel (mlmd_server.py) on MariaDB.
They listen on the node's address; pods reach them by the Service names KFP's programs default to
(`mysql`, `minio-service`, `metadata-grpc-service` in `kubeflow`): Services without selectors
whose EndpointSlices name NODE_IP.

The CRDs and RBAC come from the pinned sources, vendored unchanged (manifests/argo-v3.6.7.yaml,
manifests/kfp-2.14.3.yaml); the API server's config.json is the one its upstream image bakes in,
read from the same kubeflow/pipelines module the programs are built from.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import yaml

from kubeflow.local_cluster import addons, builds, host, images, node

NAMESPACE = "kubeflow"
# The shared folder's second PersistentVolume, bound to the claim in NAMESPACE.
SHARED_VOLUME = "tfx-scaleout-shared-kubeflow"
MYSQL_PORT = 3306
S3_PORT = 9000
MLMD_PORT = 8080
API_NODE_PORT = 30888
API_GRPC_NODE_PORT = 30887
BUCKET = "mlpipeline"
S3_REGION = "minio"
PIPELINE_DB = "mlpipeline"
MLMD_DB = "metadb"
DB_USER = "kfp"
MANIFESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifests")
VENDORED = ("argo-v3.6.7.yaml", "kfp-2.14.3.yaml")
# The Deployments of KFP on the cluster, in the order `up` waits for them.
DEPLOYMENTS = (
    "workflow-controller",
    "ml-pipeline",
    "ml-pipeline-persistenceagent",
    "ml-pipeline-scheduledworkflow",
)
# The host processes (the kfp supervisor's daemons), in start order.
HOST_DAEMONS = ("mariadb", "s3-versitygw", "mlmd-grpc")
LABELS = {"app.kubernetes.io/part-of": "tfx-scaleout-kfp"}
Say = Callable[[str], None]


def url() -> str:
    """The API server as the host reaches it (kfp.Client's host, `deploy --endpoint`)."""
    return f"http://{node.NODE_IP}:{API_NODE_PORT}"


@dataclasses.dataclass(frozen=True)
class KfpLayout:
    """What one `up --kfp` writes: under run/ (removed by `down`)."""

    layout: node.Layout

    @property
    def folder(self) -> str:
        return os.path.join(self.layout.run, "kfp")

    @property
    def mariadb_data(self) -> str:
        return os.path.join(self.folder, "mariadb")

    @property
    def mariadb_socket(self) -> str:
        """In the cluster's short, fixed runtime folder (one cluster per machine), not under the
        root: MariaDB refuses a socket path over 107 bytes, and a root under a test session's
        temporary folder is longer than that."""
        return os.path.join(node.RUNTIME_DIR, "mariadb.sock")

    @property
    def s3_root(self) -> str:
        return os.path.join(self.folder, "s3")

    @property
    def credentials(self) -> str:
        return os.path.join(self.folder, "credentials.json")

    @property
    def plan_name(self) -> str:
        return "kfp-plan.json"

    @property
    def pidfile(self) -> str:
        return os.path.join(self.layout.run, "kfp-supervisor.pid")

    @property
    def supervisor_log(self) -> str:
        return os.path.join(self.layout.logs, "kfp-supervisor.log")


# --- images --------------------------------------------------------------------------------------

# image name -> (build, program, path in the image, ENV PATH for the programs pods run by name).
IMAGES = {
    "kfp-apiserver": ("kfp", "apiserver", "/bin/apiserver", False),
    "kfp-persistence-agent": ("kfp", "persistence-agent", "/bin/persistence_agent", False),
    "kfp-driver": ("kfp", "driver", "/bin/driver", True),
    "kfp-launcher": ("kfp", "launcher", "/bin/launcher-v2", True),
    "kfp-scheduledworkflow": ("kfp", "scheduledworkflow", "/bin/controller", False),
    "argo-workflow-controller": (
        "workflow-controller",
        "workflow-controller",
        "/bin/workflow-controller",
        False,
    ),
    "argoexec": ("argoexec", "argoexec", "/bin/argoexec", True),
}


def scratch_images(built: dict[str, builds.Built]) -> dict[str, images.ScratchImage]:
    found = {}
    for name, (build, program, path, on_path) in IMAGES.items():
        env = (("PATH", "/bin"),) if on_path else ()
        found[name] = images.ScratchImage(
            name, built[build].paths[program], path, env=env, tmp=True
        )
    return found


# --- manifests -----------------------------------------------------------------------------------


def vendored_documents() -> list[dict]:
    documents = []
    for name in VENDORED:
        with open(os.path.join(MANIFESTS, name)) as handle:
            documents += [d for d in yaml.safe_load_all(handle) if d]
    return documents


def apiserver_config() -> str:
    """config.json as KFP's API server image bakes it in (backend/src/apiserver/config/)."""
    source = builds.module_dir("github.com/kubeflow/pipelines", builds.kfp_version())
    with open(os.path.join(source, "backend", "src", "apiserver", "config", "config.json")) as h:
        return h.read()


def _meta(name: str, **extra) -> dict:
    return {"name": name, "namespace": NAMESPACE, "labels": dict(LABELS), **extra}


def _host_service(name: str, port: int) -> list[dict]:
    """A Service without a selector and its EndpointSlice: the host process on the node."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(name),
            "spec": {"ports": [{"name": "main", "port": port, "targetPort": port}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": _meta(
                f"{name}-node",
                labels={**LABELS, "kubernetes.io/service-name": name},
            ),
            "addressType": "IPv4",
            "ports": [{"name": "main", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [node.NODE_IP], "conditions": {"ready": True}}],
        },
    ]


def _secret_env(name: str, secret: str, key: str) -> dict:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _container(name: str, image: str, **fields) -> dict:
    container = {
        "name": name,
        "image": image,
        "imagePullPolicy": "Never",  # loaded into containerd by `up`; no registry
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}},
        **fields,
    }
    # client-go's streaming list (WatchListClient) needs the API server's RequestWatchProgress,
    # which etcd 3.4 (Debian's) lacks: the API server ends every such watch ("the required
    # storage feature RequestWatchProgress is disabled") and the informers see changes only at
    # their next relist; seen with Argo's task results, which then arrive after the controller
    # has evaluated the next task's `when` ("Invalid 'when' expression
    # '{{tasks.X-driver.outputs.parameters.cached-decision}} != true'"). Plain list+watch.
    container["env"] = [{"name": "KUBE_FEATURE_WatchListClient", "value": "false"}]
    container["env"] += fields.get("env", [])
    container["volumeMounts"] = [
        {"name": "tmp", "mountPath": "/tmp"},
        *fields.get("volumeMounts", []),
    ]
    return container


def _deployment(name: str, account: str, containers: list[dict], volumes=()) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, labels={**LABELS, "app": name}),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {**LABELS, "app": name}},
                "spec": {
                    "serviceAccountName": account,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": containers,
                    "volumes": [{"name": "tmp", "emptyDir": {}}, *volumes],
                },
            },
        },
    }


def _api_token(name: str) -> dict:
    """A projected service-account token for KFP's API server (audience pipelines.kubeflow.org),
    as KFP's own Deployments of its controllers mount it."""
    token = {"path": name, "expirationSeconds": 3600, "audience": "pipelines.kubeflow.org"}
    return {"name": name, "projected": {"sources": [{"serviceAccountToken": token}]}}


def manifests(references: dict[str, str], keys: dict[str, str], shared: str = "") -> str:
    """Everything `up --kfp` applies, in order: the namespace, the shared folder's claim there
    (runs' pods are in this namespace: `compile --pvc_name tfx-scaleout-shared --mount_path
    SHARED` mounts it, e.g. for --serving_model_dir), the vendored CRDs and RBAC, the host
    processes' Services, the secrets and configuration, the three Deployments."""
    documents: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    ]
    if shared:
        documents += addons.shared_volume(shared, NAMESPACE, SHARED_VOLUME, LABELS)
    for document in vendored_documents():
        if document["kind"] != "CustomResourceDefinition":
            document.setdefault("metadata", {})["namespace"] = NAMESPACE
        documents.append(document)
    documents += _host_service("mysql", MYSQL_PORT)
    documents += _host_service("minio-service", S3_PORT)
    documents += _host_service("metadata-grpc-service", MLMD_PORT)
    documents += [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": _meta("mysql-secret"),
            "stringData": {"username": DB_USER, "password": keys["db_password"]},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": _meta("mlpipeline-minio-artifact"),
            "stringData": {"accesskey": keys["s3_access_key"], "secretkey": keys["s3_secret_key"]},
        },
        {
            # What the driver and launcher read (envFrom, argocompiler/common.go).
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("metadata-grpc-configmap"),
            "data": {
                "METADATA_GRPC_SERVICE_HOST": f"metadata-grpc-service.{NAMESPACE}",
                "METADATA_GRPC_SERVICE_PORT": str(MLMD_PORT),
            },
        },
        {
            # The launcher's object store: KFP's default root on the S3 server under the name
            # minio-service.kubeflow:9000 (v2/objectstore/config.go), the keys of
            # mlpipeline-minio-artifact.
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("kfp-launcher"),
            "data": {"defaultPipelineRoot": f"minio://{BUCKET}/v2/artifacts"},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("ml-pipeline-config"),
            "data": {"config.json": apiserver_config()},
        },
        {
            # No artifactRepository: KFP v2's launcher moves the artifacts, not Argo.
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("workflow-controller-configmap"),
            "data": {"executor": "imagePullPolicy: IfNotPresent\n"},
        },
    ]
    field = {"valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    documents.append(
        _deployment(
            "workflow-controller",
            "argo",
            [
                _container(
                    "workflow-controller",
                    references["argo-workflow-controller"],
                    args=[
                        "--configmap",
                        "workflow-controller-configmap",
                        "--executor-image",
                        references["argoexec"],
                        "--namespaced",
                    ],
                    env=[
                        {
                            "name": "LEADER_ELECTION_IDENTITY",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        }
                    ],
                    ports=[{"name": "metrics", "containerPort": 9090}, {"containerPort": 6060}],
                )
            ],
        )
    )
    probe = {
        "httpGet": {"path": "/apis/v1beta1/healthz", "port": 8888},
        "periodSeconds": 3,
        "timeoutSeconds": 2,
    }
    documents.append(
        _deployment(
            "ml-pipeline",
            "ml-pipeline",
            [
                _container(
                    "ml-pipeline-api-server",
                    references["kfp-apiserver"],
                    args=["--config=/config", "-logtostderr=true"],
                    env=[
                        {"name": "POD_NAMESPACE", **field},
                        {"name": "LOG_LEVEL", "value": "info"},
                        {"name": "PIPELINE_LOG_LEVEL", "value": "1"},
                        {"name": "PUBLISH_LOGS", "value": "true"},
                        {"name": "DB_DRIVER_NAME", "value": "mysql"},
                        {"name": "DBCONFIG_MYSQLCONFIG_HOST", "value": f"mysql.{NAMESPACE}"},
                        {"name": "DBCONFIG_MYSQLCONFIG_PORT", "value": str(MYSQL_PORT)},
                        {"name": "DBCONFIG_MYSQLCONFIG_DBNAME", "value": PIPELINE_DB},
                        _secret_env("DBCONFIG_MYSQLCONFIG_USER", "mysql-secret", "username"),
                        _secret_env("DBCONFIG_MYSQLCONFIG_PASSWORD", "mysql-secret", "password"),
                        {"name": "OBJECTSTORECONFIG_HOST", "value": f"minio-service.{NAMESPACE}"},
                        {"name": "OBJECTSTORECONFIG_PORT", "value": str(S3_PORT)},
                        {"name": "OBJECTSTORECONFIG_SECURE", "value": "false"},
                        {"name": "OBJECTSTORECONFIG_REGION", "value": S3_REGION},
                        {"name": "OBJECTSTORECONFIG_BUCKETNAME", "value": BUCKET},
                        _secret_env(
                            "OBJECTSTORECONFIG_ACCESSKEY", "mlpipeline-minio-artifact", "accesskey"
                        ),
                        _secret_env(
                            "OBJECTSTORECONFIG_SECRETACCESSKEY",
                            "mlpipeline-minio-artifact",
                            "secretkey",
                        ),
                        # The RPC server reads these at start (main.go startRpcServer) and
                        # exits without them; the visualization server is not deployed (only
                        # the UI's Python visualizations call it).
                        {
                            "name": "ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_HOST",
                            "value": f"ml-pipeline-visualizationserver.{NAMESPACE}",
                        },
                        {"name": "ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_PORT", "value": "8888"},
                        {"name": "V2_DRIVER_IMAGE", "value": references["kfp-driver"]},
                        {"name": "V2_LAUNCHER_IMAGE", "value": references["kfp-launcher"]},
                    ],
                    ports=[
                        {"name": "http", "containerPort": 8888},
                        {"name": "grpc", "containerPort": 8887},
                    ],
                    readinessProbe=probe,
                    volumeMounts=[{"name": "config", "mountPath": "/config"}],
                )
            ],
            [{"name": "config", "configMap": {"name": "ml-pipeline-config"}}],
        )
    )
    documents.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("ml-pipeline"),
            "spec": {
                "type": "NodePort",
                "selector": {"app": "ml-pipeline"},
                "ports": [
                    {"name": "http", "port": 8888, "targetPort": 8888, "nodePort": API_NODE_PORT},
                    {
                        "name": "grpc",
                        "port": 8887,
                        "targetPort": 8887,
                        "nodePort": API_GRPC_NODE_PORT,
                    },
                ],
            },
        }
    )
    token = "persistenceagent-sa-token"
    documents.append(
        _deployment(
            "ml-pipeline-persistenceagent",
            "ml-pipeline-persistenceagent",
            [
                _container(
                    "ml-pipeline-persistenceagent",
                    references["kfp-persistence-agent"],
                    args=[
                        "--logtostderr=true",
                        f"--namespace={NAMESPACE}",
                        "--ttlSecondsAfterWorkflowFinish=86400",
                        "--numWorker=2",
                        "--executionType=Workflow",
                        "--logLevel=info",
                    ],
                    volumeMounts=[{"name": token, "mountPath": "/var/run/secrets/kubeflow/tokens"}],
                )
            ],
            [_api_token(token)],
        )
    )
    # Recurring runs: the controller turns each ScheduledWorkflow (which the API server makes for
    # a recurring run) into runs at its cron times through the API server's RunService, here
    # ml-pipeline:8887 in its own namespace (its flags' defaults). The arguments and environment
    # are those of KFP's own image and Deployment (backend/Dockerfile.scheduledworkflow,
    # base/pipeline/ml-pipeline-scheduledworkflow-deployment.yaml), the time zone the
    # pipeline-install-config default (UTC).
    token = "scheduledworkflow-sa-token"
    documents.append(
        _deployment(
            "ml-pipeline-scheduledworkflow",
            "ml-pipeline-scheduledworkflow",
            [
                _container(
                    "ml-pipeline-scheduledworkflow",
                    references["kfp-scheduledworkflow"],
                    args=["--logtostderr=true", f"--namespace={NAMESPACE}", "--logLevel=info"],
                    env=[{"name": "CRON_SCHEDULE_TIMEZONE", "value": "UTC"}],
                    volumeMounts=[{"name": token, "mountPath": "/var/run/secrets/kubeflow/tokens"}],
                )
            ],
            [_api_token(token)],
        )
    )
    return yaml.safe_dump_all(documents, sort_keys=False)


# --- waiting and states --------------------------------------------------------------------------


def healthz(timeout: float = 5) -> dict:
    """KFP's /apis/v2beta1/healthz from the host."""
    with urllib.request.urlopen(f"{url()}/apis/v2beta1/healthz", timeout=timeout) as response:
        return json.loads(response.read())


def wait_healthy(timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return healthz()
        except (urllib.error.URLError, OSError, ValueError) as caught:
            error = caught
        time.sleep(1)
    raise builds.BuildFailed(
        f"{url()}/apis/v2beta1/healthz did not answer in {timeout:.0f} s: {error}"
    )


def running(kfp_layout: KfpLayout) -> int | None:
    try:
        with open(kfp_layout.pidfile) as handle:
            pid = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return pid if host.pid_alive(pid) else None
