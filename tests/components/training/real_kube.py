"""A real Kubernetes control plane on 127.0.0.1 for the launcher tests: kube-apiserver and
kube-controller-manager (its garbage collector only) built from the Kubernetes source, and
Debian's etcd; no kubelet, no scheduler, no operators.

The binaries are the local cluster's Kubernetes build (kubeflow/local_cluster/builds.py: the Go
module kubeflow/local_cluster/go/kubernetes, k8s.io/kubernetes at a release tag, built once per
machine and cached under ~/.cache/tfx-scaleout/kubernetes/<version>-<hash of go.mod and go.sum>/).
The API server runs with
RBAC authorization, a self-signed serving certificate for 127.0.0.1, a static token for the
tests' cluster admin (group system:masters), service-account tokens signed by a key made per
session (TokenRequest), and the OwnerReferencesPermissionEnforcement admission plugin (the rule
that blockOwnerDeletion: false avoids).

`ControlPlane.start` returns once etcd is healthy and /readyz answers; `stop` ends every process
it started (the fixture calls it whatever happened). Each process logs to a file in the
session's directory; its tail goes into the error when it does not come up.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

from kubeflow.local_cluster import builds, host

HERE = os.path.dirname(os.path.abspath(__file__))
CRD_DIR = os.path.join(HERE, "crds")
ADMIN_USER = "tfx-scaleout-test-admin"
Unavailable = builds.Unavailable
# What these tests run: the API server, and kube-controller-manager for its garbage collector.
TOOLS = ("kube-apiserver", "kube-controller-manager")


def build(tools: tuple[str, ...] = TOOLS, say=lambda line: None) -> builds.Built:
    """The binaries, from the local cluster's Kubernetes build (all of its tools are built in
    one `go build` and cached together: kubeflow/local_cluster/builds.py)."""
    built = builds.build_kubernetes(say=say)
    return builds.Built({tool: built.paths[tool] for tool in tools}, built.seconds)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_serving_certificate(folder: str) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and localhost (its own CA), and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tfx-scaleout test kube-apiserver")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = os.path.join(folder, "serving.crt")
    with open(cert_path, "wb") as handle:
        handle.write(certificate.public_bytes(serialization.Encoding.PEM))
    return cert_path, _write_key(os.path.join(folder, "serving.key"), key)


def write_service_account_key(folder: str) -> str:
    """The key that signs (and verifies) service-account tokens."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return _write_key(os.path.join(folder, "service-accounts.key"), key)


def _write_key(path: str, key) -> str:
    from cryptography.hazmat.primitives import serialization

    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
        handle.write(pem)
    return path


class ApiServer:
    """A kube-apiserver by URL, CA file and the cluster admin's token: `api_client(token)` is a
    kubernetes client for it (the admin's without a token); `apply`, `get`, `delete` and
    `request` call it as the admin. The ControlPlane below is one; the local cluster's API
    server (tests/kubeflow/conftest.py) another."""

    def __init__(self, url: str = "", ca_file: str = "", admin_token: str = ""):
        self._url = url
        self.ca_file = ca_file
        self.admin_token = admin_token
        self._context: ssl.SSLContext | None = None
        self._discovery: dict[str, dict[str, tuple[str, str, bool]]] = {}

    @property
    def url(self) -> str:
        return self._url

    # --- clients ------------------------------------------------------------------------------

    def configuration(self, token: str | None = None):
        from kubernetes import client as k8s

        configuration = k8s.Configuration(host=self.url)
        configuration.ssl_ca_cert = self.ca_file
        configuration.api_key = {"authorization": token or self.admin_token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        configuration.retries = 0
        return configuration

    def api_client(self, token: str | None = None):
        from kubernetes import client as k8s

        return k8s.ApiClient(self.configuration(token))

    def write_kubeconfig(self, path: str, token: str, namespace: str) -> str:
        """A kubeconfig for `token` (what a workstation's launcher loads)."""
        import yaml

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.url, "certificate-authority": self.ca_file},
                }
            ],
            "users": [{"name": "test", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "test",
                    "context": {"cluster": "test", "user": "test", "namespace": namespace},
                }
            ],
            "current-context": "test",
        }
        with open(path, "w") as handle:
            yaml.safe_dump(config, handle)
        return path

    # --- objects by apiVersion and kind, as the admin (plain REST: CRDs are ~1 MB each) -------

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        """One call as the cluster admin; an error status raises the kubernetes client's
        ApiException (status, reason, body), as the client's own calls do."""
        from kubernetes.client.exceptions import ApiException

        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.admin_token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        call = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(call, context=self._ssl(), timeout=60) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            failure = ApiException(status=error.code, reason=error.reason)
            failure.body = error.read().decode(errors="replace")
            raise failure from None

    def _ssl(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = ssl.create_default_context(cafile=self.ca_file)
        return self._context

    def resource_path(self, api_version: str, kind: str, namespace: str = "") -> str:
        """The collection path of `kind` (namespaced ones in `namespace`), from the server's
        discovery document of its group version (read once)."""
        if api_version not in self._discovery:
            prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            resources = self.request("GET", prefix)["resources"]
            self._discovery[api_version] = {
                r["kind"]: (prefix, r["name"], r["namespaced"])
                for r in resources
                if "/" not in r["name"]
            }
        prefix, plural, namespaced = self._discovery[api_version][kind]
        if namespaced:
            assert namespace, f"{kind} is namespaced: name its namespace"
            return f"{prefix}/namespaces/{namespace}/{plural}"
        return f"{prefix}/{plural}"

    def is_namespaced(self, api_version: str, kind: str) -> bool:
        self.resource_path(api_version, kind, "-")
        return self._discovery[api_version][kind][2]

    def apply(self, document: dict, namespace: str = "", dry_run: bool = False) -> dict:
        """Creates `document` (in `namespace` when it is namespaced and names none); returns
        the object the server stored (or would store: server-side dry run)."""
        where = document["metadata"].get("namespace") or namespace
        path = self.resource_path(document["apiVersion"], document["kind"], where)
        return self.request("POST", path + ("?dryRun=All" if dry_run else ""), document)

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> dict:
        return self.request("GET", f"{self.resource_path(api_version, kind, namespace)}/{name}")

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> dict:
        return self.request("DELETE", f"{self.resource_path(api_version, kind, namespace)}/{name}")


class ControlPlane(ApiServer):
    """etcd, kube-apiserver and (given its binary) kube-controller-manager, their files in
    `folder`, on a loopback port."""

    def __init__(
        self,
        folder: str,
        apiserver: str,
        etcd: str | None = None,
        controller_manager: str | None = None,
    ):
        self.folder = folder
        self.apiserver = apiserver
        # kube-controller-manager, run with its garbage collector only (owner references).
        self.controller_manager = controller_manager
        self.etcd = etcd or shutil.which("etcd")
        if self.etcd is None:
            raise Unavailable("etcd is Debian's etcd-server: apt-get install etcd-server")
        super().__init__(admin_token=secrets.token_hex(16))
        self.port = 0
        # name -> process, in start order (kept after stop, for inspection).
        self.processes: dict[str, subprocess.Popen] = {}
        self._logs: list = []

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        log = open(os.path.join(self.folder, f"{name}.log"), "wb")  # noqa: SIM115 (kept open)
        self._logs.append(log)
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # SIGTERM when the test process dies, even killed: no server outlives its session.
            preexec_fn=host.die_with_parent,
        )
        self.processes[name] = process
        return process

    def log_tail(self, name: str, lines: int = 25) -> str:
        with open(os.path.join(self.folder, f"{name}.log"), errors="replace") as handle:
            return "\n".join(handle.read().splitlines()[-lines:])

    def start(self, timeout: float = 180.0) -> ControlPlane:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        etcd_client, etcd_peer = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                self.etcd,
                "--name=test",
                f"--data-dir={os.path.join(self.folder, 'etcd')}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=test=http://127.0.0.1:{etcd_peer}",
            ],
        )
        self._wait_etcd(etcd_client, timeout)
        self.ca_file, serving_key = write_serving_certificate(self.folder)
        account_key = write_service_account_key(self.folder)
        tokens = os.path.join(self.folder, "tokens.csv")
        with open(tokens, "w") as handle:
            handle.write(f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        self.port = free_port()
        self._spawn(
            "kube-apiserver",
            [
                self.apiserver,
                f"--etcd-servers=http://127.0.0.1:{etcd_client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={self.ca_file}",
                f"--tls-private-key-file={serving_key}",
                f"--cert-dir={self.folder}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={account_key}",
                f"--service-account-signing-key-file={account_key}",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--profiling=false",
                # The "kubernetes" Service's endpoint would be 127.0.0.1, which it may not be.
                "--endpoint-reconciler-type=none",
            ],
        )
        self._wait_ready(timeout)
        if self.controller_manager:
            kubeconfig = self.write_kubeconfig(
                os.path.join(self.folder, "admin.kubeconfig"), self.admin_token, "default"
            )
            self._spawn(
                "kube-controller-manager",
                [
                    self.controller_manager,
                    f"--kubeconfig={kubeconfig}",
                    "--controllers=garbagecollector",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                ],
            )

    def _wait_etcd(self, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_running()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as health:
                    if json.loads(health.read()).get("health") == "true":
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"etcd not healthy after {timeout:.0f}s:\n{self.log_tail('etcd')}")

    def _check_running(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {process.returncode}:\n{self.log_tail(name)}"
                )

    def _wait_ready(self, timeout: float) -> None:
        context = ssl.create_default_context(cafile=self.ca_file)
        request = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
        )
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_running()
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as error:
                last = str(error)
            time.sleep(0.5)
        raise RuntimeError(
            f"kube-apiserver not ready after {timeout:.0f}s ({last}):\n"
            f"{self.log_tail('kube-apiserver')}"
        )

    def stop(self) -> None:
        """In reverse start order (the controllers, the API server, etcd); each given 10 s to
        exit on SIGTERM, then killed."""
        for process in reversed(self.processes.values()):
            host.stop_process(process, grace=10)
        for log in self._logs:
            with contextlib.suppress(OSError):
                log.close()
        self._logs.clear()


def install_crds(plane: ControlPlane, timeout: float = 60.0) -> list[str]:
    """Creates every vendored CRD and waits until each is Established; returns their names."""
    import yaml

    names = []
    for file_name in sorted(os.listdir(CRD_DIR)):
        if not file_name.endswith(".yaml"):
            continue
        with open(os.path.join(CRD_DIR, file_name)) as handle:
            crd = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        plane.apply(crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            crd = plane.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                pending.discard(name)
        if pending:
            time.sleep(0.2)
    if pending:
        raise RuntimeError(f"CRDs not established after {timeout:.0f}s: {sorted(pending)}")
    return names
