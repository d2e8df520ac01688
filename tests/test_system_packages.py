"""The test run's own handling of the Debian packages tests drive (tests/system_packages.py):
installed where it can, else the tests that need them skip with one line naming the install,
except under CI=true, where they fail."""

from __future__ import annotations

import textwrap

import pytest

from pipeline import PROJECT_ROOT
from tests import system_packages

pytest_plugins = ["pytester"]

# A package whose program no machine has, and one whose program every machine has.
CONFTEST = textwrap.dedent(
    """
    from unittest import mock

    from tests import system_packages
    from tests.conftest import pytest_collection_finish, pytest_runtest_setup  # noqa: F401

    FAKE = {
        "absent": system_packages.SystemPackage(
            "tfx-scaleout-absent", ("tfx-scaleout-no-such-program",), "stands for a missing one"
        ),
        "present": system_packages.SystemPackage("coreutils", ("ls",), "lists files"),
    }
    mock.patch.dict(system_packages.PACKAGES, FAKE).start()
    mock.patch.object(system_packages, "_installer", return_value=None).start()
    """
)
TESTS = textwrap.dedent(
    """
    import pytest

    @pytest.mark.system_packages("absent")
    def test_needs_absent():
        raise AssertionError("must not run")

    @pytest.mark.system_packages("present")
    def test_needs_present():
        pass

    def test_needs_nothing():
        pass
    """
)


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.syspath_prepend(PROJECT_ROOT)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=TESTS)
    return pytester


def test_missing_package_skips_with_the_install_line(suite, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    result = suite.runpytest_inprocess("-ra", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED * needs Debian's absent (absent stands for a missing one): "
            "sudo apt-get install tfx-scaleout-absent"
        ]
    )


def test_missing_package_fails_under_ci(suite, monkeypatch):
    monkeypatch.setenv("CI", "true")
    result = suite.runpytest_inprocess("-ra", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)  # failed in setup: an error, exit code 1
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*CI=true and needs Debian's absent*"])


def test_unknown_marker_name_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.syspath_prepend(PROJECT_ROOT)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.system_packages("no-such-name")
        def test_x():
            pass
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown system_packages marker names: ['no-such-name']" in result.stderr.str()


def test_sbin_programs_are_found_off_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(system_packages, "_SBIN", ())
    assert system_packages.which("ls") is None
    # Debian installs daemons in sbin; a user's PATH often lacks it.
    monkeypatch.setattr(system_packages, "_SBIN", (str(tmp_path),))
    daemon = tmp_path / "some-daemon"
    daemon.write_text("#!/bin/sh\n")
    daemon.chmod(0o755)
    assert system_packages.which("some-daemon") == str(daemon)
    assert system_packages.missing(["chromium"]) == ["chromium"]
