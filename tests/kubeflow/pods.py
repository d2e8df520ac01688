"""What the tests read of a running pod on the local cluster from the host."""

from __future__ import annotations

import glob
import os

from kubeflow.local_cluster import node


def container_pids(pod: dict, container: str | None = None) -> list[int]:
    """The processes of one container of a pod (the first when none is named), from the cgroup
    the kubelet made for it (cgroupfs driver: .../kubepods/<qos>/pod<uid>/<container id>)."""
    statuses = pod["status"]["containerStatuses"]
    status = next(c for c in statuses if container is None or c["name"] == container)
    container_id = status["containerID"].split("://", 1)[1]
    pattern = os.path.join(
        "/sys/fs/cgroup/pids",
        node.CGROUP_ROOT.strip("/"),
        "kubepods",
        "**",
        f"pod{pod['metadata']['uid']}",
        container_id,
        "cgroup.procs",
    )
    pids: list[int] = []
    for procs in glob.glob(pattern, recursive=True):
        with open(procs) as handle:
            pids += [int(line) for line in handle if line.strip()]
    return pids
