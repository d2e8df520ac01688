"""The split of the suite between xdist workers (tests/workers.py), run on a small suite of its
own with two real workers: the files of a group run on one worker, other files on both; a shared
fixture outside a group, or an unplaced session fixture, stops the collection."""

from __future__ import annotations

import re
import textwrap

import pytest

from pipeline import PROJECT_ROOT

pytest_plugins = ["pytester"]

CONFTEST = textwrap.dedent(
    """
    import pytest

    from tests import workers
    from tests.conftest import (  # noqa: F401
        pytest_collection_modifyitems,
        pytest_xdist_make_scheduler,
    )

    workers.GROUPS.clear()
    workers.GROUPS.update(GROUPS)

    def pytest_configure(config):
        config.addinivalue_line("markers", "system_packages(*names): test only")

    @pytest.fixture(scope="session")
    def penguin_runs():
        return "shared"

    @pytest.fixture(scope="session")
    def penguins_csv():
        return "cheap"
    """
)
GROUPED = {"shared": ("test_shared_a.py", "test_shared_b.py"), "podman": ("test_podman_a.py",)}
SHARED = "def test_{name}_{i}(penguin_runs):\n    assert penguin_runs == 'shared'\n"
PODMAN = (
    "import pytest\n\n@pytest.mark.system_packages('podman')\ndef test_{name}_{i}():\n    pass\n"
)
FREE = "def test_{name}_{i}(penguins_csv):\n    assert penguins_csv == 'cheap'\n"
# A module's own fixture of the shared name overrides the session one: not shared, not grouped.
OVERRIDE = (
    "import pytest\n\n@pytest.fixture(scope='module')\ndef penguin_runs():\n    return 'own'\n\n"
    "def test_{name}_{i}(penguin_runs):\n    assert penguin_runs == 'own'\n"
)


def _suite(pytester, groups, extra_conftest: str = "") -> pytest.Pytester:
    pytester.makeconftest(f"GROUPS = {groups!r}\n" + CONFTEST + extra_conftest)
    files = {"shared_a": SHARED, "shared_b": SHARED, "podman_a": PODMAN, "own": OVERRIDE}
    files.update({f"free_{k}": FREE for k in "abcdef"})
    for name, body in files.items():
        pytester.makepyfile(
            **{f"test_{name}": "\n\n".join(body.format(name=name, i=i) for i in range(3))}
        )
    return pytester


@pytest.fixture
def project(monkeypatch):
    monkeypatch.syspath_prepend(PROJECT_ROOT)
    monkeypatch.setenv("PYTHONPATH", PROJECT_ROOT)  # the xdist workers import tests.workers


def _workers(result) -> dict[str, set[str]]:
    """file -> the workers its tests ran on, from `-v` lines like
    `[gw1] [ 10%] PASSED test_shared_a.py::test_shared_a_0`."""
    seen: dict[str, set[str]] = {}
    for line in result.outlines:
        found = re.match(r"\[(gw\d+)\] .*PASSED (test_\w+)\.py::", line)
        if found:
            seen.setdefault(found.group(2), set()).add(found.group(1))
    return seen


def test_a_group_runs_on_one_worker_first_and_the_rest_spreads(pytester, project):
    suite = _suite(pytester, GROUPED)
    result = suite.runpytest("-n", "2", "--dist", "loadscope", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=30)
    seen = _workers(result)
    assert len(seen) == 10, result.outlines
    assert all(len(workers) == 1 for workers in seen.values()), seen
    assert seen["test_shared_a"] == seen["test_shared_b"]
    assert len(set().union(*seen.values())) == 2, seen  # both workers had work
    ran = [line for line in result.outlines if " PASSED " in line]
    assert "test_free" not in ran[0] and "test_free" not in ran[1], ran  # groups start first


def test_files_sharing_a_fixture_outside_a_group_stop_the_collection(pytester, project):
    suite = _suite(pytester, {"podman": ("test_podman_a.py",)})
    result = suite.runpytest("-n", "0", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "['test_shared_a.py', 'test_shared_b.py'] share the session fixture 'penguin_runs' but "
        "would run on different xdist workers" in "\n".join(result.errlines)
    )


def test_an_unplaced_session_fixture_stops_the_collection(pytester, project):
    new = '\n@pytest.fixture(scope="session")\ndef new_engine():\n    return 1\n'
    suite = _suite(pytester, GROUPED, new)
    suite.makepyfile(test_new="def test_new(new_engine):\n    pass\n")
    result = suite.runpytest("-n", "0", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "session fixtures ['new_engine'] are in neither SHARED_FIXTURES" in "\n".join(
        result.errlines
    )
