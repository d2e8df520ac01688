"""The compiled pipeline under KFP's own local runner (kfp.local with its DockerRunner), in the
project's podman-built image, over podman's Docker-compatible socket.

Two halves. Run by the tests (the project's venv): `ensure_venv()` builds kfp.local's own
environment once per machine under ~/.cache/tfx-scaleout/ (kfp 2.6+ needs a newer protobuf than
TFX 1.16's, so it cannot live in the project's venv), `podman_socket()` starts `podman system
service`, `run()` runs this file's `main()` in that environment. Run there (`python
tests/kubeflow/kfp_local.py ...`): one kfp.local run of the compiled file, one JSON line per
task, and one error line naming the task when it fails.

The release: kfp 2.15.2. kfp 2.5.0 (the lock) runs single components only, not pipelines;
kfp 2.16+ starts every task with auto_remove, and with podman 4.3 the container is gone before
kfp.local asks for its exit status, so a task that exits non-zero reads as SUCCESS; 2.15.2
waits on the container and reports the failure.

kfp.local gaps and what is done about them:
  - input artifacts arrive typed `system.Artifact`: kubeflow/run_executor.py (the image's entry
    point) restores the compiled TFX types; nothing is done here;
  - the image's ENTRYPOINT (Beam's boot) still runs, with KFP's command as its arguments:
    DockerRunner gets `entrypoint=["/usr/bin/env"]`, so the IR's command is what runs;
  - containers need explicit nofile/nproc ulimits on these hosts (DESIGN): given to DockerRunner;
  - no cache: kfp.local 2.15.2 runs every task every time (there is no cache in kfp/local/);
  - task folder names lose their first 5 characters (kfp.local strips a "comp-" prefix TFX's
    compiler does not write: `CsvExampleGen` -> `ampleGen`): reported, left as is;
  - kfp.local has no object store: the compiled file's object-store prefix (`--store
    gs://bucket=DIR`: the serving directory, BaselineModel's lookup) is rewritten to the local
    folder, which is kfp.local's pipeline root and mounted at the same path;
  - the IR names registry images: each is mapped to the local image (`--image IR=LOCAL`) before
    kfp.local loads the file; kfp.local would otherwise pull it;
  - 2.15.2 leaves every task's container behind: removed after the run (their exit codes and
    logs are read first);
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

KFP_VERSION = "2.15.2"
DOCKER_VERSION = "7.2.0"
VENV_NAME = "kfp-local-venv"  # under ~/.cache/tfx-scaleout (tests/own_venv.py)
VENV = os.path.join(os.path.expanduser("~"), ".cache", "tfx-scaleout", VENV_NAME)
PYTHON = os.path.join(VENV, "bin", "python")
ULIMITS = {"nofile": 20000, "nproc": 4096}


class KfpLocalFailed(RuntimeError):
    """A kfp.local run that did not succeed: the message names the task."""


# --- the test side (project venv) -------------------------------------------------------------
def ensure_venv(python: str | None = None) -> str:
    """kfp.local's environment, built from PyPI once and reused while its pins are the same."""
    from tests import own_venv

    return own_venv.ensure(VENV_NAME, [f"kfp=={KFP_VERSION}", f"docker=={DOCKER_VERSION}"], python)


@contextlib.contextmanager
def podman_socket(directory: str) -> Iterator[str]:
    """`podman system service` on a socket of its own: DOCKER_HOST for the docker package."""
    socket = os.path.join(directory, "podman.sock")
    service = subprocess.Popen(
        ["podman", "--runtime", "runc", "system", "service", "--time=0", f"unix://{socket}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(100):
            if os.path.exists(socket):
                break
            if service.poll() is not None:
                raise RuntimeError(f"podman system service exited: {service.stderr.read()[-2000:]}")
            time.sleep(0.1)
        yield f"unix://{socket}"
    finally:
        service.terminate()
        service.wait(timeout=30)


def run(
    package: str,
    images: dict[str, str],
    pipeline_root: str,
    docker_host: str,
    arguments: dict[str, str] | None = None,
    stores: dict[str, str] | None = None,
    timeout: float = 3000,
) -> tuple[list[dict], str]:
    """One kfp.local run of the compiled file: (one record per task, the run's output)."""
    argv = [PYTHON, os.path.abspath(__file__), package, "--pipeline_root", pipeline_root]
    for reference, local in images.items():
        argv += ["--image", f"{reference}={local}"]
    for prefix, folder in (stores or {}).items():
        argv += ["--store", f"{prefix}={folder}"]
    for name, value in (arguments or {}).items():
        argv += ["--arg", f"{name}={value}"]
    completed = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, DOCKER_HOST=docker_host, PYTHONPATH=""),
    )
    tasks, errors = [], []
    for line in completed.stdout.splitlines():
        if line.startswith("KFP_LOCAL_TASK "):
            tasks.append(json.loads(line.split(" ", 1)[1]))
        elif line.startswith("KFP_LOCAL_ERROR "):
            errors.append(line.split(" ", 1)[1])
    output = re.sub(r"\x1b\[[0-9;]*m", "", completed.stdout + completed.stderr)  # kfp's colours
    if completed.returncode != 0:
        raise KfpLocalFailed(
            errors[0] if errors else f"kfp.local exited {completed.returncode}: {output[-3000:]}"
        )
    return tasks, output


# --- the kfp.local side (its own venv) --------------------------------------------------------
def _map_images(spec: dict, images: dict[str, str]) -> dict[str, list[str]]:
    """Every container's image -> the local one; returns local image -> the tasks using it."""
    users: dict[str, list[str]] = {}
    by_label = {}
    for name, component in spec["components"].items():
        by_label.setdefault(component.get("executorLabel"), []).append(name)
    for label, executor in spec["deploymentSpec"]["executors"].items():
        container = executor.get("container")
        if container is None:
            continue
        local = images.get(container["image"], container["image"])
        container["image"] = local
        users.setdefault(local, []).extend(by_label.get(label, [label]))
    return users


def _check_images(client, users: dict[str, list[str]]) -> None:
    """Each image local or pullable, before any task runs: else one error naming the tasks."""
    import docker

    for image, tasks in users.items():
        try:
            client.images.get(image)
            continue
        except docker.errors.ImageNotFound:
            pass
        try:
            client.images.pull(image)
        except docker.errors.APIError as error:
            raise KfpLocalFailed(
                f"task(s) {', '.join(sorted(tasks))}: image {image} does not resolve: not on"
                f" this machine and the pull failed ({error.explanation or error});"
                " build it or fix --image"
            ) from None


def failed_task(message: str) -> str:
    """The innermost failed task of kfp.local's "Inner task failed: A inside B." (colours off)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", message)
    match = re.search(r"Inner task failed: (.+?)\.?$", plain.strip())
    if not match:
        return "?"
    return match.group(1).split(" inside ")[0].strip("'\" ")


def _report_failure(
    client, before: set[str], image_user: str, pipeline_root: str, error: Exception
) -> str:
    """The failed task: its name, exit code and log tail (its container is still there)."""
    failed = []
    for container in client.containers.list(all=True):
        if container.id in before:
            continue
        code = container.attrs["State"]["ExitCode"]
        if container.status == "exited" and code != 0:
            failed.append(container)
    task = failed_task(str(error))
    if not failed:
        return f"task {task}: {error}"
    [container] = failed[-1:]
    code = container.attrs["State"]["ExitCode"]
    log = container.logs().decode(errors="replace")
    message = f"task {task} exited {code}"
    if "Permission denied" in log or "PermissionError" in log:
        message += (
            f": the image's user {image_user} cannot write the pipeline root {pipeline_root}"
            " (make it writable by that user)"
        )
    tail = " | ".join(line for line in log.splitlines()[-8:] if line.strip())
    return f"{message}; log: {tail}"


def main(argv: list[str] | None = None) -> int:
    import argparse

    import docker
    import yaml
    from kfp import components, local

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("package")
    parser.add_argument("--pipeline_root", required=True)
    parser.add_argument("--image", action="append", default=[], metavar="IR=LOCAL")
    parser.add_argument("--store", action="append", default=[], metavar="PREFIX=DIR")
    parser.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    with open(args.package) as handle:
        text = handle.read()
    for prefix, folder in (value.split("=", 1) for value in args.store):
        text = text.replace(prefix.rstrip("/") + "/", folder.rstrip("/") + "/")
    documents = list(yaml.safe_load_all(text))
    spec = documents[0]
    users = _map_images(spec, dict(value.split("=", 1) for value in args.image))
    mapped = os.path.join(os.path.dirname(os.path.abspath(args.package)), "kfp-local-pipeline.yaml")
    with open(mapped, "w") as handle:
        yaml.safe_dump_all(documents, handle)
    client = docker.from_env()
    before = {container.id for container in client.containers.list(all=True)}
    try:
        _check_images(client, users)
        image_user = client.images.get(next(iter(users))).attrs["Config"].get("User") or "root"
        ulimits = [docker.types.Ulimit(name=k, soft=v, hard=v) for k, v in ULIMITS.items()]
        local.init(
            runner=local.DockerRunner(entrypoint=["/usr/bin/env"], ulimits=ulimits),
            pipeline_root=args.pipeline_root,
        )
        pipeline = components.load_component_from_file(mapped)
        started = time.monotonic()
        try:
            pipeline(**dict(value.split("=", 1) for value in args.arg))
        except RuntimeError as error:
            raise KfpLocalFailed(
                _report_failure(client, before, image_user, args.pipeline_root, error)
            ) from None
        for container in client.containers.list(all=True):
            if container.id not in before:
                record = {
                    "image": container.image.tags[:1],
                    "exit": container.attrs["State"]["ExitCode"],
                }
                print("KFP_LOCAL_TASK " + json.dumps(record), flush=True)
        print(f"KFP_LOCAL_SECONDS {time.monotonic() - started:.1f}", flush=True)
    except KfpLocalFailed as error:
        print(f"KFP_LOCAL_ERROR {error}", flush=True)
        return 1
    finally:
        for container in client.containers.list(all=True):
            if container.id not in before:
                container.remove(force=True)
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
