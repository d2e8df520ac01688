"""The MLMD inspection CLI on a store of 1,000 runs: `runs`, `lineage` of the newest model and
`report` of the newest run, each in a fresh process as a user runs it.

    python -m benchmarks.mlmd_inspect [--runs 1000] [--repeats 3] [--work_dir DIR]
                                      [--source metadata.sqlite]

The store is grown from a real one (tests.mlmd_synth copies its runs' records, run after
run): by default the penguin pipeline is run three times first (executed, cached rerun, a run on
changed data), or --source names a store to grow from. Reported per command: the wall time (the
median over --repeats fresh processes; target under 2 s), the peak RSS of the process, and the
size of what it wrote (the lineage JSON, the report file).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

from benchmarks import common

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_LOCAL = os.path.join(PROJECT_ROOT, "pipeline", "run_local.py")
TARGET_SECONDS = 2.0
PIPELINE = "penguins-pipeline"


def _shifted_penguins(data_dir: str) -> str:
    """The penguins CSV with bill lengths 4 mm longer and a third of Biscoe's birds on Dream: a
    run on changed data, so that the copied runs differ in statistics and metrics."""
    from pipeline import datasets

    folder = os.path.join(data_dir, "penguins")
    os.makedirs(folder, exist_ok=True)
    source = os.path.join(datasets.penguins_data_root(), "penguins.csv")
    with open(source, newline="") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    bill, island = header.index("bill_length_mm"), header.index("island")
    with open(os.path.join(folder, "penguins.csv"), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for index, row in enumerate(body):
            if row[bill] not in ("NA", ""):
                row[bill] = f"{float(row[bill]) + 4.0:.1f}"
            if index % 3 == 0 and row[island] == "Biscoe":
                row[island] = "Dream"
            writer.writerow(row)
    return folder


def real_store(work_dir: str) -> str:
    """Three real runs of the penguin pipeline (reused when work_dir already has them)."""
    output_root = os.path.join(work_dir, "out")
    store = os.path.join(output_root, PIPELINE, "metadata.sqlite")
    if os.path.exists(store):
        return store
    shifted = _shifted_penguins(os.path.join(work_dir, "data"))
    for extra in ([], [], ["--data", shifted, "--label", "species", "--pipeline_name", PIPELINE]):
        print(f"  pipeline run {' '.join(extra) or '(penguins)'} ...", flush=True)
        subprocess.run(
            [sys.executable, RUN_LOCAL, "--output_root", output_root, *extra],
            check=True,
            capture_output=True,
            env=common.child_env(),
        )
    return store


def newest_model(store_path: str) -> int:
    from pipeline.mlmd import connection

    store = connection.open_store(store_path)
    return max(a.id for a in store.get_artifacts_by_type("Model"))


def _inspect(store: str, *args: str, out: str) -> common.ProcessResult:
    command = [sys.executable, "-m", "pipeline.mlmd", "--metadata", store, *args]
    with open(out, "w") as handle:
        result = common.run_measured(command, env=common.child_env(), interval=0.05)
        handle.write(result.stdout)
    return result


def measure(work_dir: str, runs: int, repeats: int, source: str | None) -> dict:
    from tests import mlmd_synth

    source = source or real_store(work_dir)
    store = os.path.join(work_dir, f"metadata-{runs}-runs.sqlite")
    print(f"  growing {source} to {runs} runs ...", flush=True)
    mlmd_synth.grow(source, store, runs)
    model = newest_model(store)
    report = os.path.join(work_dir, "report.html")
    commands = {
        "runs": (["runs"], os.path.join(work_dir, "runs.txt")),
        "lineage": (["--json", "lineage", str(model)], os.path.join(work_dir, "lineage.json")),
        "report": (["report", "--out", report], os.path.join(work_dir, "report.txt")),
    }
    results: dict[str, dict] = {}
    for name, (args, out) in commands.items():
        measured = [_inspect(store, *args, out=out) for _ in range(repeats)]
        written = report if name == "report" else out
        results[name] = {
            "seconds": [m.seconds for m in measured],
            "peak_rss_mb": max(m.peak_rss_bytes for m in measured) / 2**20,
            "output_bytes": os.path.getsize(written),
        }
        print(
            f"  {name}: {statistics.median(results[name]['seconds']):.2f} s, "
            f"peak RSS {results[name]['peak_rss_mb']:.0f} MB, "
            f"output {results[name]['output_bytes']:,} bytes",
            flush=True,
        )
    return {"runs": runs, "results": results}


def rows(measured: dict) -> list[common.Row]:
    table = []
    for name, result in measured["results"].items():
        seconds = result["seconds"]
        table.append(
            common.Row(
                f"inspect_mlmd {name}, {measured['runs']:,} runs",
                statistics.median(seconds),
                None,
                "s",
                TARGET_SECONDS,
                higher_is_better=False,
                note=f"spread {min(seconds):.2f}-{max(seconds):.2f} s; peak RSS "
                f"{result['peak_rss_mb']:.0f} MB; output {result['output_bytes']:,} bytes",
            )
        )
    return table


def run(quick: bool, work_dir: str | None = None) -> list[common.Row]:
    """Rows for `python -m benchmarks all`."""
    work_dir = work_dir or tempfile.mkdtemp(prefix="mlmd-inspect-bench-")
    return rows(measure(work_dir, 1000, 1 if quick else 3, None))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mlmd_inspect")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--source", default=None, help="grow this store instead of running")
    args = parser.parse_args(argv)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="mlmd-inspect-bench-")
    os.makedirs(work_dir, exist_ok=True)
    table = rows(measure(work_dir, args.runs, args.repeats, args.source))
    print(common.format_table(table))
    return 1 if any(row.passed is False for row in table) else 0


if __name__ == "__main__":
    sys.exit(main())
