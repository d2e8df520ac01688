"""Runs of `python pipeline/run_local.py` that tests can kill, interrupt and inspect."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

from ml_metadata.proto import metadata_store_pb2 as mlmd

from pipeline.mlmd import connection, records

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_LOCAL = os.path.join(PROJECT_ROOT, "pipeline", "run_local.py")
FAST = ("--train_steps", "5", "--example_shards", "2", "--transform_shards", "2")


class Run:
    """A run_local process whose console output is watched line by line."""

    def __init__(self, *args: str, log_path: str):
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 (closed in wait())
        self.process = subprocess.Popen(
            [sys.executable, RUN_LOCAL, *FAST, *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=PROJECT_ROOT,
        )

    @property
    def output(self) -> str:
        with open(self.log_path) as handle:
            return handle.read()

    def wait_for(self, text: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.process.poll() is not None:
                raise AssertionError(f"run ended before {text!r}:\n{self.output}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} after {timeout}s:\n{self.output}")
            time.sleep(0.2)

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def wait(self, timeout: float = 600) -> int:
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self._log.close()


def wait_for_running_execution(metadata_path: str, node_id: str, timeout: float = 120) -> int:
    """The id of `node_id`'s RUNNING execution, once the run has registered it in MLMD.

    "<node> started" is printed when TFX's launcher begins the node, before its driver resolves
    the inputs and registers the execution: a signal sent on that line alone can land before
    there is any execution to leave behind. Read-only, so the run's own writes are not blocked.
    """
    query = (
        "SELECT e.id FROM Execution e JOIN Association a ON a.execution_id = e.id "
        "JOIN Context c ON c.id = a.context_id JOIN Type t ON t.id = c.type_id "
        "WHERE t.name = 'node' AND c.name LIKE ? AND e.last_known_state = ?"
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            with sqlite3.connect(f"file:{metadata_path}?mode=ro", uri=True) as sqlite_db:
                rows = sqlite_db.execute(query, (f"%.{node_id}", mlmd.Execution.RUNNING)).fetchall()
            if rows:
                return max(row[0] for row in rows)
        except sqlite3.OperationalError:  # locked by the run's writer for a moment
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no RUNNING {node_id} execution in {metadata_path}")
        time.sleep(0.2)


def kill(run: Run) -> None:
    """SIGKILL, as the OOM killer or a lost session does: no handler runs."""
    run.signal(signal.SIGKILL)
    assert run.wait(30) == -signal.SIGKILL


def store_is_consistent(metadata_path: str) -> list[str]:
    """Problems found in the store: SQLite integrity, executions left active, inputs that were
    not LIVE outputs of a successful execution, abandoned outputs still on disk."""
    problems = []
    with sqlite3.connect(metadata_path) as sqlite_db:
        [(integrity,)] = sqlite_db.execute("PRAGMA integrity_check").fetchall()
    if integrity != "ok":
        problems.append(f"integrity_check: {integrity}")
    store = connection.open_store(metadata_path)
    executions = {e.id: e for e in store.get_executions()}
    artifacts = {a.id: a for a in store.get_artifacts()}
    events = store.get_events_by_execution_ids(list(executions))
    producers: dict[int, list[int]] = {}
    for event in events:
        if event.type == mlmd.Event.OUTPUT:
            producers.setdefault(event.artifact_id, []).append(event.execution_id)
    good = (mlmd.Execution.COMPLETE, mlmd.Execution.CACHED)
    for execution in executions.values():
        if execution.last_known_state in (mlmd.Execution.NEW, mlmd.Execution.RUNNING):
            problems.append(f"execution {execution.id} left {execution.last_known_state}")
    for event in events:
        if event.type != mlmd.Event.INPUT:
            continue
        artifact = artifacts[event.artifact_id]
        if artifact.state != mlmd.Artifact.LIVE:
            problems.append(f"execution {event.execution_id} read non-LIVE artifact {artifact.id}")
        made_by = [executions[e].last_known_state for e in producers.get(artifact.id, [])]
        if made_by and not any(state in good for state in made_by):
            problems.append(f"artifact {artifact.id} read but made only by failed executions")
    for artifact in artifacts.values():
        if artifact.state == mlmd.Artifact.ABANDONED and os.path.exists(artifact.uri):
            problems.append(f"abandoned artifact {artifact.id} still on disk: {artifact.uri}")
    return problems


def node_states(metadata_path: str) -> list[dict[str, str]]:
    store = connection.open_store(metadata_path)
    return list(records.Store(store).node_states_by_run().values())
