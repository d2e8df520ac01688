"""What docs/beam.md's Flink commands name (its master, job server, worker pool and engine
cache), replaced by the session's cluster (tests/pipeline/beam/conftest.py), and what a failed
run on it shows; shared by test_flink.py and test_flink_digits.py."""

from __future__ import annotations

from pipeline.beam import engine_fetch

PAGE_MASTER = "127.0.0.1:8081"
PAGE_JOB_SERVER = "localhost:8099"
PAGE_POOL = "localhost:50000"
PAGE_CACHE = "~/.cache/tfx-scaleout/engines"


def replacements(flink) -> dict[str, str]:
    return {
        PAGE_MASTER: flink.cluster.master,
        PAGE_JOB_SERVER: flink.job_server.endpoint,
        PAGE_POOL: flink.pool.endpoint,
        PAGE_CACHE: engine_fetch.cache_root(),
    }


def explain(result, flink) -> str:
    return (
        f"exit {result.returncode}\nstdout:\n{result.stdout[-4000:]}\nstderr:\n"
        f"{result.stderr[-3000:]}\nworker pool log:\n{flink.pool.log()[-3000:]}\n"
        f"job server log:\n{flink.job_server.log()[-3000:]}\n"
        f"Flink logs: {flink.cluster.log_dir}"
    )
