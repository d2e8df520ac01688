"""What the test run's fixtures share about the session: the CI rule for an engine or tool that
is not there (a skip here, a failure under CI=true, so that CI cannot pass by skipping), a way
to print progress lines (a build, an engine starting) to the terminal, and the session's phases.

Phases: a build (Go binaries, an image, an engine fetched) or a shared fixture (a cluster up, a
pipeline run) records its wall time with `phase()`, in whichever xdist worker it runs. The
records go to one file the controller names (PHASES_ENV, inherited by the workers it starts), and
the controller prints them at the end of the run, with pytest's 25 slowest test phases
(`--durations`, pyproject.toml), so that a CI log shows where the time went."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def unavailable(reason: str) -> NoReturn:
    """Skips the test for `reason`; under CI=true fails it instead."""
    if under_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def say(config: pytest.Config) -> Callable[[str], None]:
    """Writes a line to the terminal report (nothing where there is none: xdist workers)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def write(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    return write


PHASES_ENV = "TFX_SCALEOUT_TEST_PHASES"


def start_phase_log(config: pytest.Config) -> None:
    """In the controller (or a run without xdist): the file every process appends phases to."""
    if hasattr(config, "workerinput"):
        return
    handle, path = tempfile.mkstemp(prefix="tfx-scaleout-test-phases-", suffix=".jsonl")
    os.close(handle)
    os.environ[PHASES_ENV] = path


@contextlib.contextmanager
def phase(what: str) -> Iterator[dict]:
    """Times the block as one phase of the session; the block may add a `detail` (e.g.
    "cached") to the yielded dict. Recorded also when the block fails."""
    record: dict = {"what": what, "detail": ""}
    started = time.monotonic()
    try:
        yield record
    except BaseException:
        record["detail"] = (record["detail"] + " failed").strip()
        raise
    finally:
        record["seconds"] = round(time.monotonic() - started, 1)
        record["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
        path = os.environ.get(PHASES_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")


def phase_lines() -> list[str]:
    """The recorded phases, longest first, and their total; the log file is removed."""
    path = os.environ.pop(PHASES_ENV, "")
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    os.unlink(path)
    if not records:
        return []
    records.sort(key=lambda record: -record["seconds"])
    lines = [
        f"{record['seconds']:8.1f}s  {record['what']}"
        + (f" ({record['detail']})" if record["detail"] else "")
        + f"  [{record['worker']}]"
        for record in records
    ]
    total = sum(record["seconds"] for record in records)
    return [*lines, f"{total:8.1f}s  in all (across workers)"]
