"""What runs on the local cluster besides the node: CoreDNS, the shared volume, and the
operators, each deployed from the manifests its own release ships (read from the Go module
that its binary is built from, so manifests, CRDs and controller are one release), rendered by
kubectl's kustomize with this cluster's images and applied server-side:

- CoreDNS: Kubernetes' own addon manifest (cluster/addons/dns/coredns/coredns.yaml.base of the
  same k8s.io/kubernetes module) with the cluster's domain and DNS address; its Corefile loses
  `forward` and `loop`, because the cluster has no upstream resolver (pods resolve cluster names
  only).
- The Training Operator v1: manifests/overlays/standalone's content (namespace kubeflow, the
  webhook certificate Secret it rotates itself), its image replaced.
- Kubeflow Trainer v2 and JobSet: Trainer's manifests/overlays/manager (namespace
  kubeflow-system), with JobSet from JobSet's own config/default in place of the release URL
  that overlay downloads; this project's TensorFlow runtimes (kubeflow/trainjob-runtimes.yaml).
- The shared folder: a hostPath PersistentVolume and a claim bound to it in `default`
  (SHARED_PVC), which pods mount at the same path as the host has it; and a ConfigMap
  kube-public/tfx-scaleout-cluster saying so (path, claim, the project's image), which the
  launchers read for their defaults.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

import yaml

from components.training.kubernetes_job import CLUSTER_INFO
from kubeflow.local_cluster import builds, images, node

SHARED_PVC = "tfx-scaleout-shared"
INFO_NAMESPACE, INFO_CONFIGMAP = CLUSTER_INFO
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINJOB_RUNTIMES = os.path.join(PROJECT_ROOT, "kubeflow", "trainjob-runtimes.yaml")

# The image JobSet's config/components/manager names (its own kustomization renames
# `controller` to it; Trainer's third-party/jobset overlay replaces the same name).
JOBSET_IMAGE = "us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset"
# Operator -> the controllers it needs built.
OPERATOR_BUILDS = {
    "training-operator": ("training-operator",),
    "jobset": ("jobset",),
    "trainer": ("jobset", "trainer"),
}
# Operator -> (namespace, its Deployments).
DEPLOYMENTS = {
    "training-operator": ("kubeflow", ("training-operator",)),
    "jobset": ("kubeflow-system", ("jobset-controller-manager",)),
    "trainer": ("kubeflow-system", ("kubeflow-trainer-controller-manager",)),
}


def controllers(operators) -> tuple[str, ...]:
    names = ["coredns"]
    for operator in operators:
        for name in OPERATOR_BUILDS[operator]:
            if name not in names:
                names.append(name)
    return tuple(names)


def scratch_images(built: dict[str, builds.Built]) -> dict[str, images.ScratchImage]:
    """name -> the FROM-scratch image of each built program (the sandbox included)."""
    found = {"pause": images.ScratchImage("pause", built["pause"].paths["pause"], "/pause")}
    for name in builds.CONTROLLERS:
        if name in built:
            path = "/coredns" if name == "coredns" else "/manager"
            # CoreDNS's own image runs as 65532 with a file capability on its binary to bind
            # port 53; a COPY into a scratch image keeps no file capability, so it runs as root
            # with the manifest's NET_BIND_SERVICE (every other capability dropped).
            user = "0:0" if name == "coredns" else "65532:65532"
            found[name] = images.ScratchImage(name, built[name].paths[name], path, user)
    return found


class Kube:
    """kubectl (the one built with the cluster) as the cluster's admin."""

    def __init__(self, layout: node.Layout, kubectl: str):
        self.layout = layout
        self.kubectl_path = kubectl

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        command = [self.kubectl_path, f"--kubeconfig={self.layout.kubeconfig}", *args]
        result = subprocess.run(command, input=stdin, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise builds.BuildFailed(
                f"kubectl {' '.join(args[:3])} failed: "
                f"{(result.stderr or result.stdout).strip()[-3000:]}"
            )
        return result.stdout

    def apply(self, manifests: str) -> None:
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=tfx-scaleout",
            "-f",
            "-",
            stdin=manifests,
        )

    def kustomize(self, folder: str) -> str:
        return self.kubectl("kustomize", "--load-restrictor=LoadRestrictionsNone", folder)

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def node_state(self, name: str) -> str:
        try:
            item = self.get("node", name)
        except builds.BuildFailed:
            return "not registered"
        for condition in item.get("status", {}).get("conditions", []):
            if condition["type"] == "Ready":
                return (
                    "Ready"
                    if condition["status"] == "True"
                    else f"NotReady ({condition.get('reason', '')})"
                )
        return "no Ready condition yet"

    def wait_node_ready(self, name: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.node_state(name)
            if state == "Ready":
                return
            time.sleep(0.5)
        raise builds.BuildFailed(
            f"node {name} is {state} after {timeout:.0f} s "
            f"(kubelet log: {self.layout.log('kubelet')})"
        )


def coredns_manifest(reference: str) -> str:
    source = os.path.join(
        builds.module_dir("k8s.io/kubernetes", builds.kubernetes_version()),
        "cluster",
        "addons",
        "dns",
        "coredns",
        "coredns.yaml.base",
    )
    with open(source) as handle:
        text = handle.read()
    text = (
        text.replace("__DNS__DOMAIN__", node.CLUSTER_DOMAIN)
        .replace("__DNS__SERVER__", node.DNS_SERVICE_IP)
        .replace("__DNS__MEMORY__LIMIT__", "170Mi")
    )
    lines, skip = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("forward . /etc/resolv.conf"):
            skip = True
            continue
        if skip:
            skip = stripped != "}"
            continue
        if stripped == "loop":
            continue
        if stripped.startswith("image: registry.k8s.io/coredns/coredns:"):
            line = line.split("image:")[0] + f"image: {reference}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def shared_volume(shared: str, namespace: str, volume: str = SHARED_PVC, labels=None) -> list[dict]:
    """A hostPath PersistentVolume `volume` on the shared folder and the claim SHARED_PVC bound to
    it in `namespace` (a claim is namespaced, and a volume binds one claim)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": volume,
                "labels": {"app.kubernetes.io/part-of": "tfx-scaleout", **(labels or {})},
            },
            "spec": {
                "capacity": {"storage": "100Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": shared, "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": SHARED_PVC},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": SHARED_PVC, "namespace": namespace, "labels": labels or {}},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "100Gi"}},
            },
        },
    ]


def shared_volume_manifests(shared: str, image: str) -> str:
    documents = [
        *shared_volume(shared, "default"),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": INFO_CONFIGMAP, "namespace": INFO_NAMESPACE},
            "data": {
                "shared": shared,
                "pvc": SHARED_PVC,
                "image": image,
                # hostPath volumes keep the host's owners: the pods write as the folder's owner.
                "run_as_user": str(os.stat(shared).st_uid),
            },
        },
    ]
    return yaml.safe_dump_all(documents)


def install_base(kube: Kube, layout: node.Layout, references: dict[str, str], image: str) -> None:
    kube.apply(coredns_manifest(references["coredns"]))
    kube.apply(shared_volume_manifests(layout.shared, image))


def _render(kube: Kube, kustomization: dict, extra_files: dict[str, str] | None = None) -> str:
    with tempfile.TemporaryDirectory(prefix="tfxs-kustomize-") as folder:
        for name, text in (extra_files or {}).items():
            with open(os.path.join(folder, name), "w") as handle:
                handle.write(text)
        # Paths into Go's module cache, relative (kustomize refuses absolute resource paths).
        resources = []
        for resource in kustomization.get("resources", []):
            resources.append(
                os.path.relpath(resource, folder) if os.path.isabs(resource) else resource
            )
        kustomization["resources"] = resources
        with open(os.path.join(folder, "kustomization.yaml"), "w") as handle:
            yaml.safe_dump(kustomization, handle)
        return kube.kustomize(folder)


def _namespace(name: str) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _image(reference: str, name: str) -> dict:
    repository, tag = reference.rsplit(":", 1)
    return {"name": name, "newName": repository, "newTag": tag}


def training_operator_manifests(kube: Kube, reference: str) -> str:
    controller = builds.CONTROLLERS["training-operator"]
    base = os.path.join(
        builds.module_dir(controller.module, controller.version), "manifests", "base"
    )
    return _render(
        kube,
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": "kubeflow",
            "resources": [base, "namespace.yaml"],
            "images": [_image(reference, "kubeflow/training-operator")],
            "secretGenerator": [
                {
                    "name": "training-operator-webhook-cert",
                    "options": {"disableNameSuffixHash": True},
                }
            ],
        },
        {"namespace.yaml": _namespace("kubeflow")},
    )


def trainer_manifests(kube: Kube, references: dict[str, str], with_trainer: bool) -> str:
    jobset = builds.CONTROLLERS["jobset"]
    jobset_default = os.path.join(
        builds.module_dir(jobset.module, jobset.version), "config", "default"
    )
    resources = ["namespace.yaml", jobset_default]
    kustomization: dict = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "kubeflow-system",
        "images": [_image(references["jobset"], JOBSET_IMAGE)],
        # JobSet's own Namespace object goes: everything lives in kubeflow-system (as Trainer's
        # third-party/jobset patch does).
        "patches": [
            {
                "target": {"kind": "Namespace", "name": "jobset-system"},
                "patch": "$patch: delete\napiVersion: v1\nkind: Namespace\n"
                "metadata:\n  name: jobset-system\n",
            }
        ],
    }
    if with_trainer:
        trainer = builds.CONTROLLERS["trainer"]
        manifests = os.path.join(
            builds.module_dir(trainer.module, trainer.version), "manifests", "base"
        )
        resources += [
            os.path.join(manifests, part) for part in ("crds", "manager", "rbac", "webhook")
        ]
        kustomization["images"].append(
            _image(references["trainer"], "ghcr.io/kubeflow/trainer/trainer-controller-manager")
        )
        kustomization["secretGenerator"] = [
            {
                "name": "kubeflow-trainer-webhook-cert",
                "namespace": "kubeflow-system",
                "options": {"disableNameSuffixHash": True},
            }
        ]
        kustomization["configMapGenerator"] = [
            {
                "name": "kubeflow-trainer-public",
                "literals": [f"kubeflow_trainer_version={trainer.version}"],
                "options": {"disableNameSuffixHash": True},
            }
        ]
    kustomization["resources"] = resources
    return _render(kube, kustomization, {"namespace.yaml": _namespace("kubeflow-system")})


def install_operators(kube: Kube, built, references: dict[str, str], operators) -> None:
    if "training-operator" in operators:
        kube.apply(training_operator_manifests(kube, references["training-operator"]))
    if "jobset" in operators or "trainer" in operators:
        kube.apply(trainer_manifests(kube, references, "trainer" in operators))


def deployments(operators) -> list[tuple[str, str]]:
    """(namespace, name) of CoreDNS's and every operator's Deployment."""
    targets = [("kube-system", "coredns")]
    for operator in operators:
        namespace, names = DEPLOYMENTS[operator]
        targets += [(namespace, name) for name in names]
    return targets


def wait_ready(kube: Kube, operators, timeout: float = 300) -> None:
    """CoreDNS and every operator Deployment Available (its webhook serving: the operators'
    readiness probes wait for their certificates)."""
    for namespace, name in deployments(operators):
        try:
            kube.kubectl(
                "-n",
                namespace,
                "rollout",
                "status",
                f"deployment/{name}",
                f"--timeout={int(timeout)}s",
            )
        except builds.BuildFailed as error:
            raise builds.BuildFailed(
                f"deployment {namespace}/{name} not ready: {error}\n{pod_report(kube, namespace)}"
            ) from None


def pod_report(kube: Kube, namespace: str) -> str:
    """The namespace's pods, and the last log lines of each one that is not ready (its previous
    container's when it restarted)."""
    lines = [kube.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False)]
    try:
        pods = kube.get("-n", namespace, "pods")["items"]
    except builds.BuildFailed:
        return lines[0]
    for pod in pods:
        statuses = pod.get("status", {}).get("containerStatuses") or []
        for status in statuses:
            if status.get("ready"):
                continue
            name = pod["metadata"]["name"]
            previous = ["--previous"] if status.get("restartCount") else []
            log = kube.kubectl(
                "-n",
                namespace,
                "logs",
                name,
                "-c",
                status["name"],
                "--tail=15",
                *previous,
                check=False,
            )
            lines.append(f"--- {name}/{status['name']} log:\n{log.strip()}")
    return "\n".join(lines)


def deployment_states(kube: Kube, operators) -> list[str]:
    lines = []
    for namespace, name in deployments(operators):
        try:
            item = kube.get("-n", namespace, "deployment", name)
            ready = item.get("status", {}).get("readyReplicas", 0)
            wanted = item.get("spec", {}).get("replicas", 1)
            lines.append(f"{name}: {ready}/{wanted} ready")
        except builds.BuildFailed:
            lines.append(f"{name}: not installed")
    return lines
