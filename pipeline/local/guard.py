"""What keeps a local run safe to kill, interrupt and start twice.

- One run at a time per SQLite MLMD store: an exclusive advisory lock (fcntl.flock) on
  `<metadata.sqlite>.lock`. A second run waits, saying which PID holds it. The kernel drops the
  lock when its holder dies, even by SIGKILL, so a killed run never blocks the next one.
- Recovery of what a killed run left: TFX's LocalDagRunner leaves the killed execution RUNNING in
  MLMD with PENDING output artifacts and their partial files on disk. Its cache lookup already
  ignores it (only successful executions with LIVE outputs are candidates), and downstream nodes
  only resolve LIVE artifacts, but nothing ever cleans it up. Holding the lock, any execution of
  this pipeline still NEW/RUNNING belongs to a dead run: it is marked FAILED (custom property
  `abandoned`), its outputs ABANDONED, and their partial files deleted, reported in one line.
- Ctrl-C: prints what finished and the command that resumes (the same one; finished components
  are reused from the cache), stops worker processes and exits 130 at once.

MySQL stores are shared between machines, where neither a local lock nor "every RUNNING execution
is dead" holds: there the guard only installs the Ctrl-C handler.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import logging
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from pipeline.local.progress import ComponentProgress

EXIT_INTERRUPTED = 130
# How a full disk (or RLIMIT_FSIZE) reads once TensorFlow, Beam or SQLite have wrapped the OSError.
_DISK_FULL_SIGNS = ("No space left on device", "File too large", "database or disk is full")
ABANDONED_PROPERTY = "abandoned"


class RunGuardError(RuntimeError):
    """The run cannot start safely (e.g. the output root is not writable)."""


def check_writable(directory: str) -> None:
    """Creates `directory` and writes a probe file in it, or says why not (root ignores mode
    bits, so the probe is what decides)."""
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory) as probe:
            probe.write(b"probe")
            probe.flush()
    except OSError as error:
        raise RunGuardError(
            f"output directory {directory} is not writable: {error.strerror or error} "
            "(--output_root)"
        ) from error


def describe_failure(error: BaseException) -> str:
    """A component failure in words; a full disk (or file size limit) says so and where."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            where = cause.filename
            if where is None:
                # Beam re-raises a worker's OSError without the file; its text names the step.
                step = re.search(r"\[while running '([^']+)'\]", str(error))
                where = f"an output file (Beam step {step.group(1)})" if step else "an output file"
            return f"disk full (or file size limit reached) while writing {where}: {cause.strerror}"
        cause = cause.__cause__ or cause.__context__
    text = str(error)
    if any(sign in text for sign in _DISK_FULL_SIGNS):
        return f"disk full (or file size limit reached): {text}"
    return text


def child_pids(parent: int) -> list[int]:
    """Every descendant process of `parent` (Beam workers, training tasks), deepest first."""
    import psutil

    try:
        children = psutil.Process(parent).children(recursive=True)
    except psutil.Error:
        return []
    return [child.pid for child in reversed(children)]


def recover_abandoned(connection_config, pipeline_name: str, pipeline_root: str) -> list[str]:
    """Marks executions a dead run left NEW/RUNNING as FAILED, their outputs ABANDONED, and
    deletes the partial output files. Call only while holding the run lock. Returns one
    description per recovered execution."""
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2 as mlmd

    store = metadata_store.MetadataStore(connection_config)
    pipeline_context = store.get_context_by_type_and_name("pipeline", pipeline_name)
    if pipeline_context is None:
        return []
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    recovered = []
    for execution in store.get_executions_by_context(pipeline_context.id):
        if execution.last_known_state not in (mlmd.Execution.NEW, mlmd.Execution.RUNNING):
            continue
        node = next(
            (
                context.name.rsplit(".", 1)[-1]
                for context in store.get_contexts_by_execution(execution.id)
                if context.name.startswith(pipeline_name + ".")
            ),
            f"execution {execution.id}",
        )
        output_ids = [
            event.artifact_id
            for event in store.get_events_by_execution_ids([execution.id])
            if event.type in (mlmd.Event.OUTPUT, mlmd.Event.PENDING_OUTPUT)
        ]
        artifacts = store.get_artifacts_by_id(output_ids) if output_ids else []
        removed = 0
        for artifact in artifacts:
            if artifact.state != mlmd.Artifact.LIVE:
                removed += _remove(artifact.uri)
                artifact.state = mlmd.Artifact.ABANDONED
        # TFX 1.16 registers a running execution's outputs only when it publishes them; until
        # then they exist only on disk, at <pipeline_root>/<node>/<output key>/<execution id>.
        node_dir = os.path.join(pipeline_root, node)
        keys = [k for k in _list_dir(node_dir) if not k.startswith(".")]
        for key in keys:
            removed += _remove(os.path.join(node_dir, key, str(execution.id)))
        scratch = os.path.join(node_dir, ".system", "executor_execution", str(execution.id))
        _remove(scratch)
        left = mlmd.Execution.State.Name(execution.last_known_state)
        execution.last_known_state = mlmd.Execution.FAILED
        execution.custom_properties[
            ABANDONED_PROPERTY
        ].string_value = f"left {left} by a killed run; marked by PID {os.getpid()} at {stamp}"
        if artifacts:
            store.put_artifacts(artifacts)
        store.put_executions([execution])
        recovered.append(f"{node} (execution {execution.id}, {removed} partial output(s) removed)")
    return recovered


def _list_dir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _remove(path: str) -> int:
    if not path or not os.path.lexists(path):
        return 0
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)
    return 1


class RunGuard:
    """Holds the run lock for the duration of a run; see the module docstring."""

    def __init__(self, config, argv: list[str] | None, out: TextIO):
        self._config = config
        self._out = out
        args = sys.argv[1:] if argv is None else list(argv)
        self.resume_command = shlex.join(["python", "pipeline/run_local.py", *args])
        self._lock_fd: int | None = None
        # What signal.signal returned for SIGINT: a handler, SIG_DFL/SIG_IGN, or None (not set
        # from Python).
        self._previous_handler: Callable[[int, FrameType | None], Any] | int | None = None
        self._reporter: ComponentProgress | None = None

    @classmethod
    def start(cls, config, argv: list[str] | None, out: TextIO) -> RunGuard:
        guard = cls(config, argv, out)
        output_dir = os.path.dirname(config.pipeline_root)
        check_writable(output_dir)
        if config.mysql is None:
            guard._lock(config.metadata_path + ".lock")
            try:
                recovered = recover_abandoned(
                    config.metadata_connection_config(),
                    config.pipeline_name,
                    config.pipeline_root,
                )
            except Exception as error:  # MLMD's errors are RuntimeErrors with SQLite's text
                guard.close()
                raise RunGuardError(
                    f"MLMD store {config.metadata_path} cannot be opened or written: "
                    f"{describe_failure(error)}"
                ) from error
            if recovered:
                out.write(
                    f"Recovered {len(recovered)} execution(s) a killed run left running, now "
                    f"marked FAILED (abandoned): {'; '.join(recovered)}\n"
                )
                out.flush()
        return guard

    def _lock(self, lock_path: str) -> None:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            self._out.write(
                f"Waiting: another run (PID {holder}) is using this pipeline's MLMD store "
                f"({lock_path}); this run starts when it ends.\n"
            )
            self._out.flush()
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def watch(self, reporter) -> None:
        """Ctrl-C from here on stops the run with a resume hint (main thread only)."""
        self._reporter = reporter
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGINT, self._on_interrupt)

    def _on_interrupt(self, signum, frame) -> None:
        records = self._reporter.records if self._reporter else []
        finished = ", ".join(f"{r['component']} ({r['status']})" for r in records) or "none"
        running = self._reporter.last_component if self._reporter else None
        stopped = running and not (records and records[-1]["component"] == running)
        running_text = f"; stopped: {running}" if stopped else ""
        self._out.write(
            f"\nInterrupted. Finished: {finished}{running_text}.\n"
            f"Resume with the same command (finished components are reused from the cache):\n"
            f"  {self.resume_command}\n"
        )
        self._out.flush()
        logging.warning("interrupted by signal %d; finished: %s", signum, finished)
        for pid in child_pids(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        logging.shutdown()
        # Not a Python exception: Beam and TensorFlow threads would delay or swallow it. The
        # execution left RUNNING is recovered by the next run.
        os._exit(EXIT_INTERRUPTED)

    def close(self) -> None:
        if self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._lock_fd, 0)
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None
