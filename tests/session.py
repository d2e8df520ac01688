"""What the test run's fixtures share about the session: the CI rule for an engine or tool that
is not there (a skip here, a failure under CI=true, so that CI cannot pass by skipping), and a way
to print progress lines (a build, an engine starting) to the terminal."""

from __future__ import annotations

import os
from collections.abc import Callable
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
