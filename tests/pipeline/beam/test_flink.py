"""The pipeline's Beam components on a real Flink cluster (tests/pipeline/beam/conftest.py: a
JobManager and a TaskManager on 127.0.0.1, 2 slots, one Beam Flink job server for the session
that every Beam job goes through, SDK workers from this project's worker pool), as docs/beam.md
shows the run.

One penguins run serves every assertion: its first attempt loses the TaskManager (SIGKILL) while
Transform's Flink job runs and fails naming Transform and Flink's reason; after a TaskManager is
back, the rerun reuses what finished and completes. Its outputs are compared with the
DirectRunner's run of the same data (the session's `penguin_runs`), and every Beam component is
found in Flink's REST API as a FINISHED job of its own."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from unittest import mock

import pytest

from pipeline.beam import engine_fetch, engines
from tests.docs import pages
from tests.pipeline.beam import against_direct, processes
from tests.pipeline.beam.flink_page import PAGE_CACHE, replacements

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.system_packages("openjdk-17-jre-headless", "maven"),
]

PAGE = "docs/beam.md"
BEAM_COMPONENTS = ("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator")
EXIT_PIPELINE_FAILED = 1
EXIT_BAD_INPUT = 2


def _wait_for_running_job(flink, after_ms: int, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [
            j
            for j in flink.cluster.jobs()
            if j["state"] == "RUNNING" and j["start-time"] > after_ms
        ]
        if running:
            return running[0]
        time.sleep(0.5)
    pytest.fail("no Flink job started for Transform")


def _start(sandbox, script: str, stderr_path) -> subprocess.Popen:
    """The page's command in its own process group (with what it starts), stopped with it
    (_stop) whatever happens to the test."""
    with open(stderr_path, "w") as stderr:
        return subprocess.Popen(
            ["bash", "-c", script],
            cwd=sandbox.root,
            env=sandbox.env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )


def _stop(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@pytest.fixture(scope="module")
def flink_run(flink, tmp_path_factory):
    """The page's Flink run in a sandbox: the first attempt with the TaskManager killed during
    Transform, then (a TaskManager started again) the same command once more."""
    command = pages.command(
        PAGE,
        "run_local.py --beam_runner flink --beam_job_endpoint localhost:8099 "
        "--beam_environment_type EXTERNAL",
    )
    sandbox = pages.Sandbox(tmp_path_factory.mktemp("flink-run"))
    replace = {old: new for old, new in replacements(flink).items() if old in command.text}
    script = sandbox.script(command, replace=replace)
    started_ms = int(time.time() * 1000)
    started = time.monotonic()
    first = _start(sandbox, script, sandbox.root / "first.stderr")
    second = None
    try:
        # Transform starts after StatisticsGen; its Flink job is the first to start after that.
        lines = []
        for line in first.stdout:
            lines.append(line)
            if "Transform started" in line:
                break
        else:
            pytest.fail("the run ended before Transform:\n" + "".join(lines))
        transform_started_ms = int(time.time() * 1000)
        job = _wait_for_running_job(flink, transform_started_ms - 1000)
        time.sleep(3)  # into the job's work, not its submission
        killed_at = time.monotonic()
        flink.cluster.kill_taskmanager()
        stdout, _ = first.communicate(timeout=900)
        failed_after_s = time.monotonic() - killed_at
        first_s = time.monotonic() - started
        flink.cluster.start_taskmanager()
        started = time.monotonic()
        second = _start(sandbox, script, sandbox.root / "second.stderr")
        second_stdout, _ = second.communicate(timeout=1800)
        second_s = time.monotonic() - started
        ended_ms = int(time.time() * 1000)
    finally:
        for process in (first, second):
            if process is not None:
                _stop(process)
    base = sandbox.output_root / "penguins-pipeline"
    print(
        f"flink penguins: fetch {flink.fetch_s:.0f} s, cluster start {flink.start_s:.0f} s, "
        f"first attempt {first_s:.0f} s (failed {failed_after_s:.1f} s after the kill), "
        f"rerun {second_s:.0f} s"
    )
    return {
        "first": subprocess.CompletedProcess(
            first.args,
            first.returncode,
            "".join(lines) + stdout,
            (sandbox.root / "first.stderr").read_text(),
        ),
        "second": subprocess.CompletedProcess(
            second.args,
            second.returncode,
            second_stdout,
            (sandbox.root / "second.stderr").read_text(),
        ),
        "killed_job": job,
        "failed_after_s": failed_after_s,
        # The jobs of this module's runs (the session's cluster runs other modules' too).
        "window_ms": (started_ms, ended_ms),
        "metadata": str(base / "metadata.sqlite"),
        "sandbox": sandbox,
        "script": script,
    }


def test_taskmanager_killed_during_transform_fails_the_run_naming_transform(flink_run):
    first = flink_run["first"]
    assert first.returncode == EXIT_PIPELINE_FAILED, first.stdout + first.stderr
    errors = [line for line in first.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, first.stderr
    assert errors[0].startswith("error: Transform failed:"), errors[0]
    # Flink's reason: the TaskManager's loss, as the JobManager saw it.
    assert re.search(r"TaskManager|heartbeat|lost|disconnect", errors[0], re.I), errors[0]
    assert "(4/9) ExampleValidator executed" in first.stdout
    assert flink_run["failed_after_s"] < 120


def test_rerun_reuses_what_finished_and_completes(flink_run):
    second = flink_run["second"]
    assert second.returncode == 0, second.stdout + second.stderr[-3000:]
    stdout = second.stdout
    for name in ("CsvExampleGen", "ImportSchemaGen", "StatisticsGen", "ExampleValidator"):
        assert re.search(rf"\(\d/9\) {name} cached in", stdout), stdout
    assert "5 component(s) executed, 4 reused" in stdout, stdout
    assert "blessed:       yes" in stdout
    # Nothing partial of the failed Transform is read: its execution is FAILED in MLMD, the
    # rerun's Transform is a new execution whose outputs are the ones Trainer read.
    db = against_direct.store(flink_run["metadata"])
    transforms = [e for e in db.store.get_executions() if db.node_of(e) == "Transform"]
    states = sorted(e.last_known_state for e in transforms)
    from ml_metadata.proto import metadata_store_pb2 as mlmd_pb2

    assert states == sorted([mlmd_pb2.Execution.FAILED, mlmd_pb2.Execution.COMPLETE]), states


def test_every_beam_component_ran_as_a_finished_flink_job(flink, flink_run):
    """Flink's REST API: one FINISHED job inside each Beam component's execution, and the
    killed Transform attempt's job FAILED."""
    first_ms, last_ms = flink_run["window_ms"]
    jobs = [j for j in flink.cluster.jobs() if first_ms <= j["start-time"] <= last_ms]
    windows = against_direct.execution_windows(flink_run["metadata"], BEAM_COMPONENTS)
    finished = {}
    for name, executions in windows.items():
        for _, (start, end) in executions:
            inside = [j for j in jobs if start <= j["start-time"] and j["end-time"] <= end + 1000]
            finished.setdefault(name, []).extend(j for j in inside if j["state"] == "FINISHED")
    assert {n: len(j) for n, j in finished.items()} == {n: 1 for n in BEAM_COMPONENTS}, jobs
    killed = [j for j in jobs if j["jid"] == flink_run["killed_job"]["jid"]]
    assert [j["state"] for j in killed] == ["FAILED"]
    assert len(jobs) == len(BEAM_COMPONENTS) + 1, jobs


def test_same_splits_and_transformed_records_as_the_direct_runner(flink_run, penguin_runs):
    against_direct.assert_same_splits_and_records(flink_run["metadata"], penguin_runs["metadata"])
    assert "examples:      train 253, eval 91; rows rejected: 0" in flink_run["second"].stdout


def test_same_statistics_as_the_direct_runner(flink_run, penguin_runs):
    assert not against_direct.different_statistics(flink_run["metadata"], penguin_runs["metadata"])


def test_model_quality_as_on_the_direct_runner(flink_run, penguin_runs):
    on_cluster = against_direct.same_model_quality(
        "Flink", flink_run["metadata"], penguin_runs["metadata"]
    )
    assert on_cluster["example_count"] == 91


def test_infer_data_runs_the_rows_example_gen_and_bulk_inferrer_as_flink_jobs(
    flink, flink_run, penguins_csv, tmp_path
):
    """The page's command again with --infer_data: every other component reused from the cache;
    the rows' ExampleGen and the BulkInferrer (TFX's inference, then the predictions CSV) run as
    Flink jobs, and predict what pipeline.predict predicts with the pushed model."""
    import csv

    from pipeline import predict

    with open(penguins_csv, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if "NA" not in r.values()][:10]
    columns = [name for name in rows[0] if name != "species"]
    (tmp_path / "rows").mkdir()
    path = tmp_path / "rows" / "rows.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows([row[name] for name in columns] for row in rows)
    sandbox = flink_run["sandbox"]
    script = flink_run["script"].rstrip("\n") + f" --infer_data {tmp_path / 'rows'}\n"
    started_ms = int(time.time() * 1000)
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=sandbox.root,
        env=sandbox.env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "2 component(s) executed, 9 reused" in result.stdout, result.stdout
    assert "(10 row(s) read = 10 predicted + 0 rejected)" in result.stdout, result.stdout
    jobs = [j for j in flink.cluster.jobs() if j["start-time"] >= started_ms]
    assert sorted(j["state"] for j in jobs) == ["FINISHED"] * 3, jobs
    predictions = result.stdout.split("  predictions:   ")[1].split(" (")[0]
    with open(predictions, newline="") as handle:
        by_input = {tuple(r[: len(columns)]): r[len(columns)] for r in csv.reader(handle)}
    model = predict.resolve_model_dir(
        str(sandbox.output_root / "penguins-pipeline" / "serving_model")
    )
    for line, text, _ in predict.predict_csv(model, str(path)):
        cells = rows[line - 2]
        key = tuple(str(float(cells[n])) if n.startswith("bill_") else cells[n] for n in columns)
        assert by_input[key] == text.split("=", 1)[1].split("\t")[0]


# --- faults that must stop a run within seconds, before any component -------------------------


def _run_local(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, os.path.join(pages.PROJECT_ROOT, "pipeline", "run_local.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=pages.PROJECT_ROOT,
        check=False,
    )
    return result, time.monotonic() - started


def _flags(flink, **changes: str) -> list[str]:
    """run_local's flags of the page's --flink_master command (Beam starts the job server from
    the jar for each Beam job) for the session's cluster, some of their values changed."""
    words = pages.command(PAGE, "--beam_runner flink --flink_master 127.0.0.1:8081").words()
    replace = replacements(flink)
    flags = [
        replace.get(word, word.replace(PAGE_CACHE, engine_fetch.cache_root()))
        for word in words[words.index("pipeline/run_local.py") + 1 :]
    ]
    for name, value in changes.items():
        flags[flags.index(f"--{name}") + 1] = value
    return flags


def _one_error(result) -> str:
    assert result.returncode == EXIT_BAD_INPUT, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert "started" not in result.stdout  # no component ran
    return errors[0]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"flink_master": "127.0.0.1:{free}"},
            r"error: cluster unreachable: beam.flink_master 127.0.0.1:\d+ \(--flink_master\): "
            r"no Flink REST API answers there within 5 s \(.*refused.*\)",
        ),
        (
            {"beam_job_server_jar": "{tmp}/no-such-job-server.jar"},
            r"error: invalid configuration: beam.job_server_jar '.*no-such-job-server.jar' "
            r"\(--beam_job_server_jar\) is not a file",
        ),
        (
            {"flink_version": "1.18"},
            r"error: wrong Flink version: the cluster at 127.0.0.1:\d+ runs Flink 1.16.3, the "
            r"job server is for Flink 1.18 \(--flink_version\)",
        ),
    ],
    ids=["unreachable_master", "missing_job_server_jar", "wrong_flink_version"],
)
def test_a_bad_cluster_setting_is_one_error_within_seconds(flink, tmp_path, change, expected):
    values = {"free": str(engines.free_port()), "tmp": str(tmp_path)}
    changes = {k: v.format(**values) for k, v in change.items()}
    result, seconds = _run_local("--output_root", str(tmp_path / "out"), *_flags(flink, **changes))
    assert re.fullmatch(expected + ".*", _one_error(result)), result.stderr
    assert seconds < 60, seconds
    assert not os.path.exists(tmp_path / "out" / "penguins-pipeline" / "metadata.sqlite")


def test_the_pages_cluster_command_starts_a_cluster_and_stops_it(tmp_path):
    """beam.md's `python -m pipeline.beam.engines flink &` (other ports than the page's, the
    session's engine cache): 2 free slots, a job server, then SIGTERM stops the JVMs and the
    worker pool."""
    rest, pool, job = engines.free_port(), engines.free_port(), engines.free_port()
    sandbox = pages.Sandbox(tmp_path / "sandbox")
    log_path = tmp_path / "cluster.log"
    command = pages.command(PAGE, "python -m pipeline.beam.engines flink &")
    with (
        mock.patch.dict(os.environ, {"TFX_SCALEOUT_ENGINES": engine_fetch.cache_root()}),
        open(log_path, "w") as log,
    ):
        replace = {
            "engines flink": f"engines flink --rest_port {rest} --pool_port {pool} --job_port {job}"
        }
        process = sandbox.start(command, log, replace=replace)
    try:
        deadline = time.monotonic() + 180
        while "run: " not in log_path.read_text():
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        overview = engines.rest_get(f"127.0.0.1:{rest}", "/overview")
        assert (overview["taskmanagers"], overview["slots-available"]) == (1, 2), overview
        assert overview["flink-version"] == engine_fetch.FLINK_VERSION
        assert f"--beam_job_endpoint localhost:{job}" in log_path.read_text()
        children = processes.descendants(process.pid)
        assert len(children) >= 4, children  # JobManager, TaskManager, job server, worker pool
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    deadline = time.monotonic() + 30
    while [p for p in children if os.path.exists(f"/proc/{p}")] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p for p in children if os.path.exists(f"/proc/{p}")], log_path.read_text()
