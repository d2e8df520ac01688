"""What `status` says of a running cluster's parts: each host daemon of the supervisors' plans
(running or not, found by command line among the cluster's cgroup), the node, the operators'
and KFP's Deployments, and KFP's API server as the host reaches it."""

from __future__ import annotations

import contextlib
import json
import os

from kubeflow.local_cluster import addons, builds, host, kfp, node


def component_states(layout: node.Layout, info: dict) -> list[str]:
    daemons = []
    for plan_name in ("plan.json", kfp.KfpLayout(layout).plan_name):
        with contextlib.suppress(FileNotFoundError), open(os.path.join(layout.run, plan_name)) as h:
            daemons += json.load(h)["daemons"]
    # By command line: the MLMD server and the supervisors are all Python.
    running = {cmdline(pid): pid for pid in host.cgroup_pids()}
    lines = []
    for daemon in daemons:
        pid = running.get(tuple(daemon["argv"]))
        lines.append(f"{daemon['name']}: {f'running (pid {pid})' if pid else 'not running'}")
    kubectl = os.path.join(builds.kubernetes_cache_dir(), "kubectl")
    if os.path.exists(kubectl):
        kube = addons.Kube(layout, kubectl)
        lines.append(f"node {node.NODE_NAME}: {kube.node_state(node.NODE_NAME)}")
        lines += addons.deployment_states(kube, info.get("operators", []))
        if info.get("kfp"):
            lines += kfp_states(kube)
    return lines


def kfp_states(kube: addons.Kube) -> list[str]:
    """One line per KFP Deployment, and the API server's health as the host reaches it."""
    lines = []
    for name in kfp.DEPLOYMENTS:
        try:
            item = kube.get("-n", kfp.NAMESPACE, "deployment", name)
            ready = item.get("status", {}).get("readyReplicas", 0)
            lines.append(f"{name}: {ready}/{item.get('spec', {}).get('replicas', 1)} ready")
        except builds.BuildFailed:
            lines.append(f"{name}: not installed")
    try:
        kfp.healthz(timeout=5)
        lines.append("kfp api: healthy (/apis/v2beta1/healthz)")
    except (OSError, ValueError) as error:
        lines.append(f"kfp api: not answering ({error})")
    return lines


def cmdline(pid: int) -> tuple[str, ...]:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as handle:
        return tuple(part.decode(errors="replace") for part in handle.read().split(b"\0")[:-1])
    return ()
