"""Shared fixtures. Importing `pipeline` first selects Keras 2 before TensorFlow loads."""

from __future__ import annotations

import os

import pytest

import pipeline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before any TensorFlow import)
from pipeline import datasets
from tests import prewarm, system_packages, workers
from tests import session as test_session

_MISSING = pytest.StashKey[list]()
_PREWARM_SAID = pytest.StashKey[bool]()


def _needed(item: pytest.Item) -> set[str]:
    return {name for mark in item.iter_markers("system_packages") for name in mark.args}


def _fixtures(item: pytest.Item) -> list[str]:
    """The fixtures the item uses that this suite defines. A parametrized argument is no
    fixture even where it has a fixture's name: test_bad_input.py's `image` (an image reference)
    made every run that selected it, `-m "not slow"` too, build the project's image."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    root = item.config.rootpath.resolve()
    return [
        name
        for name in item.fixturenames
        if (definitions := info.name2fixturedefs.get(name))
        and workers.ours(definitions[-1].func, root)
    ]


def pytest_configure(config: pytest.Config) -> None:
    test_session.start_phase_log(config)
    if not hasattr(config, "workerinput"):
        prewarm.open_claim()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Whatever ended the session: no early build keeps running (tests/prewarm.py)."""
    if not hasattr(config, "workerinput"):
        prewarm.stop()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The session's builds and shared fixtures (tests/session.py), after pytest's slowest
    test phases; in the controller only (an xdist worker runs this hook too, into no terminal,
    and would take the records first)."""
    if hasattr(config, "workerinput"):
        return
    for line in prewarm.stop():
        terminalreporter.write_line(f"tests: an early build failed (its fixture retried): {line}")
    lines = test_session.phase_lines()
    if lines:
        terminalreporter.section("builds and shared fixtures (wall time)")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """The controller prints once what the first worker started in the background."""
    config = node.config
    if not config.stash.get(_PREWARM_SAID, False):
        line = prewarm.started_line()
        if line:
            config.stash[_PREWARM_SAID] = True
            test_session.say(config)(line)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every process that collects checks the xdist units against what the tests use."""
    workers.check(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadscope` with this suite's units (tests/workers.py)."""
    if config.getvalue("dist") == "loadscope":
        return workers.FileGroupScheduling(config, log)
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Installs the Debian packages the selected tests drive, where this process can."""
    needed = set().union(*(_needed(item) for item in session.items)) if session.items else set()
    unknown = needed - set(system_packages.PACKAGES)
    if unknown:
        raise pytest.UsageError(f"unknown system_packages marker names: {sorted(unknown)}")
    say = test_session.say(session.config)
    session.config.stash[_MISSING] = system_packages.ensure(needed, say)
    if not session.config.option.collectonly:
        uses = [(item.nodeid.split("::")[0], _fixtures(item)) for item in session.items]
        prewarm.start(prewarm.needed(uses), say)


def pytest_runtest_setup(item: pytest.Item) -> None:
    absent = sorted(_needed(item) & set(item.config.stash.get(_MISSING, [])))
    if not absent:
        return
    uses = "; ".join(f"{n} {system_packages.PACKAGES[n].used_for}" for n in absent)
    line = f"needs Debian's {', '.join(absent)} ({uses}): {system_packages.install_hint(absent)}"
    test_session.unavailable(line)


@pytest.fixture(scope="session")
def penguin_runs(tmp_path_factory):
    """The README's first command, twice, as the page shows it (in a sandbox: ./tfx_output), on
    the DirectRunner: one pair of runs per session, shared by tests/test_e2e_local.py and the
    DirectRunner reference of the Flink run (tests/pipeline/beam/test_flink.py)."""
    from tests.docs import pages

    penguins = pages.command("README.md", ".venv/bin/python pipeline/run_local.py")
    sandbox = pages.Sandbox(tmp_path_factory.mktemp("penguins"))
    with test_session.phase("penguin_runs: the README's run, twice"):
        first = sandbox.run(penguins)
        assert first.returncode == 0, pages.explain(first)
        second = sandbox.run(penguins)
        assert second.returncode == 0, pages.explain(second)
    base = sandbox.output_root / "penguins-pipeline"
    return {
        "first": first,
        "second": second,
        "metadata": str(base / "metadata.sqlite"),
        "serving": str(base / "serving_model"),
    }


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory):
    """images.md's digits command, as the page shows it, in a sandbox, on the DirectRunner: one
    run per session, shared by tests/test_e2e_images.py and the DirectRunner reference of the
    digits run on Flink (tests/pipeline/beam/test_flink_digits.py)."""
    from tests.docs import pages

    sandbox = pages.Sandbox(tmp_path_factory.mktemp("digits"))
    with test_session.phase("digits_run: images.md's digits run"):
        result = sandbox.run(pages.command("docs/images.md", "--dataset digits"))
    assert result.returncode == 0, pages.explain(result)
    output_root = sandbox.output_root
    base = output_root / "digits-pipeline"
    return {
        "sandbox": sandbox,
        "result": result,
        "data_root": str(output_root / "data" / "digits"),
        "metadata": str(base / "metadata.sqlite"),
        "serving": str(base / "serving_model"),
    }


@pytest.fixture(scope="session")
def penguins_csv() -> str:
    return os.path.join(datasets.penguins_data_root(), "penguins.csv")


@pytest.fixture(scope="session")
def penguins_schema_path() -> str:
    path = datasets.curated_schema_path(datasets.PENGUINS)
    assert path is not None, "schemas/penguins/schema.pbtxt is missing"
    return path


@pytest.fixture
def write_csv(tmp_path):
    """write_csv(name, text) -> path of a CSV file in a fresh data directory."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()

    def _write(name: str, text: str | bytes) -> str:
        path = data_dir / name
        if isinstance(text, str):
            path.write_text(text)
        else:
            path.write_bytes(text)
        return str(path)

    _write.dir = str(data_dir)
    return _write
