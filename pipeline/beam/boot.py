"""A Python SDK-harness boot for Beam's portable runners, and a worker pool that runs it.

    python -m pipeline.beam.boot worker_pool [--service_port 50000] [--work_dir DIR]

starts Beam's own worker pool (apache_beam.runners.worker.worker_pool_main) with this file as
its --container_executable: for every worker a job asks for (--environment_type=EXTERNAL
--environment_config=HOST:50000), the pool runs

    python pipeline/beam/boot.py --id=ID --provision_endpoint=HOST:PORT [--logging_endpoint=...
        --artifact_endpoint=... --control_endpoint=... --semi_persist_dir=DIR]

which does what Beam's Go boot (/opt/apache/beam/boot in Beam's SDK images) does, which is not
available outside those images: it reads the job's provision info (pipeline options, staged
dependencies), retrieves the staged files from the artifact endpoint, installs them, then starts
apache_beam.runners.worker.sdk_worker_main with the environment variables the Go boot sets
(WORKER_ID, PIPELINE_OPTIONS, SEMI_PERSISTENT_DIRECTORY, LOGGING_/CONTROL_/STATUS_API_SERVICE_
DESCRIPTOR, RUNNER_CAPABILITIES). Beam's worker pool without a container executable starts the
harness itself and installs nothing. The same boot is a PROCESS environment's command for a job
server that runs PROCESS environments (Flink's and Spark's do; Beam 2.59's embedded job service
does not): an executable script running `python -m pipeline.beam.boot "$@"`, named by
--environment_config='{"command": "/opt/beam-boot"}'.

Differences from the Go boot, on purpose: the staged packages (extra_packages.txt in its order,
then the --setup_file tarball workflow.tar.gz) are installed with `pip install --no-deps
--no-index --target` into a directory of this worker, put first on the harness's PYTHONPATH,
instead of into the shared environment (workers of several jobs never see each other's code, the
environment is never changed, nothing is fetched from PyPI: the dependencies come from the
environment). After installing, the boot checks that every top-level module of the staged
distributions resolves to that directory in the harness's environment. A staged package that
does not install (or is shadowed) fails the job: the boot answers the runner's instructions with
the error instead of leaving the runner waiting for a harness that never connects.

Each worker logs to stderr, one line per step, prefixed `beam_boot[PID] ID:`; its directory is
removed when the harness exits. Only the standard library, grpc and apache_beam are imported
here: the file also runs outside this project's environment.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

# Names Beam's stager gives the staged files (apache_beam/runners/portability/stager.py).
EXTRA_PACKAGES_FILE = "extra_packages.txt"
WORKFLOW_TARBALL_FILE = "workflow.tar.gz"
REQUIREMENTS_FILE = "requirements.txt"
HARNESS_MODULE = "apache_beam.runners.worker.sdk_worker_main"
# The port of Beam's `boot --worker_pool` (a Flink task manager's worker-pool sidecar).
DEFAULT_POOL_PORT = 50000


def _log(worker_id: str, message: str) -> None:
    sys.stderr.write(f"beam_boot[{os.getpid()}] {worker_id}: {message}\n")
    sys.stderr.flush()


class BootError(RuntimeError):
    """A step of the boot failed; the message says which and what to do."""


# --- the worker pool --------------------------------------------------------------------------


def worker_pool(port: int, work_dir: str | None) -> None:
    """Beam's worker pool, starting this boot for every worker (as Beam's `boot --worker_pool`
    starts /opt/apache/beam/boot), with the worker directories under work_dir."""
    from apache_beam.runners.worker import worker_pool_main

    work_dir = os.path.abspath(work_dir or tempfile.mkdtemp(prefix="beam-worker-pool-"))
    os.makedirs(work_dir, exist_ok=True)
    # The pool runs its container executable with no interpreter and no extra arguments: a
    # wrapper runs this file with this interpreter, the worker directories under work_dir
    # (-I: not this file's directory on the path, whose modules are the project's).
    executable = os.path.join(work_dir, "boot")
    with open(executable, "w") as handle:
        handle.write(
            "#!/bin/sh\n"
            f"exec '{sys.executable}' -I '{os.path.abspath(__file__)}' "
            f"--semi_persist_dir='{work_dir}' \"$@\"\n"
        )
    os.chmod(executable, os.stat(executable).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    # As worker_pool_main.main does, with a line saying where it listens once it does.
    address, server = worker_pool_main.BeamFnExternalWorkerPoolServicer.start(
        use_process=True, port=port, container_executable=executable
    )
    # SIGTERM exits through atexit, where the pool stops the workers it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.stderr.write(
        f"beam_boot worker pool (pid {os.getpid()}) listening at {address}, worker directories "
        f"under {work_dir}\n"
    )
    sys.stderr.flush()
    try:
        while True:
            time.sleep(3600)
    finally:
        server.stop(0)


# --- one worker -------------------------------------------------------------------------------


def _provision_info(endpoint: str, worker_id: str):
    import grpc
    from apache_beam.portability.api import beam_provision_api_pb2, beam_provision_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
        return stub.GetProvisionInfo(
            beam_provision_api_pb2.GetProvisionInfoRequest(),
            metadata=[("worker_id", worker_id)],
            timeout=60,
        ).info


def _staged_name(artifact, index: int) -> str:
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    if artifact.role_urn == common_urns.artifact_roles.STAGING_TO.urn:
        payload = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(artifact.role_payload)
        if payload.staged_name:
            return os.path.basename(payload.staged_name)
    return f"artifact-{index}"


def retrieve_artifacts(endpoint: str, worker_id: str, dependencies, staged_dir: str) -> list[str]:
    """Writes each staged dependency under staged_dir by its staged name; returns the names."""
    import grpc
    from apache_beam.portability.api import beam_artifact_api_pb2, beam_artifact_api_pb2_grpc

    os.makedirs(staged_dir, exist_ok=True)
    names = []
    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(channel)
        for index, artifact in enumerate(dependencies):
            name = _staged_name(artifact, index)
            with open(os.path.join(staged_dir, name), "wb") as handle:
                request = beam_artifact_api_pb2.GetArtifactRequest(artifact=artifact)
                for chunk in stub.GetArtifact(request, metadata=[("worker_id", worker_id)]):
                    handle.write(chunk.data)
            names.append(name)
    return names


def packages_to_install(staged_dir: str, names: list[str]) -> list[str]:
    """The staged packages in the order Beam's boot installs them: the extra packages as
    extra_packages.txt lists them, then the --setup_file tarball."""
    packages = []
    if EXTRA_PACKAGES_FILE in names:
        with open(os.path.join(staged_dir, EXTRA_PACKAGES_FILE)) as handle:
            for line in handle:
                if line.strip():
                    packages.append(os.path.join(staged_dir, line.strip()))
    if WORKFLOW_TARBALL_FILE in names:
        packages.append(os.path.join(staged_dir, WORKFLOW_TARBALL_FILE))
    missing = [p for p in packages if not os.path.isfile(p)]
    if missing:
        raise BootError(f"staged packages listed but not retrieved: {missing}")
    return packages


def install(packages: list[str], requirements: str | None, target: str) -> None:
    """pip install --no-deps --no-index --target: this worker's directory, nothing fetched,
    the shared environment untouched."""
    if not packages and not requirements:
        return
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index"]
    command += ["--no-build-isolation", "--disable-pip-version-check", "--no-cache-dir"]
    command += ["--target", target, *packages]
    if requirements:
        # As Beam's boot does in its first round: only what was staged beside it.
        command += ["-r", requirements, "--find-links", os.path.dirname(requirements)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise BootError(
            f"pip could not install the staged packages {[os.path.basename(p) for p in packages]}"
            f" (exit {result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )


def installed_modules(target: str) -> dict[str, list[str]]:
    """{distribution directory: its top-level modules} of what pip installed under target."""
    found: dict[str, list[str]] = {}
    for entry in sorted(os.listdir(target)):
        if not entry.endswith(".dist-info"):
            continue
        top_level = os.path.join(target, entry, "top_level.txt")
        modules = []
        if os.path.isfile(top_level):
            with open(top_level) as handle:
                modules = [line.strip() for line in handle if line.strip()]
        found[entry] = modules
    return found


_RESOLVE = (
    "import importlib.util, json, sys\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    spec = importlib.util.find_spec(name)\n"
    "    out[name] = (spec.origin or list(spec.submodule_search_locations or [''])[0]) "
    "if spec else None\n"
    "print(json.dumps(out))\n"
)


def check_resolution(env: dict, cwd: str, target: str, modules: list[str]) -> dict[str, str]:
    """Where each staged top-level module resolves in the harness's environment; a module that
    resolves elsewhere (shadowed by the environment's copy) is an error."""
    import json

    if not modules:
        return {}
    result = subprocess.run(
        [sys.executable, "-c", _RESOLVE, *modules],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise BootError(f"could not resolve the staged modules: {result.stderr[-2000:]}")
    where = json.loads(result.stdout.strip().splitlines()[-1])
    prefix = os.path.join(os.path.realpath(target), "")
    wrong = {
        name: path
        for name, path in where.items()
        if not path or not os.path.realpath(path).startswith(prefix)
    }
    if wrong:
        raise BootError(
            f"staged modules resolve outside this worker's install directory {target}: {wrong}"
        )
    return where


def fail_instructions(control_endpoint: str, worker_id: str, message: str) -> None:
    """Connects to the runner's control service as this worker and answers every instruction
    with `message` as its error, so that the job fails with it (a harness that never connects
    leaves Beam's runners waiting)."""
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc

    responses: queue.Queue = queue.Queue()

    def outgoing():
        while True:
            response = responses.get()
            if response is None:
                return
            yield response

    error = f"SDK worker {worker_id} did not start: {message}"
    with grpc.insecure_channel(control_endpoint) as channel:
        stub = beam_fn_api_pb2_grpc.BeamFnControlStub(channel)
        try:
            for request in stub.Control(outgoing(), metadata=[("worker_id", worker_id)]):
                responses.put(
                    beam_fn_api_pb2.InstructionResponse(
                        instruction_id=request.instruction_id, error=error
                    )
                )
        except grpc.RpcError:
            pass  # the runner closed the stream (job failed, or cancelled)
        finally:
            responses.put(None)


def harness_env(info, args, worker_dir: str, target: str) -> dict:
    from apache_beam.portability.api import endpoints_pb2
    from google.protobuf import json_format, text_format

    def descriptor(url: str) -> str:
        return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))

    env = dict(os.environ)
    env.update(
        WORKER_ID=args.id,
        PIPELINE_OPTIONS=json_format.MessageToJson(info.pipeline_options),
        SEMI_PERSISTENT_DIRECTORY=worker_dir,
        LOGGING_API_SERVICE_DESCRIPTOR=descriptor(args.logging_endpoint),
        CONTROL_API_SERVICE_DESCRIPTOR=descriptor(args.control_endpoint),
        RUNNER_CAPABILITIES=" ".join(info.runner_capabilities),
        PYTHONPATH=os.pathsep.join([target, *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    if info.HasField("status_endpoint") and info.status_endpoint.url:
        env["STATUS_API_SERVICE_DESCRIPTOR"] = text_format.MessageToString(info.status_endpoint)
    return env


def boot(args: argparse.Namespace) -> int:
    started = time.monotonic()
    info = _provision_info(args.provision_endpoint, args.id)
    # Flink's and Spark's PROCESS environments pass only --id and --provision_endpoint.
    args.logging_endpoint = args.logging_endpoint or info.logging_endpoint.url
    args.artifact_endpoint = args.artifact_endpoint or info.artifact_endpoint.url
    args.control_endpoint = args.control_endpoint or info.control_endpoint.url
    base = os.path.abspath(args.semi_persist_dir or tempfile.gettempdir())
    os.makedirs(base, exist_ok=True)
    worker_dir = tempfile.mkdtemp(prefix=f"{args.id}-", dir=base)
    target = os.path.join(worker_dir, "site-packages")
    os.makedirs(target)
    try:
        try:
            staged_dir = os.path.join(worker_dir, "staged")
            names = retrieve_artifacts(
                args.artifact_endpoint, args.id, info.dependencies, staged_dir
            )
            _log(args.id, f"retrieved {len(names)} staged file(s): {names}")
            packages = packages_to_install(staged_dir, names)
            requirements = (
                os.path.join(staged_dir, REQUIREMENTS_FILE) if REQUIREMENTS_FILE in names else None
            )
            install(packages, requirements, target)
            distributions = installed_modules(target)
            env = harness_env(info, args, worker_dir, target)
            modules = [m for ms in distributions.values() for m in ms]
            where = check_resolution(env, worker_dir, target, modules)
            _log(
                args.id,
                f"installed {sorted(distributions)} into {target} in "
                f"{time.monotonic() - started:.1f} s; modules: {where}",
            )
        except BootError as error:
            _log(args.id, f"FAILED: {error}")
            fail_instructions(args.control_endpoint, args.id, str(error))
            return 1
        # The worker pool reads nothing from the boot's stdout: the harness writes to stderr.
        harness = subprocess.Popen(
            [sys.executable, "-m", HARNESS_MODULE], env=env, cwd=worker_dir, stdout=sys.stderr
        )
        _log(args.id, f"harness pid {harness.pid} started")
        # The harness's own CPU time: the proof that the work ran in this worker's process.
        _, status, usage = os.wait4(harness.pid, 0)
        harness.returncode = code = os.waitstatus_to_exitcode(status)
        # Cleaned up before the line that says the harness exited, so that whoever reads that
        # line (an operator, a test) sees the worker's directory gone.
        shutil.rmtree(worker_dir, ignore_errors=True)
        _log(
            args.id,
            f"harness pid {harness.pid} exited {code} after {time.monotonic() - started:.1f} s, "
            f"cpu {usage.ru_utime + usage.ru_stime:.1f} s",
        )
        return code
    finally:
        shutil.rmtree(worker_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `--worker_pool` as Beam's Go boot takes it (port 50000), so that this file can stand in
    # for /opt/apache/beam/boot; `worker_pool --service_port N` chooses the port.
    if argv and argv[0] in ("worker_pool", "--worker_pool"):
        parser = argparse.ArgumentParser(prog="python -m pipeline.beam.boot worker_pool")
        parser.add_argument("--service_port", type=int, default=DEFAULT_POOL_PORT)
        parser.add_argument("--work_dir", default=None, help="default: a new temporary directory")
        pool_args, _ = parser.parse_known_args(argv[1:])
        worker_pool(pool_args.service_port, pool_args.work_dir)
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.beam.boot", description="Beam SDK harness boot"
    )
    parser.add_argument("--id", required=True)
    parser.add_argument("--provision_endpoint", required=True)
    parser.add_argument("--logging_endpoint", default="")
    parser.add_argument("--artifact_endpoint", default="")
    parser.add_argument("--control_endpoint", default="")
    parser.add_argument("--semi_persist_dir", default="")
    args, _ = parser.parse_known_args(argv)
    return boot(args)


if __name__ == "__main__":
    sys.exit(main())
