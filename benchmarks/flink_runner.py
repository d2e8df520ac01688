"""ExampleGen + Transform on a Flink cluster beside the DirectRunner and the single-process
baseline.

    python -m benchmarks.flink_runner [--quick] [--work_dir DIR] [--rows 1000000]

The scale benchmark's pipeline (synthetic CSV -> ShardedCsvExampleGen -> ImportSchemaGen ->
ShardedTransform, benchmarks.scale.build_pipeline), each run in a fresh process:
- flink: the cluster of pipeline/beam/engines.py (a JobManager and a TaskManager on 127.0.0.1,
  2 slots, the project's worker pool), `--beam_parallelism 2`, Beam's Flink job server started
  from the cached jar by each Beam job; the project's wheel staged;
- the DirectRunner as `run_local.py --beam_mode auto` picks it for the input;
- benchmarks.scale_baseline, the hand-written single-process pyarrow + numpy script.
Peak memory: the measured process's tree (the job server JVM and, for the DirectRunner, its
workers are in it) and, sampled alongside, the JobManager's, the TaskManager's and the worker
pool's trees (the SDK harnesses). The fixed cost per Beam job: a one-element pipeline (Create,
Map, WriteToText) on the same cluster, its wall time (job server start included) and the Flink
job's own duration from the REST API.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading

from benchmarks import common, scale

QUICK_ROWS = 20_000
FULL_ROWS = 1_000_000
PARALLELISM = 2

_ONE_ELEMENT = (
    "import sys\n"
    "import apache_beam as beam\n"
    "from apache_beam.options.pipeline_options import PipelineOptions\n"
    "with beam.Pipeline(options=PipelineOptions(sys.argv[2:])) as p:\n"
    "    p | beam.Create([1]) | beam.Map(str) | beam.io.WriteToText(sys.argv[1])\n"
)


def _beam_config(master: str, pool: str, jar: str, wheel: str | None):
    from pipeline.beam import engine_fetch
    from pipeline.config import BeamConfig

    config = BeamConfig(
        runner="flink",
        flink_master=master,
        flink_version=engine_fetch.FLINK_MINOR,
        job_server_jar=jar,
        environment_type="EXTERNAL",
        environment_config=pool,
        parallelism=PARALLELISM,
        extra_packages=(wheel,) if wheel else (),
    )
    config.validate()
    return config


def pipeline_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("--data", "--root", "--master", "--pool", "--jar"):
        parser.add_argument(name, required=True)
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args(argv)
    from pipeline.beam import runners as beam_runners
    from pipeline.local import policy as local

    wheel = beam_runners.build_project_wheel()
    beam_args = _beam_config(args.master, args.pool, args.jar, wheel).pipeline_args()
    local.run_dag(scale.build_pipeline(args.data, args.root, beam_args, args.shards))
    results = scale.component_results(args.root)
    print(json.dumps(results))
    return 0


class TreeSampler:
    """Peak RSS of each named process tree, sampled in a thread."""

    def __init__(self, pids: dict[str, int], interval: float = 0.5):
        self.pids, self.peaks = pids, dict.fromkeys(pids, 0)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval,), daemon=True)

    def _sample(self, interval: float) -> None:
        while not self._done.is_set():
            for name, pid in self.pids.items():
                self.peaks[name] = max(self.peaks[name], common._tree_rss_bytes(pid))  # noqa: SLF001
            self._done.wait(interval)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._done.set()
        self._thread.join()


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


def measure_flink(data_dir, work_dir, cluster, pool, jar) -> dict:
    root = common.fresh_output(os.path.join(work_dir, "flink"))
    command = [common.PYTHON, "-m", "benchmarks.flink_runner", "_pipeline", "--data", data_dir]
    command += ["--root", root, "--master", cluster.master, "--pool", pool.endpoint, "--jar", jar]
    pids = {**cluster.pids(), "worker pool": pool.process.pid}
    with TreeSampler(pids) as sampler:
        result = common.run_measured(
            command, env=common.child_env(), log_path=os.path.join(work_dir, "flink.log")
        )
    details = json.loads(result.stdout.strip().splitlines()[-1])
    return {
        **details,
        "wall_s": result.seconds,
        "peak_rss": result.peak_rss_bytes,
        "cluster_peaks": dict(sampler.peaks),
    }


def fixed_cost(work_dir, cluster, pool, jar) -> dict:
    """A one-element pipeline on the cluster: wall seconds, and the Flink job's own seconds."""
    before = {job["jid"] for job in cluster.jobs()}
    args = _beam_config(cluster.master, pool.endpoint, jar, None).pipeline_args()
    command = [common.PYTHON, "-c", _ONE_ELEMENT, os.path.join(work_dir, "one", "out"), *args]
    result = common.run_measured(
        command, env=common.child_env(), log_path=os.path.join(work_dir, "one.log")
    )
    (job,) = [j for j in cluster.jobs() if j["jid"] not in before]
    return {"wall_s": result.seconds, "job_s": job["duration"] / 1000, "state": job["state"]}


def run(quick: bool, work_dir: str | None = None, rows: int | None = None) -> list[common.Row]:
    from pipeline.beam import engine_fetch, engines

    rows = rows or (QUICK_ROWS if quick else FULL_ROWS)
    work_dir = work_dir or tempfile.mkdtemp(prefix="flink-bench-")
    data_dir = scale.synth_data(work_dir, rows)
    home, jar = engine_fetch.fetch()
    cluster = engines.FlinkCluster(
        home, os.path.join(work_dir, "cluster"), engine_fetch.job_server_classpath(jar)
    )
    pool = engines.WorkerPool(os.path.join(work_dir, "worker-pool"))
    try:
        cluster.start()
        pool.start()
        print(
            f"  flink_runner: {rows:,} rows on Flink {engine_fetch.FLINK_VERSION} ...", flush=True
        )
        one = fixed_cost(work_dir, cluster, pool, jar)
        print(f"  flink_runner: one-element job: {one}", flush=True)
        flink = measure_flink(data_dir, work_dir, cluster, pool, jar)
        jobs = [(j["name"], j["state"], j["duration"] / 1000) for j in cluster.jobs()]
    finally:
        pool.stop()
        cluster.stop()
    print(f"  flink_runner: flink: {flink['wall_s']:.0f} s, {flink['seconds']}", flush=True)
    workers = scale.auto_workers(data_dir)
    direct = scale.measure_pipeline(data_dir, work_dir, workers, "direct")
    baseline = scale.measure_baseline(data_dir, work_dir, "flink-bench")
    peaks = flink["cluster_peaks"]
    cluster_note = ", ".join(f"{name} {_mib(peak)}" for name, peak in peaks.items())
    seconds = {k: round(v, 1) for k, v in flink["seconds"].items()}
    direct_name = f"DirectRunner {scale.mode_name(workers)}"
    return [
        common.Row(
            f"Flink (parallelism {PARALLELISM}) vs {direct_name} rows/s, {rows:,} rows",
            rows / flink["wall_s"],
            rows / direct["wall_s"],
            "rows/s",
            note=f"Flink {flink['wall_s']:.0f} s (components {seconds}; Flink jobs {jobs}); "
            f"{direct_name} {direct['wall_s']:.0f} s",
        ),
        common.Row(
            f"Flink vs the single-process baseline rows/s, {rows:,} rows",
            rows / flink["wall_s"],
            rows / baseline["wall_s"],
            "rows/s",
            note=f"baseline {baseline['wall_s']:.0f} s, peak RSS {_mib(baseline['peak_rss'])}",
        ),
        common.Row(
            "  peak RSS, Flink run (pipeline process + job server JVM) vs DirectRunner",
            flink["peak_rss"] / 2**20,
            direct["peak_rss"] / 2**20,
            "MiB",
            higher_is_better=False,
            note=f"cluster processes, each at its peak: {cluster_note}",
        ),
        common.Row(
            "  fixed cost of one Beam job on Flink (one element), wall s",
            one["wall_s"],
            None,
            "s",
            higher_is_better=False,
            note=f"of which the Flink job itself {one['job_s']:.1f} s ({one['state']}); the rest "
            "is the job server JVM's start and the pipeline's submission",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_pipeline":
        return pipeline_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--rows", type=int, default=None)
    args = parser.parse_args(argv)
    print(common.format_table(run(args.quick, args.work_dir, args.rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
