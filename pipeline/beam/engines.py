"""Flink for Beam's portable runners on this machine: obtained from PyPI and Maven Central,
cached, and started as a standalone cluster on 127.0.0.1.

    python -m pipeline.beam.engines fetch                  # cache the engine (a few minutes once)
    python -m pipeline.beam.engines flink [--slots 2] [--rest_port 8081] [--pool_port 50000]

`fetch` caches (under ~/.cache/tfx-scaleout/engines, or $TFX_SCALEOUT_ENGINES):
- Flink's distribution from PyPI: `apache-flink-libraries` (lib/, plugins/) and `apache-flink`
  (bin/, conf/), both sdists, downloaded with `pip download --no-deps` and unpacked, never
  installed (apache-flink's own pins conflict with Beam 2.59);
- Beam's Flink job server from Maven Central: the unshaded `beam-runners-flink-<flink>` and
  `beam-runners-java-job-service` jars with their dependencies (`mvn dependency:copy-dependencies`
  on a small pom), plus a launcher jar whose manifest names them, so that Beam's
  `--flink_job_server_jar` (`java -jar`) runs it.

Which versions, and why (see docs/beam.md): Maven Central as these machines reach it serves no
Beam job-server jar at all, no `beam-runners-flink-1.17`/`-1.18`, and `beam-runners-java-job-
service` only up to 2.57.0. The newest Beam whose Flink runner and job service both resolve is
2.56.0, whose newest Flink is 1.16 (`beam-runners-flink-1.16`); Flink 1.16.3 from PyPI is the
matching cluster. The Python SDK (2.59) talks to that job server through Beam's portable job API.

`flink` starts a JobManager and a TaskManager (separate JVMs, their logs under the work
directory) and this project's SDK worker pool, prints the flags for `pipeline/run_local.py`, and
stops all three on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile

FLINK_VERSION = "1.16.3"
# The Flink minor version the job server's Flink client is built for (beam-runners-flink-1.16).
FLINK_MINOR = "1.16"
BEAM_JOB_SERVER_VERSION = "2.56.0"
JOB_SERVER_MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver"
# The logger binding the job server logs through (its slf4j-api is 1.7.30).
SLF4J_VERSION = "1.7.30"

# What Java 17 needs opened for Flink 1.16 and Beam's Flink runner (reflection into java.base:
# Kryo, Flink's closure cleaner, the memory managers).
JAVA_OPENS = tuple(
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in (
        "java.lang",
        "java.lang.invoke",
        "java.lang.reflect",
        "java.io",
        "java.math",
        "java.net",
        "java.nio",
        "java.text",
        "java.time",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
        "sun.nio.ch",
        "sun.net.util",
    )
)


class EngineError(RuntimeError):
    """Obtaining or starting an engine failed; the message says which step and why."""


def cache_root() -> str:
    return os.environ.get("TFX_SCALEOUT_ENGINES") or os.path.join(
        os.path.expanduser("~"), ".cache", "tfx-scaleout", "engines"
    )


def _run(command: list[str], step: str, timeout: float = 900, cwd: str | None = None) -> None:
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
        )
    except FileNotFoundError as error:
        raise EngineError(f"{step}: {error}") from error
    if result.returncode != 0:
        raise EngineError(
            f"{step} failed (exit {result.returncode}): {(result.stdout + result.stderr)[-3000:]}"
        )


def _pip_download(requirement: str, dest: str) -> str:
    """The sdist of `requirement`, downloaded (not built, not installed) into dest."""
    os.makedirs(dest, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    command += ["--disable-pip-version-check", "-d", dest, requirement]
    _run(command, f"pip download {requirement}")
    name, version = requirement.split("==")
    prefix = f"{name.replace('-', '_')}-{version}", f"{name}-{version}"
    found = [f for f in os.listdir(dest) if f.startswith(prefix) and f.endswith(".tar.gz")]
    if len(found) != 1:
        raise EngineError(f"pip download {requirement}: no single sdist in {dest}: {found}")
    return os.path.join(dest, found[0])


def _extract(sdist: str, members: tuple[str, ...], target: str) -> None:
    """The sdist's `<top>/deps/<member>` trees, written under target/<member>."""
    with tarfile.open(sdist) as archive:
        for info in archive.getmembers():
            parts = info.name.split("/")
            if len(parts) < 4 or parts[1] != "deps" or parts[2] not in members:
                continue
            if not (info.isfile() or info.isdir()):
                continue
            info.name = "/".join(parts[2:])
            archive.extract(info, target)  # noqa: S202  (names checked above: deps/<member>/...)


def flink_home(version: str = FLINK_VERSION) -> str:
    """FLINK_HOME of Flink `version` from PyPI, unpacked once into the cache."""
    home = os.path.join(cache_root(), f"flink-{version}")
    if os.path.isfile(os.path.join(home, ".complete")):
        return home
    downloads = os.path.join(cache_root(), "downloads")
    libraries = _pip_download(f"apache-flink-libraries=={version}", downloads)
    scripts = _pip_download(f"apache-flink=={version}", downloads)
    partial = tempfile.mkdtemp(prefix=f"flink-{version}-", dir=cache_root())
    _extract(libraries, ("bin", "lib", "plugins", "opt"), partial)  # bin/: bash-java-utils.jar
    _extract(scripts, ("bin", "conf"), partial)
    for name in ("bin/jobmanager.sh", "bin/bash-java-utils.jar", "lib"):
        if not os.path.exists(os.path.join(partial, name)):
            raise EngineError(f"Flink {version} from PyPI has no {name}")
    for script in os.listdir(os.path.join(partial, "bin")):
        path = os.path.join(partial, "bin", script)
        os.chmod(path, os.stat(path).st_mode | 0o111)
    open(os.path.join(partial, ".complete"), "w").close()
    shutil.rmtree(home, ignore_errors=True)
    os.rename(partial, home)
    for sdist in (libraries, scripts):  # unpacked: 230 MB less in the cache
        os.remove(sdist)
    return home


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>tfx-scaleout</groupId>
  <artifactId>beam-flink-job-server</artifactId>
  <version>{beam}</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.beam</groupId>
      <artifactId>beam-runners-flink-{flink}</artifactId>
      <version>{beam}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.beam</groupId>
      <artifactId>beam-runners-java-job-service</artifactId>
      <version>{beam}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>{slf4j}</version>
    </dependency>
  </dependencies>
</project>
"""


def _manifest(main_class: str, class_path: list[str]) -> bytes:
    """A jar manifest; lines of at most 72 bytes, continued with a leading space."""
    lines = []
    for key, value in (
        ("Manifest-Version", "1.0"),
        ("Main-Class", main_class),
        ("Add-Opens", " ".join(o.split("=")[1] for o in JAVA_OPENS)),
        ("Class-Path", " ".join(class_path)),
    ):
        text = f"{key}: {value}".encode()
        lines.append(text[:72])
        lines += [b" " + text[i : i + 71] for i in range(72, len(text), 71)]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def flink_job_server_jar(beam: str = BEAM_JOB_SERVER_VERSION, flink: str = FLINK_MINOR) -> str:
    """A runnable jar of Beam's Flink job server (Beam `beam`, Flink `flink`), resolved from
    Maven Central once into the cache: lib/ holds the jars, the launcher names them."""
    root = os.path.join(cache_root(), f"beam-flink-{flink}-job-server-{beam}")
    launcher = os.path.join(root, f"beam-runners-flink-{flink}-job-server-{beam}.jar")
    if os.path.isfile(launcher):
        return launcher
    if not shutil.which("mvn"):
        raise EngineError("Maven (mvn) is needed to resolve Beam's Flink job server")
    partial = tempfile.mkdtemp(prefix="job-server-", dir=cache_root())
    with open(os.path.join(partial, "pom.xml"), "w") as handle:
        handle.write(_POM.format(beam=beam, flink=flink, slf4j=SLF4J_VERSION))
    _run(
        ["mvn", "-B", "-q", "dependency:copy-dependencies", "-DincludeScope=runtime"]
        + ["-DoutputDirectory=lib"],
        f"mvn resolving beam-runners-flink-{flink}:{beam}",
        cwd=partial,
    )
    jars = sorted(f for f in os.listdir(os.path.join(partial, "lib")) if f.endswith(".jar"))
    with zipfile.ZipFile(os.path.join(partial, os.path.basename(launcher)), "w") as archive:
        archive.writestr(
            "META-INF/MANIFEST.MF", _manifest(JOB_SERVER_MAIN, [f"lib/{j}" for j in jars])
        )
    shutil.rmtree(root, ignore_errors=True)
    os.rename(partial, root)
    return launcher


def job_server_classpath(jar: str) -> tuple[str, ...]:
    """The job server's jars other than Flink's own, for the TaskManager's class path.

    Why: Beam's Flink runner keeps a job's SDK workers between its stages (for
    --environment_cache_millis) only when its classes come from Flink's own class loader
    (FlinkExecutableStageContextFactory releases the context at once otherwise), so with the
    job's jar alone every stage of a batch job boots a new SDK worker: 8-10 s each here, five
    of them for a five-stage pipeline. With these jars on the class path and parent-first class
    loading, one worker per job serves every stage."""
    lib = os.path.join(os.path.dirname(jar), "lib")
    return tuple(
        os.path.join(lib, name)
        for name in sorted(os.listdir(lib))
        if name.endswith(".jar") and not name.startswith("flink-")
    )


def fetch() -> tuple[str, str]:
    os.makedirs(cache_root(), exist_ok=True)
    return flink_home(), flink_job_server_jar()


# --- a standalone cluster on this machine ------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rest_get(address: str, path: str, timeout: float = 5) -> dict:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout) as response:
        return json.load(response)


def _stop_group(process: subprocess.Popen, grace: float = 20) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        process.wait()


@dataclasses.dataclass
class FlinkCluster:
    """A JobManager and a TaskManager of a Flink distribution, each a JVM in its own process
    group, on 127.0.0.1 with free ports; the configuration and the logs under work_dir.
    Batch jobs as Beam runs them: no restart (a lost TaskManager fails the job)."""

    home: str
    work_dir: str
    # Jars put on the JVMs' own class path (Beam's runner, from job_server_classpath()).
    classpath: tuple[str, ...] = ()
    slots: int = 2
    # The REST port (--flink_master); 0: a free one.
    rest_port: int = 0
    taskmanager_memory: str = "2560m"
    processes: dict[str, subprocess.Popen] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rest_port = self.rest_port or free_port()
        self.conf_dir = os.path.join(self.work_dir, "conf")
        self.log_dir = os.path.join(self.work_dir, "log")

    @property
    def master(self) -> str:
        """What --flink_master names: the JobManager's REST address."""
        return f"127.0.0.1:{self.rest_port}"

    def _write_conf(self) -> None:
        os.makedirs(self.conf_dir, exist_ok=True)
        os.makedirs(self.log_dir, exist_ok=True)
        for name in ("log4j.properties", "log4j-console.properties"):
            shutil.copy(os.path.join(self.home, "conf", name), self.conf_dir)
        settings = {
            "jobmanager.rpc.address": "127.0.0.1",
            "jobmanager.rpc.port": free_port(),
            "jobmanager.bind-host": "127.0.0.1",
            "jobmanager.memory.process.size": "1024m",
            "taskmanager.bind-host": "127.0.0.1",
            "taskmanager.host": "127.0.0.1",
            "taskmanager.numberOfTaskSlots": self.slots,
            "taskmanager.memory.process.size": self.taskmanager_memory,
            # Beam's batch jobs use blocking exchanges, each a sort-merge partition that asks
            # for 512 network buffers by default: more than a small TaskManager has for a
            # pipeline of a dozen stages.
            "taskmanager.memory.network.min": "384mb",
            "taskmanager.memory.network.max": "384mb",
            "taskmanager.network.sort-shuffle.min-buffers": 64,
            "parallelism.default": self.slots,
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": self.rest_port,
            "blob.server.port": free_port(),
            "restart-strategy": "none",
            # Beam's runner classes from the JVM's class path (see job_server_classpath).
            "classloader.resolve-order": "parent-first" if self.classpath else "child-first",
            "env.java.opts": '"' + " ".join(JAVA_OPENS) + '"',
        }
        with open(os.path.join(self.conf_dir, "flink-conf.yaml"), "w") as handle:
            handle.writelines(f"{key}: {value}\n" for key, value in settings.items())

    def _env(self) -> dict[str, str]:
        env = dict(os.environ, FLINK_CONF_DIR=self.conf_dir, FLINK_LOG_DIR=self.log_dir)
        # Flink's scripts append HADOOP_CLASSPATH to the JVM's class path.
        env["HADOOP_CLASSPATH"] = os.pathsep.join(self.classpath)
        return env

    def _start(self, name: str, script: str) -> subprocess.Popen:
        log = open(os.path.join(self.log_dir, f"{name}.out"), "a")  # noqa: SIM115
        process = subprocess.Popen(
            [os.path.join(self.home, "bin", script), "start-foreground"],
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.processes[name] = process
        return process

    def overview(self, timeout: float = 5) -> dict:
        return rest_get(self.master, "/overview", timeout)

    def wait_for_slots(self, slots: int, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            dead = [n for n, p in self.processes.items() if p.poll() is not None]
            try:
                overview = self.overview(2)
                if overview["slots-total"] == slots and overview["slots-available"] == slots:
                    return overview
            except (OSError, urllib.error.URLError, ValueError):
                overview = {}
            if dead or time.monotonic() > deadline:
                raise EngineError(
                    f"Flink did not offer {slots} free slots within {timeout:.0f} s "
                    f"(exited: {dead}; overview {overview}); logs under {self.log_dir}"
                )
            time.sleep(0.5)

    def start(self, timeout: float = 120) -> FlinkCluster:
        self._write_conf()
        self._start("jobmanager", "jobmanager.sh")
        self.start_taskmanager(timeout)
        return self

    def start_taskmanager(self, timeout: float = 120) -> None:
        self._start("taskmanager", "taskmanager.sh")
        self.wait_for_slots(self.slots, timeout)

    def kill_taskmanager(self) -> None:
        """SIGKILL to the TaskManager's JVM (its process group: the script execs java)."""
        process = self.processes.pop("taskmanager")
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def jobs(self) -> list[dict]:
        """Every job the JobManager knows: {jid, name, state, start-time, end-time, ...}."""
        return rest_get(self.master, "/jobs/overview")["jobs"]

    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in self.processes.items()}

    def stop(self) -> None:
        for name in ("taskmanager", "jobmanager"):
            process = self.processes.pop(name, None)
            if process is not None:
                _stop_group(process)


@dataclasses.dataclass
class WorkerPool:
    """This project's SDK worker pool (`python -m pipeline.beam.boot worker_pool`), the
    EXTERNAL environment's endpoint, in its own process group."""

    work_dir: str
    port: int = 0
    process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> WorkerPool:
        self.port = self.port or free_port()
        os.makedirs(self.work_dir, exist_ok=True)
        self.log_path = os.path.join(self.work_dir, "worker_pool.log")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pipeline.beam.boot", "worker_pool"]
                + ["--service_port", str(self.port), "--work_dir", self.work_dir],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while "beam_boot worker pool" not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise EngineError(f"the SDK worker pool did not start:\n{self.log()[-3000:]}")
            time.sleep(0.2)
        return self

    @property
    def endpoint(self) -> str:
        return f"localhost:{self.port}"

    def log(self) -> str:
        with open(self.log_path) as handle:
            return handle.read()

    def stop(self) -> None:
        if self.process is not None:
            _stop_group(self.process)


def run_flags(cluster: FlinkCluster, pool: WorkerPool, jar: str) -> list[str]:
    """The flags of pipeline/run_local.py for this cluster."""
    return [
        "--beam_runner",
        "flink",
        "--flink_master",
        cluster.master,
        "--flink_version",
        FLINK_MINOR,
        "--beam_job_server_jar",
        jar,
        "--beam_environment_type",
        "EXTERNAL",
        "--beam_environment_config",
        pool.endpoint,
        "--beam_stage_project",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.beam.engines", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="cache Flink and Beam's Flink job server")
    flink = sub.add_parser("flink", help="a Flink cluster and a worker pool, until Ctrl-C")
    flink.add_argument("--slots", type=int, default=2)
    flink.add_argument("--rest_port", type=int, default=8081, help="the JobManager's REST port")
    flink.add_argument("--pool_port", type=int, default=50000, help="the worker pool's port")
    flink.add_argument("--work_dir", default=None, help="default: a new temporary directory")
    args = parser.parse_args(argv)
    try:
        home, jar = fetch()
        if args.command == "fetch":
            print(f"Flink {FLINK_VERSION}: {home}\nBeam's Flink job server: {jar}")
            return 0
        work_dir = os.path.abspath(args.work_dir or tempfile.mkdtemp(prefix="flink-cluster-"))
        cluster = FlinkCluster(
            home, work_dir, job_server_classpath(jar), slots=args.slots, rest_port=args.rest_port
        )
        pool = WorkerPool(os.path.join(work_dir, "worker-pool"), port=args.pool_port)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            cluster.start()
            pool.start()
            print(f"Flink {FLINK_VERSION} at http://{cluster.master} (logs: {cluster.log_dir})")
            print(
                "run: .venv/bin/python pipeline/run_local.py "
                + " ".join(run_flags(cluster, pool, jar))
            )
            sys.stdout.flush()
            while all(p.poll() is None for p in cluster.processes.values()):
                time.sleep(1)
            raise EngineError(f"a Flink process exited; logs under {cluster.log_dir}")
        finally:
            pool.stop()
            cluster.stop()
    except EngineError as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
