"""tests/prewarm.py: the session's cold builds, chosen from what the selected tests use, started
once in the background, recorded as phases, and stopped with the session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from pipeline import PROJECT_ROOT
from tests import prewarm, session


def test_the_builds_are_chosen_from_the_selected_tests_fixtures_and_files():
    uses = [
        ("tests/kubeflow/test_local_cluster.py", ["local_cluster", "image", "tmp_path"]),
        ("tests/pipeline/beam/test_flink.py", ["flink"]),
        ("tests/kubeflow/test_kfp_local.py", ["image", "tmp_path"]),
        ("tests/test_house.py", ["tmp_path"]),
    ]
    assert prewarm.needed(uses) == ["kubernetes", "image", "flink", "kfp-local"]
    assert prewarm.needed([("tests/test_house.py", ["tmp_path"])]) == []
    # Every fixture named in the table is one the suite defines (a renamed fixture would
    # silently stop its build from starting early).
    users = set().union(*(entry[1] for entry in prewarm.BUILDS.values()))
    for user in users:
        if user.endswith(".py"):
            assert os.path.exists(os.path.join(PROJECT_ROOT, user)), user
        else:
            assert _defined_fixture(user), f"no fixture {user!r} in tests/"


# Collects the files given and prints the builds the session would start for them.
PROBE = """
import sys, pytest
from tests import conftest, prewarm
class Probe:
    def pytest_collection_finish(self, session):
        uses = [(i.nodeid.split("::")[0], conftest._fixtures(i)) for i in session.items]
        print("builds:", prewarm.needed(uses))
args = ["--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", *sys.argv[1:]]
sys.exit(pytest.main(args, plugins=[Probe()]))
"""


def test_a_parametrized_argument_named_like_a_fixture_starts_no_build():
    """test_bad_input.py's `image` is an image reference, not the `image` fixture: collecting
    it (as `-m "not slow"` does) starts no image build; test_image_build.py's fixture does."""

    def builds(*files: str) -> str:
        result = subprocess.run(
            [sys.executable, "-c", PROBE, *files],
            capture_output=True,
            text=True,
            cwd=PROJECT_ROOT,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        [line] = [line for line in result.stdout.splitlines() if line.startswith("builds:")]
        return line

    assert builds("tests/kubeflow/test_bad_input.py") == "builds: []"
    assert builds("tests/kubeflow/test_image_build.py") == "builds: ['image']"


def _defined_fixture(name: str) -> bool:
    for folder, _, files in os.walk(os.path.join(PROJECT_ROOT, "tests")):
        for file in files:
            if file.endswith(".py"):
                with open(os.path.join(folder, file), encoding="utf-8") as handle:
                    if f"def {name}(" in handle.read():
                        return True
    return False


def test_one_process_of_the_session_starts_them_and_the_end_of_the_session_stops_them(
    monkeypatch, tmp_path
):
    phases = tmp_path / "phases.jsonl"
    phases.touch()
    monkeypatch.setenv(session.PHASES_ENV, str(phases))
    monkeypatch.delenv(prewarm.CLAIM_ENV, raising=False)
    prewarm.open_claim()
    claim = os.environ[prewarm.CLAIM_ENV]
    lines: list[str] = []
    try:
        prewarm.start(["kfp-local"], lines.append)
        prewarm.start(["kfp-local"], lines.append)  # another worker: already claimed
        assert len(lines) == 1 and "kfp.local's own venv" in lines[0], lines
        assert prewarm.started_line() == lines[0]  # what an xdist controller prints
        with open(claim) as handle:
            pid = int(handle.readline())
        deadline = time.monotonic() + 900  # a machine without the venv builds it (pip)
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        records = [json.loads(line) for line in phases.read_text().splitlines()]
        assert [(r["what"], r["worker"]) for r in records] == [
            ("prewarm: kfp.local's own venv", "prewarm")
        ], records
        assert not records[0]["detail"], records  # not "failed"
        prewarm.mark_done("image")
        assert prewarm.done_this_session("image")
    finally:
        failures = prewarm.stop()
    assert failures == []
    assert not os.path.exists(claim) and prewarm.CLAIM_ENV not in os.environ
    assert not [p for p in os.listdir(os.path.dirname(claim)) if os.path.basename(claim)[:-4] in p]


def test_a_session_ended_early_kills_the_builds_still_running(monkeypatch, tmp_path):
    monkeypatch.delenv(prewarm.CLAIM_ENV, raising=False)
    monkeypatch.setenv(session.PHASES_ENV, str(tmp_path / "phases.jsonl"))
    prewarm.open_claim()
    claim = os.environ[prewarm.CLAIM_ENV]
    with open(claim, "w") as handle:  # as start() does, with a build that takes long
        process = subprocess.Popen(["sleep", "300"], start_new_session=True)
        handle.write(f"{process.pid}\n")
    prewarm.stop()
    assert process.wait(timeout=10) == -9


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split()[2] != "Z"
