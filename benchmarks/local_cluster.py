"""Side by side: the local cluster (kubeflow.local_cluster) and the same training as local
processes, in one run on this machine:

    python -m benchmarks.local_cluster --image localhost/tfx-scaleout:TAG [--rounds N]

Needs root and no cluster up (it brings its own up and down). Each round: `down` + `up`
(warm: binaries and images cached; the first round also reports what was built, cold when the
caches are empty), a pod's create -> Running (the project's image, already on the node), then the
penguin pipeline with multi_worker_mirrored x 2 as a TFJob on the cluster and as local
processes, alternating. Prints wall times, the Trainer's own time, and the cluster/local ratios,
with medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

from benchmarks import common

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pipeline(extra: list[str], output_root: str) -> tuple[float, float]:
    """(wall seconds, the Trainer's seconds) of one run_local.py run."""
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "pipeline/run_local.py",
            "--strategy",
            "multi_worker_mirrored",
            "--workers",
            "2",
            "--output_root",
            output_root,
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
    )
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"run_local.py failed:\n{result.stdout[-3000:]}{result.stderr[-2000:]}")
    trainer = re.search(r"Trainer executed in ([\d.]+)s", result.stdout)
    return wall, float(trainer.group(1)) if trainer else float("nan")


def _pod_start(kube, image: str, name: str) -> float:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": image, "command": ["sleep", "60"]}]},
    }
    started = time.monotonic()
    kube.apply(yaml.safe_dump(pod))
    while kube.get("-n", "default", "pod", name)["status"].get("phase") != "Running":
        time.sleep(0.1)
    seconds = time.monotonic() - started
    kube.kubectl("-n", "default", "delete", "pod", name, "--wait=false")
    return seconds


def main(argv: list[str] | None = None) -> int:
    from kubeflow.local_cluster import addons, builds, cluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="bench-cluster-")
    root = os.path.join(work, "cluster")
    rows = []
    try:
        for index in range(args.rounds):
            started = time.monotonic()
            info = cluster.up(cluster.UpOptions(root, args.image), say=lambda line: None)
            up_seconds = time.monotonic() - started
            kube = addons.Kube(
                cluster.node.Layout(root), os.path.join(builds.kubernetes_cache_dir(), "kubectl")
            )
            pod = _pod_start(kube, args.image, f"bench-{index}")
            shared = info["shared"]
            on_cluster = _pipeline(
                ["--launcher", "tfjob", "--kubeconfig", info["kubeconfig"]],
                os.path.join(shared, f"tfjob-{index}"),
            )
            local = _pipeline([], os.path.join(work, f"local-{index}"))
            cluster.down(root, say=lambda line: None)
            rows.append((up_seconds, pod, on_cluster, local, info["steps"]))
            print(
                f"round {index + 1}: up {up_seconds:.1f} s, pod start {pod:.1f} s, "
                f"TFJob run {on_cluster[0]:.1f} s (Trainer {on_cluster[1]:.1f} s), "
                f"local processes {local[0]:.1f} s (Trainer {local[1]:.1f} s), "
                f"ratio {on_cluster[0] / local[0]:.2f} (Trainer {on_cluster[1] / local[1]:.2f})",
                flush=True,
            )
    finally:
        cluster.down(root, say=lambda line: None)
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    common.print_medians(
        (
            ("warm up (s)", [r[0] for r in rows]),
            ("pod create -> Running (s)", [r[1] for r in rows]),
            ("penguins, TFJob 2 workers (s)", [r[2][0] for r in rows]),
            ("penguins, 2 local processes (s)", [r[3][0] for r in rows]),
            ("ratio TFJob / local, whole run", [r[2][0] / r[3][0] for r in rows]),
            ("ratio TFJob / local, Trainer", [r[2][1] / r[3][1] for r in rows]),
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
