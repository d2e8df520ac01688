"""Side by side: the penguin pipeline on Kubeflow Pipelines on the local cluster and the same
pipeline with `pipeline/run_local.py`, in one run on this machine:

    python -m benchmarks.kfp_cluster --image localhost/tfx-scaleout:TAG [--rounds N]

Needs root and no cluster up (it brings its own up and down). It times `up --kfp` (warm when the
binaries and images are cached; the steps it took are printed), compiles the penguin pipeline
once for KFP's own store (`minio://mlpipeline/...`, no resource requests: the node has 2 CPUs),
then per round, alternating: `run_kubeflow.py deploy --run --wait --no_cache` (every task a
pod: KFP's drivers, the launcher moving artifacts through the S3 server, the executor) and
`run_local.py` with the same configuration. Last, the same file once more with the cache on
(`deploy --run --wait`) twice: the first fills KFP's cache, the second is what a rerun on
unchanged data costs. Prints each round, then medians,
spreads and the KFP / local ratio.
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

from benchmarks import common

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIPELINE = "penguins-benchmark"


def _timed(command: list[str], what: str) -> tuple[float, str]:
    """(wall seconds, stdout) of one command of this project, which must succeed."""
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_ROOT)
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(
            f"{what} failed ({result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    return wall, result.stdout + result.stderr


def _compile(info: dict, package: str, serving: str) -> None:
    sizes = [f"--{k}_{s}=0" for k in ("beam", "trainer", "default") for s in ("cpu", "memory_gb")]
    _timed(
        [
            sys.executable,
            "kubeflow/run_kubeflow.py",
            "compile",
            "--pipeline_root=minio://mlpipeline/v2/artifacts",
            f"--image={info['image']}",
            f"--gpu_image={info['image']}",
            "--allow_unpinned_images",
            "--pvc_name=tfx-scaleout-shared",
            f"--mount_path={info['shared']}",
            f"--serving_model_dir={serving}",
            f"--pipeline_name={PIPELINE}",
            "--gpus=0",
            *sizes,
            f"--output={package}",
        ],
        "run_kubeflow.py compile",
    )


def _on_kfp(package: str, url: str, *flags: str) -> tuple[float, str]:
    """(wall seconds, deploy's `tasks:` line) of one run to SUCCEEDED (deploy exits 1 otherwise,
    naming the failed tasks)."""
    wall, output = _timed(
        [
            sys.executable,
            "kubeflow/run_kubeflow.py",
            "deploy",
            f"--package={package}",
            f"--endpoint={url}",
            "--run",
            "--wait",
            "--poll=3",
            "--timeout=1800",
            *flags,
        ],
        "run_kubeflow.py deploy --run --wait",
    )
    tasks = re.search(r"^tasks: .*$", output, re.M)
    return wall, tasks.group(0) if tasks else "tasks: ?"


def _local(output_root: str) -> float:
    wall, _ = _timed(
        [sys.executable, "pipeline/run_local.py", "--output_root", output_root],
        "run_local.py",
    )
    return wall


def main(argv: list[str] | None = None) -> int:
    from kubeflow.local_cluster import cluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", required=True, help="the project's image in podman's store")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="bench-kfp-")
    root = os.path.join(work, "cluster")
    rows: list[tuple[float, float]] = []
    serving = ""
    try:
        print("starting the local cluster with Kubeflow Pipelines (up --kfp)", flush=True)
        started = time.monotonic()
        options = cluster.UpOptions(root, args.image, operators=(), kfp=True)
        info = cluster.up(options, say=lambda line: None)
        up_seconds = time.monotonic() - started
        steps = {**info.get("steps", {}), **info["kfp"].get("steps", {})}
        print(
            f"up --kfp: {up_seconds:.1f} s ("
            + ", ".join(f"{k} {v:.0f} s" for k, v in steps.items() if v >= 1)
            + ")",
            flush=True,
        )
        serving = tempfile.mkdtemp(prefix="bench-serving-", dir=info["shared"])
        os.chmod(serving, 0o777)  # the task pods' user writes the pushed model there
        package = os.path.join(work, "penguins.yaml")
        _compile(info, package, serving)
        url = info["kfp"]["url"]
        for index in range(args.rounds):
            on_kfp, tasks = _on_kfp(package, url, "--no_cache")
            local = _local(os.path.join(work, f"local-{index}"))
            rows.append((on_kfp, local))
            print(
                f"round {index + 1}: KFP {on_kfp:.1f} s ({tasks}), run_local.py {local:.1f} s, "
                f"ratio {on_kfp / local:.2f}",
                flush=True,
            )
        # A run with the cache off leaves no cache entries (the launcher adds one only for a
        # task that has a fingerprint, which the driver computes only with the cache on:
        # backend/src/v2/component/launcher_v2.go:233-249 at 2.14.3): the first run with it on
        # runs every task and fills the cache, the next is served from it.
        filling, tasks = _on_kfp(package, url)
        print(f"the same file, cache on, first time: {filling:.1f} s ({tasks})", flush=True)
        cached, tasks = _on_kfp(package, url)
        print(f"the same file again, served from the cache: {cached:.1f} s ({tasks})", flush=True)
    finally:
        cluster.down(root, say=lambda line: None)
        if serving:
            shutil.rmtree(serving, ignore_errors=True)
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    common.print_medians(
        (
            ("penguins on KFP, every task a pod (s)", [r[0] for r in rows]),
            ("penguins with run_local.py (s)", [r[1] for r in rows]),
            ("ratio KFP / run_local.py", [r[0] / r[1] for r in rows]),
        )
    )
    print(f"| up --kfp (s) | {up_seconds:.1f} | one |")
    print(f"| penguins on KFP, cache on, filling it (s) | {filling:.1f} | one |")
    print(f"| rerun served from KFP's cache (s) | {cached:.1f} | one |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
