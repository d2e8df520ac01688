"""One line per component start and finish, with elapsed time and whether it was cached.

TFX's LocalDagRunner announces each component and the launcher says whether it reused a cached
execution, through absl logging. This handler listens for exactly those records (matching the
message templates, not formatted text) and prints progress a person can follow.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TextIO

from components import PROGRESS_LOGGER

_RUNNING = "Component %s is running."
_FINISHED = "Component %s is finished."
_CACHED = "A cached execution %d is used."
_NEW_EXECUTION = "Going to run a new execution %d"
_FAILED = "Execution %d failed."
# Components report their own progress (e.g. Trainer epochs) on this logger.
COMPONENT_PROGRESS_LOGGER = PROGRESS_LOGGER


def _first_arg(record: logging.LogRecord) -> object:
    """The %-argument of a record with one of the templates above (each takes one)."""
    if not isinstance(record.args, tuple):
        raise TypeError(f"log record {record.msg!r} has no positional arguments: {record.args!r}")
    return record.args[0]


class ComponentProgress(logging.Handler):
    def __init__(
        self,
        total_components: int,
        stream: TextIO | None = None,
        why_executed: Callable[[str], str] | None = None,
    ):
        """why_executed(component id): why it ran instead of being reused from the cache
        (pipeline.fingerprints.explain); empty: nothing to say (its first run)."""
        super().__init__(level=logging.INFO)
        self.total = total_components
        self.why_executed = why_executed
        self.stream = stream or sys.stdout
        self.records: list[dict] = []
        self._current: dict | None = None
        self._started = time.monotonic()
        self.previous_level = logging.NOTSET

    @property
    def last_component(self) -> str | None:
        """The component running now, else the last one that finished (or failed)."""
        if self._current is not None:
            return self._current["component"]
        return self.records[-1]["component"] if self.records else None

    def _print(self, line: str) -> None:
        elapsed = time.monotonic() - self._started
        self.stream.write(f"[{elapsed:7.1f}s] {line}\n")
        self.stream.flush()

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == COMPONENT_PROGRESS_LOGGER:
            if self._current is not None:
                self._print(f"      {self._current['component']}: {record.getMessage()}")
            return
        if record.msg == _RUNNING:
            node_id = _first_arg(record)
            self._current = {
                "component": node_id,
                "start": time.monotonic(),
                "status": "running",
                "execution_id": None,
            }
            index = len(self.records) + 1
            self._print(f"({index}/{self.total}) {node_id} started")
        elif self._current is None:
            return
        elif record.msg == _CACHED:
            self._current.update(status="cached", execution_id=_first_arg(record))
        elif record.msg == _NEW_EXECUTION and isinstance(record.args, tuple):
            self._current.update(status="executed", execution_id=record.args[0])
        elif record.msg == _FAILED:
            self._finish("FAILED")
        elif record.msg == _FINISHED:
            status = self._current["status"]
            if status == "running":  # resolver / importer nodes run without an executor
                status = "resolved"
            self._finish(status)

    def _finish(self, status: str) -> None:
        current = self._current
        assert current is not None, "emit() finishes only a running component"
        current["status"] = status
        current["seconds"] = time.monotonic() - current["start"]
        self.records.append(current)
        self._current = None
        self._print(
            f"({len(self.records)}/{self.total}) {current['component']} {status} "
            f"in {current['seconds']:.1f}s"
        )
        if status == "executed" and self.why_executed is not None:
            current["reason"] = self.why_executed(current["component"])
            if current["reason"]:
                self._print(f"      {current['component']} reran: {current['reason']}")


def attach(
    total_components: int,
    stream: TextIO | None = None,
    why_executed: Callable[[str], str] | None = None,
) -> ComponentProgress:
    """Listens to TFX's absl records; INFO must pass the absl logger for that."""
    handler = ComponentProgress(total_components, stream, why_executed)
    absl_logger = logging.getLogger("absl")
    handler.previous_level = absl_logger.level
    if absl_logger.getEffectiveLevel() > logging.INFO:
        absl_logger.setLevel(logging.INFO)
    absl_logger.addHandler(handler)
    component_logger = logging.getLogger(COMPONENT_PROGRESS_LOGGER)
    component_logger.setLevel(logging.INFO)
    component_logger.addHandler(handler)
    return handler


def detach(handler: ComponentProgress) -> None:
    absl_logger = logging.getLogger("absl")
    absl_logger.removeHandler(handler)
    absl_logger.setLevel(handler.previous_level)
    logging.getLogger(COMPONENT_PROGRESS_LOGGER).removeHandler(handler)
