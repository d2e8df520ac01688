"""A real Kubernetes control plane on 127.0.0.1 for the launcher tests: kube-apiserver built from
the Kubernetes source and Debian's etcd, no kubelet, no scheduler, no controllers.

kube-apiserver comes from a Go module build (kube_build/go.mod: k8s.io/kubernetes at a release
tag, each staging module replaced by its published k8s.io/<module> version; go.sum pins them
all), built with `-trimpath -ldflags='-s -w'` once per machine and kept under
~/.cache/tfx-scaleout/kubernetes/<version>-<hash of go.mod and go.sum>/ ($XDG_CACHE_HOME
respected). The server runs with RBAC authorization, a self-signed serving certificate for
127.0.0.1, a static token for the test's cluster admin (group system:masters), service-account
tokens signed by a key made per session (TokenRequest), and the OwnerReferencesPermission-
Enforcement admission plugin (the rule blockOwnerDeletion: false avoids).

`ControlPlane.start` returns once /readyz answers; `stop` ends both processes (the fixture calls
it whatever happened). What the API server logs is kept in the session's directory and its
tail is put into the error when it does not come up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import hashlib
import ipaddress
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_MODULE = os.path.join(HERE, "kube_build")
CRD_DIR = os.path.join(HERE, "crds")
# Go flags of the lean build: no file paths or symbol tables in the binary, read-only modules.
GO_BUILD_FLAGS = ["-trimpath", "-ldflags=-s -w"]
ADMIN_USER = "tfx-scaleout-test-admin"


class Unavailable(RuntimeError):
    """What the control plane needs is not on this machine (Go, etcd); the message says what."""


def kubernetes_version(go_mod: str | None = None) -> str:
    """The k8s.io/kubernetes release kube_build/go.mod requires (e.g. v1.34.4)."""
    with open(go_mod or os.path.join(BUILD_MODULE, "go.mod")) as handle:
        found = re.search(r"^require k8s\.io/kubernetes (v\S+)$", handle.read(), re.M)
    if not found:
        raise RuntimeError("kube_build/go.mod does not require k8s.io/kubernetes at a version")
    return found.group(1)


def _go_version_needed() -> tuple[int, int]:
    with open(os.path.join(BUILD_MODULE, "go.mod")) as handle:
        found = re.search(r"^go (\d+)\.(\d+)", handle.read(), re.M)
    assert found, "kube_build/go.mod has no go line"
    return int(found.group(1)), int(found.group(2))


def cache_dir() -> str:
    """Where this build of the binaries is kept: per Kubernetes version and module pins."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        with open(os.path.join(BUILD_MODULE, name), "rb") as handle:
            digest.update(handle.read())
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = f"{kubernetes_version()}-{digest.hexdigest()[:12]}"
    return os.path.join(root, "tfx-scaleout", "kubernetes", key)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise Unavailable("kube-apiserver is built from source: install Go (go.dev/dl)")
    output = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout
    found = re.match(r"go(\d+)\.(\d+)", output.strip())
    needed = _go_version_needed()
    if not found or (int(found.group(1)), int(found.group(2))) < needed:
        raise Unavailable(
            f"kube-apiserver {kubernetes_version()} needs Go >= {needed[0]}.{needed[1]}, "
            f"found {output.strip() or 'none'}"
        )
    return go


@dataclasses.dataclass(frozen=True)
class Built:
    path: str
    # Seconds the build took in this process; 0.0 when the cached binary was used.
    seconds: float


def build(tool: str = "kube-apiserver", say=lambda line: None) -> Built:
    """The binary of k8s.io/kubernetes/cmd/<tool>: cached, else built (under a lock, so that
    two test sessions on one machine build it once)."""
    folder = cache_dir()
    binary = os.path.join(folder, tool)
    if os.access(binary, os.X_OK):
        return Built(binary, 0.0)
    go = _go()
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f".{tool}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(binary, os.X_OK):
            return Built(binary, 0.0)
        say(f"tests: building {tool} {kubernetes_version()} from source (once per machine)")
        started = time.monotonic()
        partial = f"{binary}.partial"
        flags = f"{os.environ.get('GOFLAGS', '')} -mod=readonly -modcacherw".strip()
        env = dict(os.environ, GOFLAGS=flags)
        result = subprocess.run(
            [go, "build", *GO_BUILD_FLAGS, "-o", partial, f"k8s.io/kubernetes/cmd/{tool}"],
            cwd=BUILD_MODULE,
            env=env,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
            raise RuntimeError(f"go build of {tool} failed:\n{tail}")
        os.replace(partial, binary)
        return Built(binary, time.monotonic() - started)


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
    key_path = os.path.join(folder, "serving.key")
    with open(cert_path, "wb") as handle:
        handle.write(certificate.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


def write_service_account_key(folder: str) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = os.path.join(folder, "service-accounts.key")
    with open(path, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return path


class ControlPlane:
    """etcd + kube-apiserver in `folder`; `client(token)` talks to it through the kubernetes
    client, as the cluster admin by default."""

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
        self.admin_token = secrets.token_hex(16)
        self.port = 0
        self.ca_file = ""
        self._processes: list[tuple[str, subprocess.Popen]] = []
        self._logs: list = []

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        log = open(os.path.join(self.folder, f"{name}.log"), "wb")  # noqa: SIM115 (kept open)
        self._logs.append(log)
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self._processes.append((name, process))
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

    def _wait_ready(self, timeout: float) -> None:
        context = ssl.create_default_context(cafile=self.ca_file)
        request = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
        )
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name, process in self._processes:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {process.returncode}:\n{self.log_tail(name)}"
                    )
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
        for _, process in reversed(self._processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self._processes.clear()
        for log in self._logs:
            with contextlib.suppress(OSError):
                log.close()
        self._logs.clear()

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

    def dynamic(self, token: str | None = None):
        """A kubernetes DynamicClient: any object by apiVersion and kind (CRDs included)."""
        from kubernetes.dynamic import DynamicClient

        return DynamicClient(self.api_client(token))

    def apply(self, document: dict, namespace: str = "", dry_run: bool = False) -> dict:
        """Creates `document` (in `namespace` when it is namespaced and names none) as the
        admin; returns the object the server stored (or would store: server-side dry run)."""
        resource = self.dynamic().resources.get(
            api_version=document["apiVersion"], kind=document["kind"]
        )
        options: dict = {"body": document}
        if resource.namespaced:
            options["namespace"] = document["metadata"].get("namespace") or namespace
        if dry_run:
            options["query_params"] = [("dryRun", "All")]
        return resource.create(**options).to_dict()


def install_crds(plane: ControlPlane, timeout: float = 60.0) -> list[str]:
    """Creates every vendored CRD and waits until each is Established; returns their names."""
    import yaml

    names = []
    for file_name in sorted(os.listdir(CRD_DIR)):
        if not file_name.endswith(".yaml"):
            continue
        with open(os.path.join(CRD_DIR, file_name)) as handle:
            crd = yaml.safe_load(handle)
        plane.apply(crd)
        names.append(crd["metadata"]["name"])
    crds = plane.dynamic().resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for name in sorted(pending):
            conditions = (crds.get(name=name).to_dict().get("status") or {}).get("conditions")
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions or []):
                pending.discard(name)
        if pending:
            time.sleep(0.2)
    if pending:
        raise RuntimeError(f"CRDs not established after {timeout:.0f}s: {sorted(pending)}")
    return names
