"""The Debian packages some tests drive, installed by the test command itself where it can.

A test that drives a system program carries `@pytest.mark.system_packages("chromium", ...)` with
names from PACKAGES. Before the selected tests run, tests/conftest.py asks `ensure` for the
union of what they need: what is missing is installed with apt-get when this process can (root,
or sudo without a password); what still is missing makes those tests skip with one line naming
the `apt-get install` to run, except under CI (CI=true), where they fail, so that CI cannot pass
by skipping.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable

from kubeflow.local_cluster import host
from tests import session


@dataclasses.dataclass(frozen=True)
class SystemPackage:
    """A Debian package, the programs a test needs from it, and what the tests do with it."""

    package: str
    programs: tuple[str, ...]
    used_for: str


PACKAGES: dict[str, SystemPackage] = {
    "chromium": SystemPackage("chromium", ("chromium",), "renders the MLMD report headlessly"),
    "mariadb-server": SystemPackage(
        "mariadb-server",
        ("mariadbd", "mariadb-install-db"),
        "holds MLMD as MySQL does on Kubeflow",
    ),
    "podman": SystemPackage("podman", ("podman",), "builds and runs the project's image"),
    "debootstrap": SystemPackage("debootstrap", ("debootstrap",), "makes the image's local base"),
    "runc": SystemPackage("runc", ("runc",), "the container runtime podman uses here"),
    "etcd-server": SystemPackage(
        "etcd-server", ("etcd",), "stores the state of the tests' kube-apiserver"
    ),
    "containerd": SystemPackage(
        "containerd", ("containerd", "ctr"), "runs the local cluster's containers"
    ),
    "containernetworking-plugins": SystemPackage(
        "containernetworking-plugins",
        ("/usr/lib/cni/bridge", "/usr/lib/cni/host-local"),
        "connects the local cluster's pods",
    ),
    "iptables": SystemPackage("iptables", ("iptables",), "kube-proxy's Service rules"),
    "conntrack": SystemPackage("conntrack", ("conntrack",), "kube-proxy's connection cleanup"),
    "openjdk-17-jre-headless": SystemPackage(
        "openjdk-17-jre-headless", ("java",), "runs Flink and Beam's Flink job server"
    ),
    "maven": SystemPackage("maven", ("mvn",), "resolves Beam's Flink job server jars"),
}

# Debian installs daemons such as mariadbd in sbin, which a user's PATH often lacks.
_SBIN = host.SBIN


def which(program: str) -> str | None:
    return host.which(program, _SBIN)


def missing(names: Iterable[str]) -> list[str]:
    """The names (keys of PACKAGES) whose programs are not all on this machine."""
    return sorted(name for name in set(names) if not all(which(p) for p in PACKAGES[name].programs))


def _installer() -> list[str] | None:
    """The command prefix that may run apt-get here: none, sudo -n, or nothing if impossible."""
    if not shutil.which("apt-get"):
        return None
    if os.geteuid() == 0:
        return []
    sudo = shutil.which("sudo")
    if sudo and subprocess.run([sudo, "-n", "true"], capture_output=True).returncode == 0:
        return [sudo, "-n"]
    return None


def install_hint(names: Iterable[str]) -> str:
    packages = " ".join(sorted(PACKAGES[n].package for n in names))
    return f"sudo apt-get install {packages}"


def ensure(names: Iterable[str], say: Callable[[str], None]) -> list[str]:
    """Installs what of `names` is missing where possible; returns what is still missing. The
    xdist workers each collect the suite: one of them installs while the others wait."""
    absent = missing(names)
    prefix = _installer()
    if not absent or prefix is None:
        return absent
    with open(os.path.join(tempfile.gettempdir(), "tfx-scaleout-apt.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        absent = missing(names)
        if absent:
            _install(prefix, absent, say)
    return missing(names)


def _install(prefix: list[str], absent: list[str], say: Callable[[str], None]) -> None:
    packages = sorted(PACKAGES[n].package for n in absent)
    say(f"tests: installing Debian packages the selected tests drive: {' '.join(packages)}")
    with session.phase(f"Debian packages: {' '.join(packages)}"):
        _apt(prefix, packages, say)


def _apt(prefix: list[str], packages: list[str], say: Callable[[str], None]) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    steps = [
        [*prefix, "apt-get", "update", "-qq"],
        [*prefix, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ]
    for step in steps:
        result = subprocess.run(step, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            say(f"tests: {' '.join(step[len(prefix) :])} failed: {' / '.join(tail)}")
            break
