"""Cluster launchers: run one training task per process with its TF_CONFIG.

One interface (Launcher.run(spec, task)) for every place a cluster can live. The local launcher
starts the processes on localhost; the Kubernetes launchers (a Training Operator v1 TFJob, a
Kubeflow Trainer v2 TrainJob) run the same `python -m components.training.run_task` command in
one pod per task.

Tasks:
  multi_worker_mirrored  worker 0..N-1; worker 0 is the chief (exports the model)
  parameter_server       chief 0 (the coordinator, runs the training function), worker 0..N-1
                         and ps 0..M-1 (TensorFlow servers that run until the chief is done)
A single-worker strategy that needs a fresh TensorFlow runtime (logical CPU devices) runs as
one task without TF_CONFIG.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging as std_logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Protocol

from components import PROGRESS_LOGGER
from components.training import settings

log = std_logging.getLogger("tfx_scaleout.cluster")
progress_log = std_logging.getLogger(PROGRESS_LOGGER)
PROGRESS_PREFIX = f"{PROGRESS_LOGGER}: "


class ClusterError(RuntimeError):
    pass


class Cancelled(ClusterError):
    """The Trainer was asked to stop (SIGTERM: a cancelled run) while its cluster ran."""


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    strategy: str
    workers: int = 1
    ps: int = 0

    @classmethod
    def for_task(cls, task) -> ClusterSpec:
        return cls(
            strategy=task.settings.strategy, workers=task.settings.workers, ps=task.settings.ps
        ).validate()

    def validate(self) -> ClusterSpec:
        if self.strategy not in settings.STRATEGIES:
            raise ClusterError(f"unknown strategy {self.strategy!r}")
        if self.workers < 1:
            raise ClusterError(f"workers must be >= 1, got {self.workers}")
        if self.strategy == "parameter_server" and self.ps < 1:
            raise ClusterError("parameter_server needs at least one parameter server (ps >= 1)")
        if self.strategy != "parameter_server" and self.ps:
            raise ClusterError(f"ps={self.ps} is only valid with strategy parameter_server")
        return self

    def tasks(self) -> list[tuple[str, int]]:
        if self.strategy == "parameter_server":
            return (
                [("chief", 0)]
                + [("worker", i) for i in range(self.workers)]
                + [("ps", i) for i in range(self.ps)]
            )
        return [("worker", i) for i in range(self.workers)]

    def primary_tasks(self) -> list[tuple[str, int]]:
        """Tasks whose successful exit ends the job (servers are stopped afterwards)."""
        if self.strategy == "parameter_server":
            return [("chief", 0)]
        return self.tasks()

    def cluster_def(self, addresses: dict[tuple[str, int], str]) -> dict[str, list[str]]:
        cluster: dict[str, list[str]] = collections.defaultdict(list)
        for task_type, index in self.tasks():
            cluster[task_type].append(addresses[task_type, index])
        return dict(cluster)

    def tf_config(self, cluster: dict[str, list[str]], task_type: str, index: int) -> str | None:
        if not settings.needs_cluster(self.strategy):
            return None
        return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def task_command(task_file: str) -> list[str]:
    """The command every task process runs on this machine (this interpreter)."""
    return [sys.executable, "-m", "components.training.run_task", "--task", task_file]


def pod_command(task_file: str) -> list[str]:
    """The command every task runs in a Kubernetes pod of the project's image: its `python` (the
    image's virtual environment is first on PATH), not this interpreter's path, which the
    image has only when the Trainer itself runs in it."""
    return ["python", "-m", "components.training.run_task", "--task", task_file]


class Launcher(Protocol):
    def run(self, spec: ClusterSpec, task) -> None: ...


@dataclasses.dataclass
class _Process:
    name: str
    popen: subprocess.Popen
    tail: collections.deque
    reader: threading.Thread


class LocalProcessLauncher:
    """Runs every task as a process on localhost (free loopback ports), streams each task's
    output with a [task] prefix, and restarts the whole cluster when any task dies, up to
    max_restarts times; BackupAndRestore makes the restarted tasks resume."""

    def __init__(self, max_restarts: int = 2, poll_seconds: float = 0.2, command=task_command):
        self.max_restarts = max_restarts
        self.poll_seconds = poll_seconds
        self.command = command
        self.processes: dict[str, _Process] = {}
        self.attempts = 0

    def run(self, spec: ClusterSpec, task) -> None:
        spec.validate()
        with tempfile.TemporaryDirectory(prefix="train-task-") as work_dir:
            task_file = os.path.join(work_dir, "task.json")
            task.save(task_file)
            self.run_command(spec, self.command(task_file))

    def run_command(self, spec: ClusterSpec, command: list[str]) -> None:
        while True:
            self.attempts += 1
            failure = self._run_once(spec, command)
            if failure is None:
                return
            if self.attempts > self.max_restarts:
                raise ClusterError(
                    f"training cluster failed after {self.attempts} attempt(s); last failure: "
                    f"{failure}"
                )
            log.warning(
                "%s; restarting the cluster (attempt %d of %d)",
                failure,
                self.attempts + 1,
                self.max_restarts + 1,
            )
            progress_log.info(
                "%s; restarting the cluster (attempt %d of %d)",
                failure,
                self.attempts + 1,
                self.max_restarts + 1,
            )

    def _run_once(self, spec: ClusterSpec, command: list[str]) -> str | None:
        import portpicker

        addresses = {t: f"localhost:{portpicker.pick_unused_port()}" for t in spec.tasks()}
        cluster = spec.cluster_def(addresses)
        self.processes = {}
        for task_type, index in spec.tasks():
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
            tf_config = spec.tf_config(cluster, task_type, index)
            if tf_config:
                env["TF_CONFIG"] = tf_config
            else:
                env.pop("TF_CONFIG", None)
            self._start(f"{task_type}-{index}", command, env)
        primaries = {f"{t}-{i}" for t, i in spec.primary_tasks()}
        try:
            while True:
                finished = {name for name in primaries if self.processes[name].popen.poll() == 0}
                for name, process in self.processes.items():
                    code = process.popen.poll()
                    if code is not None and (code != 0 or name not in primaries):
                        return self._describe_failure(name, code, process)
                if finished == primaries:
                    return None
                time.sleep(self.poll_seconds)
        finally:
            self._stop_all()

    def _start(self, name: str, command: list[str], env: dict) -> None:
        popen = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        tail: collections.deque = collections.deque(maxlen=15)
        reader = threading.Thread(target=self._relay, args=(name, popen, tail), daemon=True)
        reader.start()
        self.processes[name] = _Process(name, popen, tail, reader)
        log.info("started task %s (pid %d)", name, popen.pid)

    @staticmethod
    def _relay(name: str, popen: subprocess.Popen, tail: collections.deque) -> None:
        assert popen.stdout is not None, "_start() opens it with stdout=PIPE"
        for line in popen.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            if line.startswith(PROGRESS_PREFIX):
                progress_log.info("[%s] %s", name, line[len(PROGRESS_PREFIX) :])
            else:
                log.info("[%s] %s", name, line)

    @staticmethod
    def _describe_failure(name: str, code: int, process: _Process) -> str:
        process.reader.join(timeout=2)
        if code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        elif code == 0:
            how = "exited before the chief finished"
        else:
            how = f"exited with code {code}"
        # Python prints the exception last; TensorFlow may log shutdown lines after it.
        lines = [line.strip() for line in process.tail if line.strip()]
        errors = [line for line in lines if "Error" in line or "Exception" in line]
        last = (errors[-1] if errors else " | ".join(lines[-2:]))[-600:]
        return f"task {name} {how}" + (f": {last}" if last else "")

    def _stop_all(self) -> None:
        for process in self.processes.values():
            if process.popen.poll() is None:
                os.killpg(process.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes.values():
            try:
                process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.popen.pid, signal.SIGKILL)
                process.popen.wait()
            process.reader.join(timeout=2)
