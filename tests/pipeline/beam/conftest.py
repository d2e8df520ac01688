"""A Flink cluster for the session: the engine obtained once (PyPI, Maven Central; cached under
~/.cache/tfx-scaleout/engines between sessions), a JobManager and a TaskManager on 127.0.0.1
(2 slots), one Beam job server that every Beam job of the session goes through (Beam's
FlinkRunner would start a job-server JVM per Beam job, 7-18 s each here), and this project's SDK
worker pool; all stopped at the end, also when a test fails. (test_spark.py starts its Spark
cluster with the page's command, in the module.)"""

from __future__ import annotations

import dataclasses
import time

import pytest

from pipeline.beam import engine_fetch, engines
from tests import session


@dataclasses.dataclass
class FlinkSession:
    cluster: engines.FlinkCluster
    job_server: engines.JobServer
    pool: engines.WorkerPool
    jar: str
    fetch_s: float
    start_s: float


@pytest.fixture(scope="session")
def flink(tmp_path_factory):
    started = time.monotonic()
    try:
        with session.phase("flink: Flink and its job server fetched (when not cached)"):
            home, jar = engine_fetch.fetch()
    except engine_fetch.EngineError as error:
        pytest.fail(f"could not obtain Flink: {error}", pytrace=False)
    fetched = time.monotonic()
    work = tmp_path_factory.mktemp("flink")
    cluster = engines.FlinkCluster(
        home, str(work / "cluster"), engine_fetch.job_server_classpath(jar)
    )
    job_server = engines.JobServer(
        jar, str(work / "job-server"), ("--flink-master", cluster.master)
    )
    pool = engines.WorkerPool(str(work / "worker-pool"))
    try:
        with session.phase("flink: cluster, job server and worker pool started"):
            cluster.start()
            job_server.start()
            pool.start()
        yield FlinkSession(
            cluster, job_server, pool, jar, fetched - started, time.monotonic() - fetched
        )
    finally:
        pool.stop()
        job_server.stop()
        cluster.stop()
