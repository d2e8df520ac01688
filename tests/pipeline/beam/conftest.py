"""A Flink cluster for the session: the engine obtained once (PyPI, Maven Central; cached under
~/.cache/tfx-scaleout/engines between sessions), a JobManager and a TaskManager on 127.0.0.1
(2 slots), and this project's SDK worker pool; all stopped at the end, also when a test fails."""

from __future__ import annotations

import dataclasses
import time

import pytest

from pipeline.beam import engines


@dataclasses.dataclass
class FlinkSession:
    cluster: engines.FlinkCluster
    pool: engines.WorkerPool
    jar: str
    fetch_s: float
    start_s: float


@pytest.fixture(scope="session")
def flink(tmp_path_factory):
    started = time.monotonic()
    try:
        home, jar = engines.fetch()
    except engines.EngineError as error:
        pytest.fail(f"could not obtain Flink: {error}", pytrace=False)
    fetched = time.monotonic()
    work = tmp_path_factory.mktemp("flink")
    cluster = engines.FlinkCluster(home, str(work / "cluster"), engines.job_server_classpath(jar))
    pool = engines.WorkerPool(str(work / "worker-pool"))
    try:
        cluster.start()
        pool.start()
        yield FlinkSession(cluster, pool, jar, fetched - started, time.monotonic() - fetched)
    finally:
        pool.stop()
        cluster.stop()
