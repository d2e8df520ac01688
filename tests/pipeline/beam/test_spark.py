"""The pipeline's Beam components on a real Spark cluster, as docs/beam.md shows it: the page's
`python -m pipeline.beam.engines spark &` (a standalone master and worker from pyspark's jars,
separate JVMs, 2 cores; Beam's Spark job server in front of them; this project's SDK worker
pool), then the page's penguins run through it, once. Its outputs are compared with the
DirectRunner's run of the same data (the session's `penguin_runs`), every Beam component is
one FINISHED Spark application on the master, and SIGTERM to the page's command leaves no
process behind."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from unittest import mock

import pytest

from pipeline.beam import engine_fetch, engines
from tests import session
from tests.docs import pages
from tests.pipeline.beam import against_direct, processes

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.system_packages("openjdk-17-jre-headless", "maven"),
]

PAGE = "docs/beam.md"
CLUSTER_COMMAND = "python -m pipeline.beam.engines spark &"
RUN_COMMAND = (
    "--beam_runner spark --beam_job_endpoint localhost:8099 --beam_environment_type EXTERNAL"
)
# What the page's run names, replaced by this module's job server and pool.
PAGE_JOB_SERVER = "localhost:8099"
PAGE_POOL = "localhost:50000"
BEAM_COMPONENTS = ("CsvExampleGen", "StatisticsGen", "Transform", "Evaluator")


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """The page's cluster command on free ports, the session's engine cache; yields once its
    run flags are printed; SIGKILL to its process group at the end whatever happened."""
    ports = {name: engines.free_port() for name in ("master", "webui", "job", "pool")}
    sandbox = pages.Sandbox(tmp_path_factory.mktemp("spark-cluster"))
    log_path = sandbox.root / "cluster.log"
    replace = {
        "engines spark": f"engines spark --master_port {ports['master']} --webui_port "
        f"{ports['webui']} --job_port {ports['job']} --pool_port {ports['pool']}"
    }
    started = time.monotonic()
    with (
        mock.patch.dict(os.environ, {"TFX_SCALEOUT_ENGINES": engine_fetch.cache_root()}),
        open(log_path, "w") as log,
    ):
        process = sandbox.start(pages.command(PAGE, CLUSTER_COMMAND), log, replace=replace)
    children: list[int] = []
    try:
        with session.phase("spark: the page's cluster up (Spark fetched when not cached)"):
            deadline = time.monotonic() + 600  # a first fetch included
            while "run: " not in log_path.read_text():
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.5)
        children = processes.descendants(process.pid)
        yield {
            "process": process,
            "ports": ports,
            "log": log_path,
            "start_s": time.monotonic() - started,
            "children": children,
        }
    finally:
        # SIGTERM first: the command stops its JVMs and pool (each in a process group of its
        # own, out of reach of a signal to the command's group); SIGKILL to what is left.
        children = children or processes.descendants(process.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in children:
            with contextlib.suppress(OSError):  # gone already
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    ours = str(sandbox.root).encode() in handle.read()  # not a reused id
                if ours:
                    os.kill(pid, signal.SIGKILL)


def _overview(spark_cluster) -> dict:
    return engines.rest_get(f"127.0.0.1:{spark_cluster['ports']['webui']}", "/json/")


@pytest.fixture(scope="module")
def spark_run(spark_cluster, tmp_path_factory):
    command = pages.command(PAGE, RUN_COMMAND)
    sandbox = pages.Sandbox(tmp_path_factory.mktemp("spark-run"))
    replace = {
        PAGE_JOB_SERVER: f"localhost:{spark_cluster['ports']['job']}",
        PAGE_POOL: f"localhost:{spark_cluster['ports']['pool']}",
    }
    started = time.monotonic()
    result = subprocess.run(
        ["bash", "-c", sandbox.script(command, replace=replace)],
        cwd=sandbox.root,
        env=sandbox.env(),
        capture_output=True,
        text=True,
        timeout=2400,
        start_new_session=True,
        check=False,
    )
    print(
        f"spark penguins: cluster start {spark_cluster['start_s']:.0f} s, "
        f"run {time.monotonic() - started:.0f} s"
    )
    assert result.returncode == 0, (
        pages.explain(result) + "\ncluster:\n" + spark_cluster["log"].read_text()[-3000:]
    )
    return {
        "result": result,
        "metadata": str(sandbox.output_root / "penguins-pipeline" / "metadata.sqlite"),
    }


def test_the_pages_cluster_command_offers_a_worker_and_a_job_server(spark_cluster):
    overview = _overview(spark_cluster)
    assert (overview["status"], overview["aliveworkers"], overview["cores"]) == ("ALIVE", 1, 2)
    assert overview["url"] == f"spark://127.0.0.1:{spark_cluster['ports']['master']}"
    log = spark_cluster["log"].read_text()
    assert f"Spark {engine_fetch.SPARK_VERSION} at spark://127.0.0.1:" in log
    assert f"--beam_job_endpoint localhost:{spark_cluster['ports']['job']}" in log
    # master, worker, job server and worker pool
    assert len(spark_cluster["children"]) >= 4, spark_cluster["children"]


def test_penguins_on_spark_run_end_to_end(spark_run):
    stdout = spark_run["result"].stdout
    assert "Beam spark runner at localhost:" in stdout
    assert "9 component(s) executed" in stdout, stdout
    assert "examples:      train 253, eval 91; rows rejected: 0" in stdout
    assert "blessed:       yes" in stdout


def test_every_beam_component_ran_as_a_finished_spark_application(spark_cluster, spark_run):
    """The master's applications: one FINISHED Spark application (a Beam job, one
    SparkContext in the job server) inside each Beam component's execution, and no other."""
    overview = _overview(spark_cluster)
    applications = overview["completedapps"] + overview["activeapps"]
    windows = against_direct.execution_windows(spark_run["metadata"], BEAM_COMPONENTS)
    inside = {}
    for name, executions in windows.items():
        for _, (start, end) in executions:
            inside[name] = [
                a["state"]
                for a in applications
                if start <= a["starttime"] and a["starttime"] + a["duration"] <= end + 1000
            ]
    assert inside == {name: ["FINISHED"] for name in BEAM_COMPONENTS}, applications
    assert len(applications) == len(BEAM_COMPONENTS), applications
    assert all(re.match(r"BeamApp-", a["name"]) for a in applications), applications


def test_same_splits_and_transformed_records_as_the_direct_runner(spark_run, penguin_runs):
    against_direct.assert_same_splits_and_records(spark_run["metadata"], penguin_runs["metadata"])


def test_same_statistics_as_the_direct_runner(spark_run, penguin_runs):
    assert not against_direct.different_statistics(spark_run["metadata"], penguin_runs["metadata"])


def test_model_quality_as_on_the_direct_runner(spark_run, penguin_runs):
    on_cluster = against_direct.same_model_quality(
        "Spark", spark_run["metadata"], penguin_runs["metadata"]
    )
    assert on_cluster["example_count"] == 91


def test_sigterm_to_the_pages_cluster_command_stops_every_process(spark_cluster):
    """Last in the module: the cluster command's SIGTERM stops the JVMs and the pool."""
    process, children = spark_cluster["process"], spark_cluster["children"]
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=90)
    deadline = time.monotonic() + 30
    while [p for p in children if os.path.exists(f"/proc/{p}")] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p for p in children if os.path.exists(f"/proc/{p}")]
