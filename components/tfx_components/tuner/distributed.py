"""KerasTuner's distributed mode on one machine (or in the Tuner's pod), which TFX's Tuner offers
on Vertex AI only: one oracle chief process and N tuner worker processes, all running the same
tuner_fn on the same working directory. With the Trainer's TFJob or TrainJob launcher the same
processes are the replicas of a job instead (run_on_launcher, components.training.tuner_job).

    python -m components.tfx_components.tuner.distributed TASK_FILE

with KERASTUNER_TUNER_ID (chief, tuner0..tunerN-1), KERASTUNER_ORACLE_IP (127.0.0.1) and
KERASTUNER_ORACLE_PORT (a loopback port no socket holds, picked by binding port 0; the chief's
port is checked listening before any worker starts, and a chief that cannot bind it is started
again on another). The chief's oracle hands out the trials and keeps every finished one (in
memory and in its directory); a worker that dies (killed, OOM) is started again with its tuner
id, and the oracle gives it back the trial it was running, up to max_restarts times a worker.
When the oracle has handed out max_trials, the workers stop, the chief writes TFX's
best_hyperparameters and tuner_results files and a summary, and every process has exited.
"""

from __future__ import annotations

import contextlib
import json
import logging as std_logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from components import KERAS_ENV, PROGRESS_LOGGER
from components.tfx_components.tuner.search import CHIEF, SUMMARY_FILE, TunerTask, main

progress_log = std_logging.getLogger(PROGRESS_LOGGER)
ORACLE_IP = "127.0.0.1"
TASK_FILE = "tuner_task.json"
# {tuner id: pid} of the running processes, rewritten at every (re)start: for a reader (and the
# test that kills a worker).
PIDS_FILE = "tuner_processes.json"
POLL_SECONDS = 0.5
CHIEF_LISTEN_SECONDS = 120
PORT_ATTEMPTS = 3


def free_port() -> int:
    """A loopback port no socket holds now (bound at port 0 and released)."""
    with socket.socket() as probe:
        probe.bind((ORACLE_IP, 0))
        return probe.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((ORACLE_IP, port)) == 0


class _Processes:
    """The chief and the workers: started, watched, restarted, stopped."""

    def __init__(self, task_path: str, working_dir: str, port: int):
        self.task_path = task_path
        self.working_dir = working_dir
        self.port = port
        self.running: dict[str, subprocess.Popen] = {}
        self.logs = os.path.join(working_dir, "logs")
        os.makedirs(self.logs, exist_ok=True)

    def start(self, tuner_id: str) -> subprocess.Popen:
        env = dict(
            os.environ,
            **KERAS_ENV,
            KERASTUNER_TUNER_ID=tuner_id,
            KERASTUNER_ORACLE_IP=ORACLE_IP,
            KERASTUNER_ORACLE_PORT=str(self.port),
        )
        log = open(os.path.join(self.logs, f"{tuner_id}.log"), "ab")  # noqa: SIM115 (child's)
        with log:
            process = subprocess.Popen(
                [sys.executable, "-m", __name__, self.task_path],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.running[tuner_id] = process
        self._write_pids()
        return process

    def _write_pids(self) -> None:
        path = os.path.join(self.working_dir, PIDS_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump({k: p.pid for k, p in self.running.items()}, handle)
        os.replace(path + ".tmp", path)

    def log_tail(self, tuner_id: str, lines: int = 8) -> str:
        try:
            with open(os.path.join(self.logs, f"{tuner_id}.log"), errors="replace") as handle:
                return "".join(handle.readlines()[-lines:]).strip()
        except OSError:
            return ""

    def stop_all(self, grace: float = 10) -> None:
        for process in self.running.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in self.running.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _start_chief(task_path: str, working_dir: str) -> _Processes:
    """The chief on a free port, checked listening; another port when it could not bind."""
    for _ in range(PORT_ATTEMPTS):
        processes = _Processes(task_path, working_dir, free_port())
        chief = processes.start(CHIEF)
        deadline = time.monotonic() + CHIEF_LISTEN_SECONDS
        while time.monotonic() < deadline and chief.poll() is None:
            if _listening(processes.port):
                return processes
            time.sleep(POLL_SECONDS)
        processes.stop_all()
        if chief.returncode not in (None, 0, -signal.SIGTERM) and "bind" not in (
            processes.log_tail(CHIEF, 40).lower()
        ):
            raise RuntimeError(
                f"the tuner's oracle chief ended with {_describe_exit(chief.returncode)}: "
                f"{processes.log_tail(CHIEF)} (log: {processes.logs}/{CHIEF}.log)"
            )
    raise RuntimeError(
        f"the tuner's oracle chief did not listen on a loopback port in {PORT_ATTEMPTS} attempts "
        f"(log: {working_dir}/logs/{CHIEF}.log)"
    )


def run(
    input_dict,
    output_dict,
    exec_properties: dict[str, Any],
    working_dir: str,
    *,
    workers: int,
    max_trials: int | None,
    max_restarts: int,
) -> dict[str, Any]:
    """Runs the search; returns the chief's summary (trials, best_score, objective,
    best_values) and restarts: the workers started again."""
    os.makedirs(working_dir, exist_ok=True)
    task_path = _save_task(input_dict, output_dict, exec_properties, working_dir, max_trials)
    processes = _start_chief(task_path, working_dir)
    progress_log.info(
        "oracle chief on %s:%d, %d tuner worker(s)", ORACLE_IP, processes.port, workers
    )
    restarts = {f"tuner{i}": 0 for i in range(workers)}
    try:
        for tuner_id in restarts:
            processes.start(tuner_id)
        _watch(processes, restarts, max_restarts)
    finally:
        processes.stop_all()
    result = _read_summary(working_dir)
    result["restarts"] = sum(restarts.values())
    return result


def _save_task(input_dict, output_dict, exec_properties, working_dir: str, max_trials) -> str:
    from tfx.types import artifact_utils

    task_path = os.path.join(working_dir, TASK_FILE)
    TunerTask(
        input_dict=artifact_utils.jsonify_artifact_dict(input_dict),
        output_dict=artifact_utils.jsonify_artifact_dict(output_dict),
        exec_properties=json.dumps(
            {
                k: v
                for k, v in exec_properties.items()
                if isinstance(v, (str, int, float, bool, type(None)))
            }
        ),
        working_dir=working_dir,
        max_trials=max_trials,
    ).save(task_path)
    return task_path


def _read_summary(working_dir: str) -> dict[str, Any]:
    import tensorflow as tf

    path = os.path.join(working_dir, SUMMARY_FILE)
    if not tf.io.gfile.exists(path):
        raise RuntimeError(
            f"the tuner's oracle chief ended without writing {path}: its search did not finish"
        )
    with tf.io.gfile.GFile(path) as handle:
        return json.loads(handle.read())


def run_on_launcher(
    input_dict,
    output_dict,
    exec_properties: dict[str, Any],
    working_dir: str,
    *,
    workers: int,
    max_trials: int | None,
    launcher: dict[str, Any],
    max_restarts: int,
) -> dict[str, Any]:
    """The search as a job of the Trainer's launcher (`launcher`: its settings, kind tfjob or
    trainjob; components.training.tuner_job): worker 0 of the job is the oracle chief, workers
    1..N the tuners. The launcher creates the job, reports its pods while it waits, and fails
    with a failed pod's reason and last lines; working_dir is storage the job's pods share (the
    Tuner's output), or KFP's launcher's local copy under a minio:// or s3:// root, which the
    Kubernetes launchers stage on the job's volume and copy back (components.training.staging).
    Returns the chief's summary; restarts: None (the operator restarts pods, which the
    launcher's progress lines report)."""
    import tensorflow as tf

    from components.training import cluster, launchers, tuner_job

    tf.io.gfile.makedirs(working_dir)
    task_path = _save_task(input_dict, output_dict, exec_properties, working_dir, max_trials)
    settings = tuner_job.job_settings(launcher, workers, max_restarts)
    task = tuner_job.TunerJobTask(
        tuner_task=task_path, model_run_dir=working_dir, settings=settings
    )
    progress_log.info(
        "oracle chief and %d tuner worker(s) as the %d workers of a %s job (worker 0 serves the "
        "oracle; search in %s)",
        workers,
        workers + 1,
        type(settings.launcher).KIND,
        working_dir,
    )
    launchers.create(settings).run(cluster.ClusterSpec.for_task(task), task)
    result = _read_summary(working_dir)
    result["restarts"] = None
    return result


def _watch(processes: _Processes, restarts: dict[str, int], max_restarts: int) -> None:
    """Until the chief exits: a worker that failed is started again with its tuner id."""
    chief = processes.running[CHIEF]
    while True:
        code = chief.poll()
        if code is not None:
            if code != 0:
                raise RuntimeError(
                    f"the tuner's oracle chief ended with {_describe_exit(code)}: "
                    f"{processes.log_tail(CHIEF)} (log: {processes.logs}/{CHIEF}.log)"
                )
            return
        for tuner_id in restarts:
            code = processes.running[tuner_id].poll()
            if code is None or code == 0:
                continue
            if restarts[tuner_id] >= max_restarts:
                raise RuntimeError(
                    f"tuner worker {tuner_id} ended with {_describe_exit(code)} after "
                    f"{max_restarts} restart(s): {processes.log_tail(tuner_id)} (log: "
                    f"{processes.logs}/{tuner_id}.log)"
                )
            restarts[tuner_id] += 1
            old = processes.running[tuner_id].pid
            new = processes.start(tuner_id).pid
            progress_log.info(
                "tuner worker %s (pid %d) ended with %s: restarted as pid %d; the oracle keeps "
                "the finished trials and gives it back its unfinished one",
                tuner_id,
                old,
                _describe_exit(code),
                new,
            )
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
