"""Flink and Spark for Beam's portable runners on this machine: obtained from PyPI and Maven
Central, cached, and started as standalone clusters on 127.0.0.1.

    python -m pipeline.beam.engines fetch [flink|spark]    # cache the engines (a few minutes once)
    python -m pipeline.beam.engines flink [--slots 2] [--rest_port 8081] [--job_port 8099]
                                          [--pool_port 50000]
    python -m pipeline.beam.engines spark [--cores 2] [--master_port 7077] [--job_port 8099]
                                          [--pool_port 50000]

`fetch` caches them (pipeline/beam/engine_fetch.py: what, where and how).

Which versions, and why (see docs/beam.md): Maven Central as these machines reach it serves no
Beam job-server jar at all, no `beam-runners-flink-1.17`/`-1.18`, and `beam-runners-java-job-
service` only up to 2.57.0. The newest Beam whose Flink runner and job service both resolve is
2.56.0, whose newest Flink is 1.16 (`beam-runners-flink-1.16`); Flink 1.16.3 from PyPI is the
matching cluster. The Python SDK (2.59) talks to that job server through Beam's portable job API.

`flink` starts a JobManager and a TaskManager (separate JVMs, their logs under the work
directory), `spark` a Spark master and worker (separate JVMs); both then start one Beam job
server for the cluster (every Beam job of a run goes through it: `--beam_job_endpoint`) and this
project's SDK worker pool, print the flags for `pipeline/run_local.py`, and stop everything on
Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from pipeline.beam.engine_fetch import (
    FLINK_VERSION,
    JAVA_OPENS,
    SPARK_VERSION,
    EngineError,
    fetch,
    fetch_spark,
    job_server_classpath,
)

# --- a standalone cluster on this machine ------------------------------------------------------


# Every port this process handed out: the kernel may offer a port again as soon as its probe
# socket is closed, before the service it was picked for binds it, so that two services started
# one after the other could both be handed it (the Spark master and the SDK worker pool were).
_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()


def free_port() -> int:
    """A loopback port no socket holds now and this process has not handed out before."""
    with _HANDED_OUT_LOCK:
        for _ in range(100):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise RuntimeError("no free loopback port that was not handed out already")


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


def _pids(processes: dict[str, subprocess.Popen]) -> dict[str, int]:
    return {name: process.pid for name, process in processes.items()}


def _stop_all(processes: dict[str, subprocess.Popen], order: tuple[str, ...]) -> None:
    """Stops the named processes' groups in `order` (workers before their master)."""
    for name in order:
        process = processes.pop(name, None)
        if process is not None:
            _stop_group(process)


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
            # Beam's data plane to the SDK harness (gRPC over Netty) allocates direct buffers
            # from the task's off-heap budget, which is 0 by default: 1,000,000 rows through
            # Transform failed with "OutOfMemoryError: Direct buffer memory" (the direct limit
            # was network + framework off-heap, 512 MB). Managed memory (Flink's own sorter and
            # state, 0.4 of the process by default) is little used by Beam's portable stages.
            "taskmanager.memory.task.off-heap.size": "384mb",
            "taskmanager.memory.managed.size": "256mb",
            "parallelism.default": self.slots,
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": self.rest_port,
            "blob.server.port": free_port(),
            # The JobManager's and TaskManagers' working files (the blob store holds each job's
            # jar, 160 MB) under the cluster's own directory, not the JVM's /tmp: a TaskManager
            # that is killed leaves its directory behind.
            "io.tmp.dirs": os.path.join(self.work_dir, "tmp"),
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
        return _pids(self.processes)

    def stop(self) -> None:
        _stop_all(self.processes, ("taskmanager", "jobmanager"))


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


@dataclasses.dataclass
class SparkCluster:
    """A Spark standalone master and worker (bin/spark-class ...Master / ...Worker), each a JVM in
    its own process group, on 127.0.0.1 with free ports; logs and the worker's directory under
    work_dir. The master's web UI answers /json/ (workers, cores, applications)."""

    home: str
    work_dir: str
    cores: int = 2
    worker_memory: str = "3g"
    # The master's port (spark://127.0.0.1:PORT) and its web UI's; 0: free ones.
    port: int = 0
    webui_port: int = 0
    processes: dict[str, subprocess.Popen] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.port = self.port or free_port()
        self.webui_port = self.webui_port or free_port()
        self.log_dir = os.path.join(self.work_dir, "log")

    @property
    def master_url(self) -> str:
        """What --spark_master_url (and the job server's --spark-master-url) names."""
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        conf = os.path.join(self.work_dir, "conf")  # empty: no spark-defaults of the machine
        os.makedirs(conf, exist_ok=True)
        return dict(
            os.environ,
            SPARK_HOME=self.home,
            SPARK_CONF_DIR=conf,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=self.log_dir,
            SPARK_LOCAL_DIRS=os.path.join(self.work_dir, "local"),  # else the JVM's /tmp
            SPARK_NO_DAEMONIZE="1",
        )

    def _start(self, name: str, arguments: list[str]) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        log = open(os.path.join(self.log_dir, f"{name}.out"), "a")  # noqa: SIM115
        self.processes[name] = subprocess.Popen(
            [os.path.join(self.home, "bin", "spark-class"), *arguments],
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def overview(self, timeout: float = 5) -> dict:
        return rest_get(f"127.0.0.1:{self.webui_port}", "/json/", timeout)

    def start(self, timeout: float = 120) -> SparkCluster:
        self._start(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
            + ["--port", str(self.port), "--webui-port", str(self.webui_port)],
        )
        worker_dir = os.path.join(self.work_dir, "worker")
        self._start(
            "worker",
            ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
            + ["--cores", str(self.cores), "--memory", self.worker_memory]
            + ["--webui-port", str(free_port()), "--work-dir", worker_dir, self.master_url],
        )
        deadline = time.monotonic() + timeout
        while True:
            dead = [n for n, p in self.processes.items() if p.poll() is not None]
            try:
                overview = self.overview(2)
                if overview["aliveworkers"] == 1 and overview["cores"] == self.cores:
                    return self
            except (OSError, urllib.error.URLError, ValueError):
                overview = {}
            if dead or time.monotonic() > deadline:
                self.stop()
                raise EngineError(
                    f"Spark did not offer a worker with {self.cores} cores within "
                    f"{timeout:.0f} s (exited: {dead}; overview {overview}); logs under "
                    f"{self.log_dir}"
                )
            time.sleep(0.5)

    def applications(self) -> list[dict]:
        """Every application the master knows: {id, name, state, starttime, duration, ...}."""
        overview = self.overview()
        return overview["activeapps"] + overview["completedapps"]

    def pids(self) -> dict[str, int]:
        return _pids(self.processes)

    def stop(self) -> None:
        _stop_all(self.processes, ("worker", "master"))


@dataclasses.dataclass
class JobServer:
    """One Beam job server (`java -jar` of a job-server jar) for a cluster, in its own process
    group: every Beam job of a run (and of later runs) goes through it (`--beam_job_endpoint`),
    rather than Beam's FlinkRunner/SparkRunner starting one JVM per Beam job (7-18 s each here).
    master: ("--flink-master", "HOST:PORT") or ("--spark-master-url", "spark://HOST:PORT")."""

    jar: str
    work_dir: str
    master: tuple[str, str]
    port: int = 0
    process: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> JobServer:
        self.port = self.port or free_port()
        os.makedirs(self.work_dir, exist_ok=True)
        self.log_path = os.path.join(self.work_dir, "job_server.log")
        # Java ignores TMPDIR: the Spark driver's block manager and the staged files go under
        # the job server's own directory.
        tmp = os.path.join(self.work_dir, "tmp")
        os.makedirs(tmp, exist_ok=True)
        command = ["java", f"-Djava.io.tmpdir={tmp}", "-jar", self.jar, *self.master]
        command += ["--job-port", str(self.port)]
        command += ["--artifact-port", str(free_port()), "--expansion-port", str(free_port())]
        command += ["--artifacts-dir", os.path.join(self.work_dir, "artifacts")]
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # The Spark driver (in this JVM) on the address the cluster's workers reach.
                env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"),
            )
        deadline = time.monotonic() + timeout
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise EngineError(f"the Beam job server did not start:\n{self.log()[-3000:]}")
            time.sleep(0.5)

    @property
    def endpoint(self) -> str:
        return f"localhost:{self.port}"

    def log(self) -> str:
        with open(self.log_path, errors="replace") as handle:
            return handle.read()

    def stop(self) -> None:
        if self.process is not None:
            _stop_group(self.process)


def job_server_flags(job_server: JobServer, pool: WorkerPool, runner: str) -> list[str]:
    """The flags of pipeline/run_local.py for a cluster behind `job_server`."""
    return [
        "--beam_runner",
        runner,
        "--beam_job_endpoint",
        job_server.endpoint,
        "--beam_environment_type",
        "EXTERNAL",
        "--beam_environment_config",
        pool.endpoint,
        "--beam_stage_project",
    ]


def _serve(cluster: FlinkCluster | SparkCluster, job_server: JobServer, pool: WorkerPool) -> None:
    """Starts the cluster, its job server and the worker pool, prints the run's flags, and
    waits until a process exits (an error) or Ctrl-C / SIGTERM; stops all of them either way."""
    runner = "flink" if isinstance(cluster, FlinkCluster) else "spark"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        cluster.start()
        job_server.start()
        pool.start()
        if isinstance(cluster, FlinkCluster):
            print(f"Flink {FLINK_VERSION} at http://{cluster.master} (logs: {cluster.log_dir})")
        else:
            print(
                f"Spark {SPARK_VERSION} at {cluster.master_url}, web UI "
                f"http://127.0.0.1:{cluster.webui_port} (logs: {cluster.log_dir})"
            )
        print(f"Beam job server at {job_server.endpoint} (log: {job_server.log_path})")
        flags = job_server_flags(job_server, pool, runner)
        print("run: .venv/bin/python pipeline/run_local.py " + " ".join(flags))
        sys.stdout.flush()
        processes = [*cluster.processes.values(), job_server.process, pool.process]
        while all(p is not None and p.poll() is None for p in processes):
            time.sleep(1)
        raise EngineError(f"a {runner} process exited; logs under {cluster.log_dir}")
    finally:
        pool.stop()
        job_server.stop()
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.beam.engines", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = sub.add_parser("fetch", help="cache the engines and Beam's job servers for them")
    fetch_cmd.add_argument("engine", nargs="?", choices=("flink", "spark", "all"), default="all")
    flink = sub.add_parser(
        "flink", help="a Flink cluster, its Beam job server and a worker pool, until Ctrl-C"
    )
    flink.add_argument("--slots", type=int, default=2)
    flink.add_argument("--rest_port", type=int, default=8081, help="the JobManager's REST port")
    spark = sub.add_parser(
        "spark", help="a Spark master and worker, their Beam job server and a worker pool"
    )
    spark.add_argument("--cores", type=int, default=2, help="the worker's cores")
    spark.add_argument("--master_port", type=int, default=7077, help="spark://127.0.0.1:PORT")
    spark.add_argument("--webui_port", type=int, default=8080, help="the master's web UI")
    for engine in (flink, spark):
        engine.add_argument("--job_port", type=int, default=8099, help="the Beam job server's")
        engine.add_argument("--pool_port", type=int, default=50000, help="the worker pool's")
        engine.add_argument("--work_dir", default=None, help="default: a new temporary folder")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            if args.engine in ("flink", "all"):
                home, jar = fetch()
                print(f"Flink {FLINK_VERSION}: {home}\nBeam's Flink job server: {jar}")
            if args.engine in ("spark", "all"):
                home, jar = fetch_spark()
                print(f"Spark {SPARK_VERSION}: {home}\nBeam's Spark job server: {jar}")
            return 0
        prefix = f"{args.command}-cluster-"
        work_dir = os.path.abspath(args.work_dir or tempfile.mkdtemp(prefix=prefix))
        pool = WorkerPool(os.path.join(work_dir, "worker-pool"), port=args.pool_port)
        cluster: FlinkCluster | SparkCluster
        if args.command == "flink":
            home, jar = fetch()
            cluster = FlinkCluster(
                home,
                work_dir,
                job_server_classpath(jar),
                slots=args.slots,
                rest_port=args.rest_port,
            )
            master = ("--flink-master", cluster.master)
        else:
            home, jar = fetch_spark()
            cluster = SparkCluster(
                home, work_dir, cores=args.cores, port=args.master_port, webui_port=args.webui_port
            )
            master = ("--spark-master-url", cluster.master_url)
        job_server = JobServer(jar, os.path.join(work_dir, "job-server"), master, args.job_port)
        _serve(cluster, job_server, pool)
    except EngineError as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
