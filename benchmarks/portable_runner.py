"""ExampleGen + Transform through Beam's PortableRunner beside the DirectRunner.

    python -m benchmarks.portable_runner [--quick] [--work_dir DIR] [--rows 1000000]

The scale benchmark's pipeline (pipeline.datasets.synthetic CSV -> the project's
ShardedCsvExampleGen -> ImportSchemaGen -> ShardedTransform, benchmarks.scale.build_pipeline),
each run in a fresh process with peak resident memory summed over its process tree:
- portable: PortableRunner, embedded job service, EXTERNAL environment: a worker pool
  (`python -m pipeline.beam.boot worker_pool`) started by that process, so that the pool, the
  boots and the SDK harnesses are in the measured tree; the project's wheel built and staged
  (--beam_stage_project), installed by each worker. Beam 2.59's embedded job service asks for
  one SDK worker per job (its FnApiRunner never reads --direct_num_workers); the full run also
  measures two workers per job, with that option honoured as FnApiRunner.run_pipeline does
  (a patch of this benchmark's process only: run_local cannot do it).
- the reference: the DirectRunner as `run_local.py --beam_mode auto` picks it for the input; the
  full run also measures DirectRunner multi_processing x2 (its SDK workers are subprocesses too).
Rows/s count the whole process (start-up, the pool's start, the wheel build included).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

from benchmarks import common, scale

QUICK_ROWS = 200_000
FULL_ROWS = 1_000_000


# --- the pipeline, run in a child process ---------------------------------------------------


BOOTED = re.compile(r"beam_boot\[\d+\] (\S+): installed ")
EXITED = re.compile(r"beam_boot\[\d+\] (\S+): harness pid \d+ exited -?\d+ .* cpu ([\d.]+) s")


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


def _all_exited(log: str) -> bool:
    return len(EXITED.findall(log)) >= len(BOOTED.findall(log))


def worker_cpu_seconds(log: str) -> dict[str, float]:
    """{worker id: CPU seconds of its SDK harness}, from the pool's log."""
    return {worker: float(cpu) for worker, cpu in EXITED.findall(log)}


@contextlib.contextmanager
def worker_pool(work_dir: str):
    """`python -m pipeline.beam.boot worker_pool` as a child of this process; yields its
    host:port once it listens."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        port = probe.getsockname()[1]
    log_path = os.path.join(work_dir, "worker_pool.log")
    with open(log_path, "w") as log:
        pool = subprocess.Popen(
            [sys.executable, "-m", "pipeline.beam.boot", "worker_pool", "--service_port"]
            + [str(port), "--work_dir", os.path.join(work_dir, "workers")],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=common.PROJECT_ROOT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while "beam_boot worker pool" not in _read(log_path):
                if pool.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the worker pool did not start; log: {log_path}")
                time.sleep(0.2)
            yield f"localhost:{port}"
            # Each worker exits (and logs its CPU time) once the runner closes its control
            # stream, just after its job: wait for the last ones before stopping the pool.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not _all_exited(_read(log_path)):
                time.sleep(0.5)
        finally:
            os.killpg(pool.pid, signal.SIGTERM)
            pool.wait(timeout=30)


@contextlib.contextmanager
def embedded_job_service_workers(workers: int):
    """While active, the embedded job service's FnApiRunner runs `workers` SDK workers per job
    (Beam 2.59 leaves it at 1 there; FnApiRunner.run_pipeline, the DirectRunner's path, sets it
    from --direct_num_workers). This benchmark's process only."""
    from unittest import mock

    from apache_beam.portability.api import beam_job_api_pb2
    from apache_beam.runners.portability import local_job_service
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    def invoke_runner(job):
        job.set_state(beam_job_api_pb2.JobState.RUNNING)
        runner = fn_runner.FnApiRunner(provision_info=job._provision_info)  # noqa: SLF001
        runner._num_workers = workers  # noqa: SLF001
        return runner.run_via_runner_api(job._pipeline_proto, job.pipeline_options())  # noqa: SLF001

    with mock.patch.object(local_job_service.BeamJob, "_invoke_runner", invoke_runner):
        yield


def pipeline_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--runner", choices=("direct", "portable"), required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args(argv)
    from pipeline.beam import runners as beam_runners
    from pipeline.config import BeamConfig
    from pipeline.local import policy as local

    if args.runner == "direct":
        beam_args = common.direct_beam_args(args.workers)
        local.run_dag(scale.build_pipeline(args.data, args.root, beam_args, args.shards))
    else:
        with contextlib.ExitStack() as stack:
            endpoint = stack.enter_context(worker_pool(args.root))
            if args.workers > 1:
                stack.enter_context(embedded_job_service_workers(args.workers))
            config = BeamConfig(
                runner="portable",
                job_endpoint="embed",
                environment_type="EXTERNAL",
                environment_config=endpoint,
                extra_packages=(beam_runners.build_project_wheel(),),
            )
            config.validate()
            beam_args = config.pipeline_args()
            local.run_dag(scale.build_pipeline(args.data, args.root, beam_args, args.shards))
    results = scale.component_results(args.root)
    log = os.path.join(args.root, "worker_pool.log")
    if os.path.exists(log):
        results["worker_cpu_s"] = worker_cpu_seconds(_read(log))
        results["worker_boots"] = len(BOOTED.findall(_read(log)))
    print(json.dumps(results))
    return 0


# --- the measurements -----------------------------------------------------------------------


def measure(data_dir: str, work_dir: str, runner: str, workers: int, tag: str) -> dict:
    root = common.fresh_output(os.path.join(work_dir, tag))
    os.makedirs(root)
    command = [common.PYTHON, "-m", "benchmarks.portable_runner", "_pipeline", "--data", data_dir]
    command += ["--root", root, "--runner", runner, "--workers", str(workers)]
    result = common.run_measured(
        command, env=common.child_env(), log_path=os.path.join(work_dir, f"{tag}.log")
    )
    details = json.loads(result.stdout.strip().splitlines()[-1])
    return {**details, "wall_s": result.seconds, "peak_rss": result.peak_rss_bytes}


def _describe(run: dict) -> str:
    seconds = {k: round(v, 1) for k, v in run["seconds"].items()}
    return (
        f"{run['wall_s']:.0f} s, peak RSS {run['peak_rss'] / 2**20:,.0f} MiB, components {seconds}"
    )


def run(quick: bool, work_dir: str | None = None, rows: int | None = None) -> list[common.Row]:
    rows = rows or (QUICK_ROWS if quick else FULL_ROWS)
    work_dir = work_dir or tempfile.mkdtemp(prefix="portable-bench-")
    data_dir = scale.synth_data(work_dir, rows)
    direct_workers = scale.auto_workers(data_dir)
    runs = [
        ("direct", direct_workers, f"DirectRunner {scale.mode_name(direct_workers)}"),
        ("portable", 1, "PortableRunner EXTERNAL x1"),
    ]
    if not quick:
        other = 2 if direct_workers == 1 else 1
        runs.append(("direct", other, f"DirectRunner {scale.mode_name(other)}"))
        runs.append(("portable", 2, "PortableRunner EXTERNAL x2 (patched job service)"))
    measured = {}
    for runner, workers, name in runs:
        print(f"  portable_runner: {rows:,} rows: {name} ...", flush=True)
        measured[name] = measure(data_dir, work_dir, runner, workers, f"{runner}-{workers}")
        print(f"  portable_runner: {name}: {_describe(measured[name])}", flush=True)
    reference_name = runs[0][2]
    reference = measured[reference_name]
    out = []
    for _, _, name in runs[1:]:
        ours = measured[name]
        boots = ours.get("worker_boots")
        out.append(
            common.Row(
                f"{name} vs {reference_name} rows/s, {rows:,} rows",
                rows / ours["wall_s"],
                rows / reference["wall_s"],
                "rows/s",
                note=f"{name}: {_describe(ours)}"
                + (
                    f", {boots} SDK worker(s) booted (harness CPU s {ours['worker_cpu_s']})"
                    if boots
                    else ""
                )
                + f"; {reference_name}: {_describe(reference)}",
            )
        )
        out.append(
            common.Row(
                f"  peak RSS, {name} vs {reference_name}",
                ours["peak_rss"] / 2**20,
                reference["peak_rss"] / 2**20,
                "MiB",
                higher_is_better=False,
            )
        )
    return out


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
