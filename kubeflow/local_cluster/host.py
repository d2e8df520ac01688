"""What the local cluster changes on the host, and how each change is found and undone: the
network namespace and its veth pair, the cgroup tree under node.CGROUP_ROOT in every hierarchy,
the processes (found by cgroup and by network namespace, so that a killed `up` or supervisor
leaves nothing that `down` cannot find), and mounts under the cluster's folders.

The daemons run in a mount namespace of their own (the supervisor's), so the mounts the kubelet
and containerd make (volumes, container roots, pod network namespaces) end with it; `down` still
unmounts anything under the cluster's folders that the host's table shows.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import os
import shutil
import signal
import subprocess
import time

from kubeflow.local_cluster import node


class HostError(RuntimeError):
    """A host change failed; the message names the command and what it printed."""


# Debian installs daemons (etcd, containerd, mariadbd) in sbin, which a user's PATH often lacks.
SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def which(program: str, sbin: tuple[str, ...] = SBIN) -> str | None:
    """`program` on PATH, else in the sbin folders."""
    found = shutil.which(program)
    if found:
        return found
    for folder in sbin:
        candidate = os.path.join(folder, program)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def die_with_parent() -> None:
    """In a child before exec: SIGTERM when its parent dies, even when the parent is killed (no
    finalizer runs then), so that no server outlives what started it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop_process(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; waits for the exit."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(list(command), capture_output=True, text=True)
    if check and result.returncode != 0:
        raise HostError(f"{' '.join(command)}: {(result.stderr or result.stdout).strip()}")
    return result


# --- network ------------------------------------------------------------------------------------


def netns_path(name: str = node.NETNS) -> str:
    return os.path.join("/run/netns", name)


def netns_exists(name: str = node.NETNS) -> bool:
    return os.path.exists(netns_path(name))


def link_exists(name: str) -> bool:
    return os.path.exists(os.path.join("/sys/class/net", name))


def overlapping_routes() -> list[str]:
    """Host routes that overlap the cluster's addresses (the link, pods, Services)."""
    ours = [
        ipaddress.ip_network(f"{node.HOST_IP}/{node.LINK_PREFIX}", strict=False),
        ipaddress.ip_network(node.POD_CIDR),
        ipaddress.ip_network(node.SERVICE_CIDR),
    ]
    found = []
    for line in run("ip", "-4", "route", "show").stdout.splitlines():
        destination = line.split()[0]
        if destination == "default":
            continue
        with contextlib.suppress(ValueError):
            network = ipaddress.ip_network(destination, strict=False)
            if any(network.overlaps(mine) for mine in ours) and node.HOST_VETH not in line:
                found.append(line.strip())
    return found


def create_network() -> None:
    """The namespace, its loopback, the veth pair (host HOST_IP, node NODE_IP), a route for the
    Service range (so that the node's own processes reach ClusterIPs through kube-proxy's
    rules), forwarding inside the namespace only (pods <-> Services on the bridge)."""
    inside = ("ip", "netns", "exec", node.NETNS)
    run("ip", "netns", "add", node.NETNS)
    run(*inside, "ip", "link", "set", "lo", "up")
    run("ip", "link", "add", node.HOST_VETH, "type", "veth", "peer", "name", node.NODE_VETH)
    run("ip", "link", "set", node.NODE_VETH, "netns", node.NETNS)
    run("ip", "addr", "add", f"{node.HOST_IP}/{node.LINK_PREFIX}", "dev", node.HOST_VETH)
    run("ip", "link", "set", node.HOST_VETH, "up")
    run(*inside, "ip", "addr", "add", f"{node.NODE_IP}/{node.LINK_PREFIX}", "dev", node.NODE_VETH)
    run(*inside, "ip", "link", "set", node.NODE_VETH, "up")
    run(*inside, "ip", "route", "add", node.SERVICE_CIDR, "dev", node.NODE_VETH)
    run(*inside, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")


def delete_network() -> list[str]:
    """Removes the veth pair and the namespace (its interfaces, routes and iptables chains go
    with it); returns what it removed."""
    removed = []
    if link_exists(node.HOST_VETH):
        run("ip", "link", "del", node.HOST_VETH, check=False)
        removed.append(f"interface {node.HOST_VETH}")
    if netns_exists():
        result = run("ip", "netns", "del", node.NETNS, check=False)
        if result.returncode != 0:
            raise HostError(f"ip netns del {node.NETNS}: {result.stderr.strip()}")
        removed.append(f"network namespace {node.NETNS}")
    return removed


def netns_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def pids_in_netns(name: str = node.NETNS) -> set[int]:
    inode = netns_inode(netns_path(name))
    if inode is None:
        return set()
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                    found.add(int(entry))
    return found


# --- cgroups -------------------------------------------------------------------------------------


def hierarchies() -> list[str]:
    """Mount points of every cgroup hierarchy (v1 controllers, named ones, the v2 tree)."""
    points = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            if fstype in ("cgroup", "cgroup2"):
                points.append(fields[4])
    return points


def cgroup_dirs(root: str = node.CGROUP_ROOT) -> list[str]:
    return [
        os.path.join(point, root.lstrip("/"))
        for point in hierarchies()
        if os.path.isdir(os.path.join(point, root.lstrip("/")))
    ]


def cgroup_pids(root: str = node.CGROUP_ROOT) -> set[int]:
    found: set[int] = set()
    for top in cgroup_dirs(root):
        for folder, _, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError), open(os.path.join(folder, "cgroup.procs")) as h:
                    found.update(int(line) for line in h.read().split())
    return found


def join_cgroup(path: str, pid: int) -> None:
    """Moves `pid` into `path` (e.g. /tfx-scaleout/system) in every v1 hierarchy that lets it
    (cpuset needs its cpus and mems copied from the parent first)."""
    for point in hierarchies():
        folder = point
        ok = True
        for part in path.strip("/").split("/"):
            parent, folder = folder, os.path.join(folder, part)
            try:
                os.makedirs(folder, exist_ok=True)
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    target = os.path.join(folder, knob)
                    if os.path.exists(target):
                        with open(target) as handle:
                            if handle.read().strip():
                                continue
                        with open(os.path.join(parent, knob)) as source, open(target, "w") as out:
                            out.write(source.read().strip())
            except OSError:
                ok = False
                break
        if ok:
            with contextlib.suppress(OSError), open(os.path.join(folder, "cgroup.procs"), "w") as h:
                h.write(str(pid))


def remove_cgroups(root: str = node.CGROUP_ROOT) -> list[str]:
    """Removes the (empty) cgroup tree in every hierarchy, deepest first."""
    removed = []
    for top in cgroup_dirs(root):
        for folder, _, _ in sorted(os.walk(top), key=lambda entry: -entry[0].count("/")):
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(folder)
        removed.append(top)
    return removed


def kill_all(
    pids_of, exclude: frozenset[int] | set[int] = frozenset(), timeout: float = 20.0
) -> set[int]:
    """SIGKILLs what `pids_of()` returns until it returns nothing (new ones included); returns
    what is still alive after `timeout` (normally nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = pids_of() - exclude - {os.getpid()}
        if not pids or time.monotonic() > deadline:
            return pids
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as error:
        return error.errno == errno.EPERM
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as handle:
        return handle.read().split()[2] != "Z"
    return False


# --- mounts --------------------------------------------------------------------------------------


def mounts_under(*folders: str) -> list[str]:
    """Host mount points under `folders` (deepest first)."""
    prefixes = tuple(os.path.realpath(folder).rstrip("/") + "/" for folder in folders)
    points = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            point = line.split()[4].replace("\\040", " ")
            if (point + "/").startswith(prefixes):
                points.append(point)
    return sorted(points, key=lambda point: -point.count("/"))


def is_mount_point(path: str) -> bool:
    """From the mount table: os.path.ismount misses a bind mount of a folder onto itself on the
    same file system (what `ip netns add` makes of /run/netns)."""
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as handle:
        return any(line.split()[4].replace("\\040", " ") == target for line in handle)


def unmount_under(*folders: str) -> list[str]:
    points = mounts_under(*folders)
    for point in points:
        run("umount", "-l", point, check=False)
    return points
