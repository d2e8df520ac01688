"""`up`, `status` and `down` of the local cluster, as a list of named steps (kind's
pkg/cluster/internal/create does the same): each step says what it starts, and a failure names
the step and ends with the log that explains it. `down` removes everything `up` made, found on
the host (processes by cgroup and network namespace, cgroups, mounts, interfaces, the
namespace), also after a failed or killed `up`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from kubeflow.local_cluster import addons, builds, host, images, kfp, kfp_host, node, pki, states

Say = Callable[[str], None]

# Debian packages `up` drives: program -> package.
PROGRAMS = {
    "etcd": "etcd-server",
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "podman": "podman",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "ip": "iproute2",
    "gcc": "gcc",
}
# What `up --kfp` drives besides (program -> package).
KFP_PROGRAMS = {"mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server"}
CNI_BIN = "/usr/lib/cni"
SANDBOX_IMAGE = "pause"


class ClusterError(RuntimeError):
    """One line a user can act on (then, where there is one, the log that explains it)."""


def _programs(programs: dict[str, str], cni: bool) -> dict[str, str]:
    """The programs' paths; one line naming the Debian packages missing."""
    paths = {program: host.which(program) for program in programs}
    missing = sorted({programs[p] for p, path in paths.items() if path is None})
    if cni and not os.path.exists(os.path.join(CNI_BIN, "bridge")):
        missing.append("containernetworking-plugins")
    if missing:
        raise ClusterError(
            f"Debian packages missing: {', '.join(missing)}: "
            f"apt-get install -y {' '.join(sorted(missing))}"
        )
    return {program: path for program, path in paths.items() if path}


def preflight(layout: node.Layout, with_kfp: bool = False) -> dict[str, str]:
    """The bad states `up` refuses, each as one line; returns the programs' paths."""
    if os.geteuid() != 0:
        raise ClusterError(
            "the local cluster needs root (network namespace, cgroups, containerd): run it as root"
        )
    paths = _programs({**PROGRAMS, **(KFP_PROGRAMS if with_kfp else {})}, cni=True)
    if running_supervisor(layout):
        raise ClusterError(
            f"a cluster is already up (kubeconfig: {layout.kubeconfig}): "
            "`python -m kubeflow.local_cluster down` first"
        )
    if host.netns_exists() or host.link_exists(node.HOST_VETH):
        raise ClusterError(
            f"network namespace {node.NETNS} or interface {node.HOST_VETH} is in use (a cluster "
            "left behind?): `python -m kubeflow.local_cluster down` removes it"
        )
    if host.cgroup_dirs():
        raise ClusterError(
            f"cgroup {node.CGROUP_ROOT} exists (a cluster left behind?): "
            "`python -m kubeflow.local_cluster down` removes it"
        )
    overlapping = host.overlapping_routes()
    if overlapping:
        raise ClusterError(
            f"this machine routes addresses the cluster uses ({node.HOST_IP}/{node.LINK_PREFIX}, "
            f"{node.POD_CIDR}, {node.SERVICE_CIDR}): {'; '.join(overlapping)}"
        )
    return paths


def running_supervisor(layout: node.Layout) -> int | None:
    with contextlib.suppress(OSError, ValueError), open(layout.pidfile) as handle:
        pid = int(handle.read().strip())
        if host.pid_alive(pid):
            return pid
    return None


@dataclasses.dataclass
class Step:
    """A named step of `up`: its start and end printed, its failure named."""

    say: Say
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    @contextlib.contextmanager
    def __call__(self, title: str):
        self.say(f"• {title} ...")
        started = time.monotonic()
        try:
            yield
        except BaseException as error:
            self.say(f"✗ {title} failed")
            if isinstance(error, (ClusterError, builds.BuildFailed, builds.Unavailable)):
                raise ClusterError(f"{title}: {error}") from error
            raise
        seconds = time.monotonic() - started
        self.timings[title] = seconds
        self.say(f"✓ {title} ({seconds:.1f} s)")


def _start_supervisor(
    layout: node.Layout,
    paths: dict[str, str],
    plan: str = "plan.json",
    log_path: str = "",
    own_mounts: bool = True,
) -> subprocess.Popen:
    """The supervisor of `plan` in the cluster's network namespace (and, for the node's, a
    mount namespace of its own), in a session of its own."""
    os.makedirs(layout.logs, exist_ok=True)
    log = open(log_path or layout.supervisor_log, "ab")  # noqa: SIM115 (the supervisor keeps it)
    unshare = [paths["unshare"], "--mount", "--propagation", "private"] if own_mounts else []
    command = [
        *unshare,
        paths["nsenter"],
        f"--net={host.netns_path()}",
        sys.executable,
        "-m",
        "kubeflow.local_cluster.supervisor",
        layout.run,
        plan,
    ]
    environment = dict(os.environ, PYTHONUNBUFFERED="1")
    # The supervisor imports this package: make it importable from wherever `up` runs.
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [package_root, environment.get("PYTHONPATH", "")])
    )
    process = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=environment,
        cwd=layout.run,
    )
    log.close()
    return process


def _create_private_dirs(layout: node.Layout) -> None:
    """The PRIVATE_DIRS the host lacks, created as mount points and recorded for `down`."""
    created = []
    for folder in node.PRIVATE_DIRS:
        missing = []
        path = folder
        while not os.path.exists(path):
            missing.append(path)
            path = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        created += missing
    with open(layout.created_dirs, "w") as handle:
        json.dump(created, handle)


def _remove_created_dirs(layout: node.Layout) -> list[str]:
    removed = []
    with contextlib.suppress(OSError, ValueError), open(layout.created_dirs) as handle:
        created = json.load(handle)
        for folder in sorted(created, key=lambda path: -path.count("/")):
            for _ in range(8):
                if not host.is_mount_point(folder) or os.listdir(folder):
                    break
                # `ip netns add` bind-mounts /run/netns onto itself when it creates it (once
                # per call that finds it unmounted: the mounts can stack).
                if host.run("umount", folder, check=False).returncode != 0:
                    break
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only when empty: a folder something else filled stays
                removed.append(folder)
    with contextlib.suppress(FileNotFoundError):
        os.remove(layout.created_dirs)
    return removed


def _follow_supervisor(
    layout: node.Layout, process: subprocess.Popen, say: Say, log_path: str = ""
) -> None:
    """Relays the supervisor's step lines until it says `running`; raises on `failed`."""
    log_path = log_path or layout.supervisor_log
    offset = 0
    failure: list[str] = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        with open(log_path, errors="replace") as handle:
            handle.seek(offset)
            chunk = handle.read()
            offset = handle.tell()
        for line in chunk.splitlines():
            words = line.split()
            if failure:
                failure.append(line)
            elif len(words) >= 3 and words[1] in ("starting", "ready"):
                say(f"  {' '.join(words[1:])}")
            elif len(words) >= 2 and words[1] == "failed":
                failure.append(" ".join(words[1:]))
            elif len(words) >= 2 and words[1] == "running":
                return
        if process.poll() is not None:
            detail = "\n".join(failure) or f"it exited with {process.returncode}"
            raise ClusterError(f"it did not start: {detail}\n(supervisor log: {log_path})")
        time.sleep(0.3)
    raise ClusterError(f"it did not start in 600 s (log: {log_path})")


@dataclasses.dataclass(frozen=True)
class UpOptions:
    root: str
    image: str = ""  # the project's image in podman's store ("": none loaded)
    operators: tuple[str, ...] = ("training-operator", "jobset", "trainer")
    kfp: bool = False  # Kubeflow Pipelines too (kfp.py); on a running cluster: only it


def up(options: UpOptions, say: Say = print) -> dict:
    """Builds what is missing, starts the node, loads the images, installs the CRDs and the
    controllers (and with `kfp`, Kubeflow Pipelines); returns the cluster's info (what `status`
    prints). A failed `up` removes what it made. With `kfp` on a cluster that is up, adds
    Kubeflow Pipelines to it (a failure removes only that)."""
    layout = node.Layout(options.root)
    step = Step(say)
    if options.kfp and running_supervisor(layout):
        return add_kfp(options.root, say)
    with step("checking this machine"):
        paths = preflight(layout, options.kfp)
    try:
        return _up(layout, options, paths, step, say)
    except BaseException:
        if os.path.isdir(layout.logs):
            kept = os.path.join(options.root, "failed-up-logs")
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(layout.logs, kept)
            say(f"the node's logs are kept in {kept}")
        say("removing what this `up` made (down)")
        down(options.root, say=lambda line: say(f"  {line}"))
        raise


def _up(layout: node.Layout, options: UpOptions, paths: dict, step: Step, say: Say) -> dict:
    started = time.monotonic()
    with step("building Kubernetes, CoreDNS, the operators and the sandbox (cached)"):
        built = builds.build_all(
            say=lambda line: say(f"  {line}"),
            controllers=addons.controllers(options.operators),
            kfp=options.kfp,
        )
    binaries = dict(built["kubernetes"].paths)
    with step("building the controllers' images (podman)"):
        scratch = addons.scratch_images(built)
        references = {
            name: images.build_scratch(image, say=lambda line: say(f"  {line}"))
            for name, image in scratch.items()
        }
    for folder in (layout.run, node.RUNTIME_DIR):
        shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(layout.logs)
    os.makedirs(layout.shared, exist_ok=True)
    os.makedirs(layout.containerd_root, exist_ok=True)
    with step("writing certificates and configuration"):
        keys = pki.create(
            layout.pki, node.NODE_NAME, node.NODE_IP, node.API_SERVICE_IP, node.CLUSTER_DOMAIN
        )
        pki.write_kubeconfig(
            layout.kubeconfig,
            f"https://{node.NODE_IP}:{node.API_PORT}",
            keys.ca_cert,
            keys.tokens["admin"],
            "admin",
        )
        node.cni_config(layout)
        # Before the network: `ip netns add` creates /run/netns when it is missing.
        _create_private_dirs(layout)
        tools = {
            "etcd": paths["etcd"],
            "containerd": paths["containerd"],
            "runc": paths["runc"],
            "cni": CNI_BIN,
            "sandbox_image": references[SANDBOX_IMAGE],
        }
        daemons = node.daemons(layout, keys, binaries, tools)
        plan = {
            "private_dirs": list(node.PRIVATE_DIRS),
            "logs": layout.logs,
            "pidfile": layout.pidfile,
            "daemons": [daemon.to_json() for daemon in daemons],
        }
        with open(layout.plan, "w") as handle:
            json.dump(plan, handle, indent=1)
    with step(
        f"creating network namespace {node.NETNS} (node {node.NODE_IP}, pods {node.POD_CIDR})"
    ):
        host.create_network()
    with step("starting the node: etcd, control plane, containerd, kubelet, kube-proxy"):
        process = _start_supervisor(layout, paths)
        _follow_supervisor(layout, process, say)
    kube = addons.Kube(layout, binaries["kubectl"])
    with step("waiting for the node to be Ready"):
        kube.wait_node_ready(node.NODE_NAME)
    runtime = images.Containerd(layout.containerd_socket)
    with step("loading images into containerd"):
        for reference in references.values():
            runtime.load_from_podman(reference, say=lambda line: say(f"  {line}"))
        if options.image:
            runtime.load_from_podman(options.image, say=lambda line: say(f"  {line}"))
    with step("installing CoreDNS, the shared volume and the CRDs"):
        addons.install_base(kube, layout, references, options.image)
    with step(f"installing the operators ({', '.join(options.operators) or 'none'})"):
        addons.install_operators(kube, built, references, options.operators)
    with step("waiting for CoreDNS and the operators to be ready"):
        addons.wait_ready(kube, options.operators)
    kfp_info = _kfp_up(layout, built, paths, step, say) if options.kfp else None
    info = {
        "kubeconfig": layout.kubeconfig,
        "shared": layout.shared,
        "image": options.image,
        "pvc": addons.SHARED_PVC,
        "api": f"https://{node.NODE_IP}:{node.API_PORT}",
        "kubernetes": builds.kubernetes_version(),
        "operators": list(options.operators),
        "images": references,
        "kfp": kfp_info,
        "up_seconds": round(time.monotonic() - started, 1),
        "steps": {title: round(seconds, 1) for title, seconds in step.timings.items()},
    }
    with open(layout.info, "w") as handle:
        json.dump(info, handle, indent=1)
    say(f"cluster up in {info['up_seconds']:.0f} s")
    return info


def _kfp_up(
    layout: node.Layout, built: dict[str, builds.Built], paths: dict, step: Step, say: Say
) -> dict:
    """Kubeflow Pipelines on the running node (kfp.py says what runs where); returns its info."""
    started = time.monotonic()
    kfp_layout = kfp.KfpLayout(layout)
    kube = addons.Kube(layout, built["kubernetes"].paths["kubectl"])
    with step("building KFP's and Argo's images (podman, FROM scratch)"):
        references = {
            name: images.build_scratch(image, say=lambda line: say(f"  {line}"))
            for name, image in kfp.scratch_images(built).items()
        }
    with step("preparing MariaDB's data folder (mariadb-install-db) and the S3 folder"):
        kfp_host.prepare_mariadb(kfp_layout, paths["mariadb-install-db"])
        kfp_host.write_plan(kfp_layout, paths["mariadbd"], built["versitygw"].paths["versitygw"])
    with step(
        "starting MariaDB, the S3 server (versitygw) and the MLMD gRPC server "
        f"(host processes in namespace {node.NETNS}, on {node.NODE_IP})"
    ):
        process = _start_supervisor(
            layout, paths, kfp_layout.plan_name, kfp_layout.supervisor_log, own_mounts=False
        )
        _follow_supervisor(layout, process, say, kfp_layout.supervisor_log)
    runtime = images.Containerd(layout.containerd_socket)
    with step("loading KFP's and Argo's images into containerd"):
        for reference in references.values():
            runtime.load_from_podman(reference, say=lambda line: say(f"  {line}"))
    with step(
        f"installing Kubeflow Pipelines in namespace {kfp.NAMESPACE}: Argo's and KFP's CRDs and "
        "RBAC, the Services of the host processes, the workflow controller, the API server, the "
        "persistence agent, the scheduled-workflow controller"
    ):
        kube.apply(kfp.manifests(references, kfp_host.credentials(kfp_layout), layout.shared))
    with step(f"waiting for {', '.join(kfp.DEPLOYMENTS)} to be ready"):
        for name in kfp.DEPLOYMENTS:
            try:
                kube.kubectl(
                    "-n", kfp.NAMESPACE, "rollout", "status", f"deployment/{name}", "--timeout=180s"
                )
            except builds.BuildFailed as error:
                report = addons.pod_report(kube, kfp.NAMESPACE)
                raise builds.BuildFailed(
                    f"deployment {name} not ready: {error}\n{report}"
                ) from None
    with step(f"asking KFP's API server from this machine ({kfp.url()}/apis/v2beta1/healthz)"):
        health = kfp.wait_healthy()
    say(f"Kubeflow Pipelines up in {time.monotonic() - started:.0f} s: {kfp.url()}")
    return {
        "url": kfp.url(),
        "images": references,
        "health": health,
        "up_seconds": round(time.monotonic() - started, 1),
    }


def add_kfp(root: str, say: Say = print) -> dict:
    """Kubeflow Pipelines added to the running cluster (`up --kfp` when it is up); a failure
    removes what this made and leaves the cluster as it was."""
    layout = node.Layout(root)
    step = Step(say)
    with step("checking this machine and the running cluster"):
        if running_supervisor(layout) is None:
            raise ClusterError("no cluster is up: `python -m kubeflow.local_cluster up --kfp`")
        if kfp.running(kfp.KfpLayout(layout)):
            raise ClusterError(f"Kubeflow Pipelines is already up ({kfp.url()})")
        paths = _programs({**KFP_PROGRAMS, "unshare": "util-linux", "nsenter": "util-linux"}, False)
    with step("building KFP 2.14.3, Argo v3.6.7 and versitygw (cached)"):
        built = builds.build_kfp(say=lambda line: say(f"  {line}"))
        built["kubernetes"] = builds.Built(
            {"kubectl": os.path.join(builds.kubernetes_cache_dir(), "kubectl")}, 0.0
        )
    try:
        kfp_info = _kfp_up(layout, built, paths, step, say)
    except BaseException:
        say("removing what this `up --kfp` made")
        remove_kfp(root, say=lambda line: say(f"  {line}"))
        raise
    kfp_info["steps"] = {title: round(seconds, 1) for title, seconds in step.timings.items()}
    with open(layout.info) as handle:
        info = json.load(handle)
    info["kfp"] = kfp_info
    with open(layout.info, "w") as handle:
        json.dump(info, handle, indent=1)
    return info


def remove_kfp(root: str, say: Say = print) -> list[str]:
    """Stops KFP's host processes and deletes its objects from the running cluster."""
    layout = node.Layout(root)
    kfp_layout = kfp.KfpLayout(layout)
    removed = _stop_kfp(kfp_layout, say)
    kubectl = os.path.join(builds.kubernetes_cache_dir(), "kubectl")
    if running_supervisor(layout) and os.path.exists(kubectl):
        kube = addons.Kube(layout, kubectl)
        kube.kubectl(
            "delete",
            "-n",
            kfp.NAMESPACE,
            "deployment,service,endpointslice,configmap,secret,persistentvolumeclaim",
            "-l",
            ",".join(f"{k}={v}" for k, v in kfp.LABELS.items()),
            "--wait=false",
            check=False,
        )
        kube.kubectl("delete", "persistentvolume", kfp.SHARED_VOLUME, "--wait=false", check=False)
        removed.append("Kubeflow Pipelines' objects")
    shutil.rmtree(kfp_layout.folder, ignore_errors=True)
    for line in removed:
        say(f"removed {line}")
    return removed


def _stop_supervisor(pid: int, seconds: float) -> None:
    """SIGTERM to a supervisor (it stops its daemons), then waits up to `seconds` for it."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + seconds
    while host.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.3)


def _stop_kfp(kfp_layout: kfp.KfpLayout, say: Say) -> list[str]:
    removed = []
    pid = kfp.running(kfp_layout)
    if pid is not None:
        say(f"stopping MariaDB, the S3 server and the MLMD server (supervisor {pid})")
        _stop_supervisor(pid, 60)
        removed.append("Kubeflow Pipelines' host processes")
    cgroup = f"{node.CGROUP_ROOT}/kfp"
    if host.cgroup_pids(cgroup):
        host.kill_all(lambda: host.cgroup_pids(cgroup))
    return removed


def load(root: str, image: str, say: Say = print) -> bool:
    """Loads (again) the project's image from podman into the running node, and names it in
    the cluster's ConfigMap: after a rebuild with kubeflow/build_images.sh. Returns whether
    containerd did not already hold it."""
    layout = node.Layout(root)
    if running_supervisor(layout) is None:
        raise ClusterError("no cluster is up: `python -m kubeflow.local_cluster up` first")
    loaded = images.Containerd(layout.containerd_socket).load_from_podman(image, say)
    kube = addons.Kube(layout, os.path.join(builds.kubernetes_cache_dir(), "kubectl"))
    kube.apply(addons.shared_volume_manifests(layout.shared, image))
    with open(layout.info) as handle:
        info = json.load(handle)
    info["image"] = image
    with open(layout.info, "w") as handle:
        json.dump(info, handle, indent=1)
    say(f"image: {image} ({'loaded' if loaded else 'already loaded'})")
    return loaded


def status(root: str) -> tuple[bool, list[str]]:
    """Whether the cluster is up, and the lines `status` prints."""
    layout = node.Layout(root)
    pid = running_supervisor(layout)
    if pid is None:
        leftovers = _leftovers(layout)
        lines = ["cluster: down"]
        if leftovers:
            lines.append(f"left behind (`down` removes): {'; '.join(leftovers)}")
        return False, lines
    with open(layout.info) if os.path.exists(layout.info) else contextlib.nullcontext() as handle:
        info = json.load(handle) if handle else {}
    lines = [
        f"kubeconfig: {layout.kubeconfig}",
        f"shared: {layout.shared}",
        f"image: {info.get('image', '')}",
        f"api: https://{node.NODE_IP}:{node.API_PORT}",
    ]
    if info.get("kfp"):
        lines.append(f"kfp: {info['kfp']['url']}")
    lines.append(f"supervisor: running (pid {pid})")
    lines += states.component_states(layout, info)
    return True, lines


def _leftovers(layout: node.Layout) -> list[str]:
    found = []
    pids = host.cgroup_pids() | host.pids_in_netns()
    if pids:
        found.append(f"{len(pids)} processes")
    if host.netns_exists():
        found.append(f"network namespace {node.NETNS}")
    if host.link_exists(node.HOST_VETH):
        found.append(f"interface {node.HOST_VETH}")
    if host.cgroup_dirs():
        found.append(f"cgroup {node.CGROUP_ROOT}")
    mounts = host.mounts_under(layout.run, layout.containerd_root, node.RUNTIME_DIR)
    if mounts:
        found.append(f"{len(mounts)} mounts")
    return found


def down(root: str, say: Say = print) -> list[str]:
    """Stops the cluster and removes what `up` made; returns what it removed. Safe to run
    again, and after a killed `up` or supervisor."""
    layout = node.Layout(root)
    removed: list[str] = _stop_kfp(kfp.KfpLayout(layout), say)
    pid = running_supervisor(layout)
    if pid is not None:
        say(f"stopping the node (supervisor {pid})")
        _stop_supervisor(pid, 90)
        removed.append("the node's processes")
    stray = host.cgroup_pids() | host.pids_in_netns()
    if stray:
        say(f"killing {len(stray)} processes left in the cluster's cgroups or namespace")
        alive = host.kill_all(lambda: host.cgroup_pids() | host.pids_in_netns())
        if alive:
            raise ClusterError(f"processes {sorted(alive)} survived SIGKILL")
        removed.append(f"{len(stray)} processes")
    points = host.unmount_under(layout.run, layout.containerd_root, node.RUNTIME_DIR)
    if points:
        removed.append(f"{len(points)} mounts")
    removed += host.remove_cgroups()
    removed += host.delete_network()
    removed += _remove_created_dirs(layout)
    for folder in (layout.run, node.RUNTIME_DIR):
        if os.path.exists(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    for line in removed:
        say(f"removed {line}")
    if not removed:
        say("nothing to remove: no cluster is up")
    return removed
