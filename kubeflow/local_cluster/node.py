"""The local cluster's layout, addresses and daemons: where each file goes, and the command line
and configuration of each process the supervisor starts, in start order.

Everything listens inside the cluster's network namespace: the node's address NODE_IP and the
pod network POD_CIDR exist only there. The host reaches the node through one veth pair (HOST_IP
<-> NODE_IP, a /30), the API server at https://NODE_IP:6443; the namespace has no default route,
so nothing a pod sends is routed off the machine.
"""

from __future__ import annotations

import dataclasses
import json
import os

import yaml

from kubeflow.local_cluster.builds import cache_root

NETNS = "tfx-scaleout"
HOST_VETH = "tfxs-host"
NODE_VETH = "tfxs-node"
HOST_IP = "10.203.0.1"
NODE_IP = "10.203.0.2"
LINK_PREFIX = 30
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/24"
API_SERVICE_IP = "10.96.0.1"
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
NODE_NAME = "tfx-scaleout-node"
API_PORT = 6443
# Every cgroup of the cluster (daemons under system/, pods under kubepods/) in every hierarchy.
CGROUP_ROOT = "/tfx-scaleout"
BRIDGE = "cni0"
RUNTIME_DIR = "/run/tfx-scaleout"
# Host folders the kubelet, containerd and the CNI plugins write to whatever their configuration
# says (pod network namespaces, shim sockets, container log links, device-plugin sockets, CNI
# results): inside the supervisor's mount namespace each gets a tmpfs of its own, so nothing of
# the cluster lands in the host's copies and all of it ends with the namespace. `up` creates the
# ones the host lacks (as mount points) and `down` removes those again.
PRIVATE_DIRS = (
    "/run/netns",
    "/run/containerd",
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/var/log/pods",
    "/var/log/containers",
    "/usr/libexec/kubernetes",
)


def default_root() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(state, "tfx-scaleout", "cluster")


@dataclasses.dataclass(frozen=True)
class Layout:
    """The cluster's folders. `run` holds what one `up` made (removed by `down`); `shared` is the
    host folder every pod may mount, kept across `down`; containerd's image store is a cache."""

    root: str

    @property
    def run(self) -> str:
        return os.path.join(self.root, "run")

    @property
    def shared(self) -> str:
        return os.path.join(self.root, "shared")

    @property
    def logs(self) -> str:
        return os.path.join(self.run, "logs")

    @property
    def pki(self) -> str:
        return os.path.join(self.run, "pki")

    @property
    def containerd_root(self) -> str:
        return os.path.join(cache_root(), "cluster", "containerd")

    @property
    def containerd_state(self) -> str:
        """Short and fixed (one cluster per machine): containerd's sockets live here, and a
        unix socket's path must stay under 104 bytes whatever the root is."""
        return RUNTIME_DIR

    @property
    def containerd_socket(self) -> str:
        return os.path.join(self.containerd_state, "containerd.sock")

    @property
    def kubelet_root(self) -> str:
        return os.path.join(self.run, "kubelet")

    @property
    def kubeconfig(self) -> str:
        return os.path.join(self.run, "admin.kubeconfig")

    @property
    def plan(self) -> str:
        return os.path.join(self.run, "plan.json")

    @property
    def pidfile(self) -> str:
        return os.path.join(self.run, "supervisor.pid")

    @property
    def supervisor_log(self) -> str:
        return os.path.join(self.logs, "supervisor.log")

    @property
    def created_dirs(self) -> str:
        """The PRIVATE_DIRS that `up` created on the host (kept outside run/ for `down`)."""
        return os.path.join(self.root, "created-host-dirs.json")

    @property
    def info(self) -> str:
        """What `status` prints beside the live states (image, components), written by `up`."""
        return os.path.join(self.run, "cluster.json")

    def log(self, name: str) -> str:
        return os.path.join(self.logs, f"{name}.log")


@dataclasses.dataclass(frozen=True)
class Daemon:
    """One process of the node, and how the supervisor knows it is up."""

    name: str
    argv: list[str]
    # {"http": URL, "ca": PATH|None, "token": STR|None}, {"socket": PATH}, {"cri": SOCKET} or
    # {"tcp": "HOST:PORT"}
    ready: dict
    timeout: float = 120.0
    env: dict = dataclasses.field(default_factory=dict)  # added to the supervisor's

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    return path


def containerd_config(layout: Layout, runc: str, cni_bin: str, sandbox_image: str) -> str:
    """containerd 1.6 (config version 2): its own root, state and socket; CRI with runc on
    cgroupfs, overlayfs, the CNI configuration of this cluster, the local sandbox image, and
    restrict_oom_score_adj (this machine cannot lower oom_score_adj: without it every sandbox
    fails with runc's `can't get final child's PID from pipe: EOF`)."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    text = f"""version = 2
root = "{layout.containerd_root}"
state = "{layout.containerd_state}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{layout.containerd_socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.containerd_state}/opt"

[{cri}]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{layout.run}/cni/net.d"
"""
    return _write(os.path.join(layout.containerd_state, "config.toml"), text)


def cni_config(layout: Layout) -> str:
    """One bridge for the pods (the node's gateway address on it), host-local addresses; no
    masquerading: nothing leaves the namespace."""
    config = {
        "cniVersion": "1.0.0",
        "name": "tfx-scaleout",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": os.path.join(layout.run, "cni", "ipam"),
                },
            }
        ],
    }
    path = os.path.join(layout.run, "cni", "net.d", "10-tfx-scaleout.conflist")
    return _write(path, json.dumps(config, indent=2))


def kubelet_config(layout: Layout, pki) -> str:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": pki.ca_cert},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": pki.kubelet_cert,
        "tlsPrivateKeyFile": pki.kubelet_key,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": CGROUP_ROOT,
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [DNS_SERVICE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        # No upstream resolver: pods resolve cluster names only.
        "resolvConf": _write(
            os.path.join(layout.run, "resolv.conf"),
            "# tfx-scaleout local cluster: cluster names only, no upstream resolver\n",
        ),
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        # A shared developer machine: no eviction for its disk use, no image garbage collection
        # of the project's image.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "protectKernelDefaults": False,
        "maxPods": 60,
    }
    return _write(os.path.join(layout.kubelet_root, "config.yaml"), yaml.safe_dump(config))


def kube_proxy_config(layout: Layout, kubeconfig: str) -> str:
    """iptables mode in the cluster's namespace. masqueradeAll: a pod that reaches a Service
    backed by a pod on the same bridge gets its reply through the node (no br_netfilter
    needed); conntrack limits are left as the kernel has them."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "mode": "iptables",
        "clusterCIDR": POD_CIDR,
        "hostnameOverride": NODE_NAME,
        "bindAddress": NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "nodePortAddresses": [f"{NODE_IP}/32"],
        "iptables": {"masqueradeAll": True},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
    return _write(os.path.join(layout.run, "kube-proxy", "config.yaml"), yaml.safe_dump(config))


def daemons(layout: Layout, pki, binaries: dict[str, str], tools: dict[str, str]) -> list[Daemon]:
    """The node's processes in start order. `binaries`: the Kubernetes programs; `tools`:
    etcd, containerd, runc and the CNI plugin folder."""
    from kubeflow.local_cluster import pki as pki_lib

    def kubeconfig(identity: str) -> str:
        return pki_lib.write_kubeconfig(
            os.path.join(layout.run, f"{identity}.kubeconfig"),
            f"https://{NODE_IP}:{API_PORT}",
            pki.ca_cert,
            pki.tokens[identity],
            identity,
        )

    api = f"https://{NODE_IP}:{API_PORT}"
    admin = pki.tokens["admin"]
    issuer = f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}"
    return [
        Daemon(
            "etcd",
            [
                tools["etcd"],
                "--name=tfx-scaleout",
                f"--data-dir={os.path.join(layout.run, 'etcd')}",
                "--listen-client-urls=http://127.0.0.1:2379",
                "--advertise-client-urls=http://127.0.0.1:2379",
                "--listen-peer-urls=http://127.0.0.1:2380",
                "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                "--initial-cluster=tfx-scaleout=http://127.0.0.1:2380",
            ],
            {"http": "http://127.0.0.1:2379/health"},
        ),
        Daemon(
            "kube-apiserver",
            [
                binaries["kube-apiserver"],
                "--etcd-servers=http://127.0.0.1:2379",
                "--bind-address=0.0.0.0",
                f"--advertise-address={NODE_IP}",
                f"--secure-port={API_PORT}",
                f"--tls-cert-file={pki.apiserver_cert}",
                f"--tls-private-key-file={pki.apiserver_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--token-auth-file={pki.token_file}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
                f"--service-account-issuer={issuer}",
                f"--service-account-key-file={pki.service_account_key}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                f"--api-audiences={issuer},pipelines.kubeflow.org",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--kubelet-client-certificate={pki.kubelet_client_cert}",
                f"--kubelet-client-key={pki.kubelet_client_key}",
                f"--kubelet-certificate-authority={pki.ca_cert}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--allow-privileged=true",
                "--profiling=false",
                # Debian's etcd 3.4 has no watch progress requests: with the watch cache, a
                # controller's informer saw new objects 10-18 s late (Argo's task results, so
                # its controller marked KFP's drivers Succeeded without their outputs);
                # served from etcd, they arrive at once.
                "--watch-cache=false",
                f"--cert-dir={layout.pki}",
            ],
            {"http": f"{api}/readyz", "ca": pki.ca_cert, "token": admin},
        ),
        Daemon(
            "kube-controller-manager",
            [
                binaries["kube-controller-manager"],
                f"--kubeconfig={kubeconfig('controller-manager')}",
                "--bind-address=127.0.0.1",
                "--secure-port=10257",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca_cert}",
                "--use-service-account-credentials=true",
                "--cluster-name=tfx-scaleout",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--profiling=false",
            ],
            {"http": "https://127.0.0.1:10257/healthz"},
        ),
        Daemon(
            "kube-scheduler",
            [
                binaries["kube-scheduler"],
                f"--kubeconfig={kubeconfig('scheduler')}",
                "--bind-address=127.0.0.1",
                "--secure-port=10259",
                "--leader-elect=false",
                "--profiling=false",
            ],
            {"http": "https://127.0.0.1:10259/healthz"},
        ),
        Daemon(
            "containerd",
            [
                tools["containerd"],
                "--config="
                + containerd_config(layout, tools["runc"], tools["cni"], tools["sandbox_image"]),
            ],
            {"cri": layout.containerd_socket},
        ),
        Daemon(
            "kubelet",
            [
                binaries["kubelet"],
                f"--config={kubelet_config(layout, pki)}",
                f"--kubeconfig={kubeconfig('kubelet')}",
                f"--node-ip={NODE_IP}",
                f"--hostname-override={NODE_NAME}",
                # Its default root, /var/lib/kubelet: a private tmpfs of the node (PRIVATE_DIRS),
                # and short enough for the unix sockets the kubelet makes under it.
                "--root-dir=/var/lib/kubelet",
                f"--cert-dir={os.path.join(layout.kubelet_root, 'pki')}",
            ],
            {"http": "http://127.0.0.1:10248/healthz"},
        ),
        Daemon(
            "kube-proxy",
            [
                binaries["kube-proxy"],
                f"--config={kube_proxy_config(layout, kubeconfig('kube-proxy'))}",
            ],
            {"http": "http://127.0.0.1:10256/healthz"},
        ),
    ]
