"""What the cache fingerprints (pipeline.fingerprints) add to a warm rerun of the penguin pipeline.

    python -m benchmarks.cache_fingerprint [--repeats 3] [--work_dir DIR]

Runs the penguin pipeline once (cold), then, --repeats times: a warm rerun as a user runs it
(`python pipeline/run_local.py`, every component from the cache, whole process timed), and in a
fresh process the fingerprint work that rerun did: reading the previous fingerprints from MLMD,
and fingerprinting every component from cold (source files parsed, stack versions read). The
target: within 0.5 s of the warm rerun without them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import common

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_LOCAL = os.path.join(PROJECT_ROOT, "pipeline", "run_local.py")
TARGET_SECONDS = 0.5


def _run_local(output_root: str) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, RUN_LOCAL, "--output_root", output_root, "--epochs", "2"],
        check=True,
        capture_output=True,
        env=common.child_env(),
    )
    return time.monotonic() - started


def fingerprint_seconds(output_root: str) -> dict[str, float]:
    """In this (fresh) process: the fingerprint steps of a run, timed from cold."""
    from pipeline import builder, datasets, fingerprints
    from pipeline import config as config_lib
    from pipeline.local import summary as run_summary

    config = config_lib.local_config(dataset=datasets.penguins(), output_root=output_root)
    started = time.perf_counter()
    previous = run_summary.previous_fingerprints(config)
    read = time.perf_counter() - started
    tfx_pipeline = builder.create_pipeline(config)
    fingerprints._parse.cache_clear()  # noqa: SLF001 (timed from cold: parse every file again)
    fingerprints.stack_versions.cache_clear()
    started = time.perf_counter()
    fingerprints.attach(
        tfx_pipeline.components, fingerprints.file_digest(config.dataset.schema_path)
    )
    current = fingerprints.of_components(tfx_pipeline.components)
    attach = time.perf_counter() - started
    assert set(previous) == set(current), (sorted(previous), sorted(current))
    return {"read_previous": read, "attach": attach}


def measure(work_dir: str, repeats: int) -> dict[str, list[float]]:
    output_root = os.path.join(work_dir, "out")
    print("  cold run ...", flush=True)
    _run_local(output_root)
    results: dict[str, list[float]] = {"warm_rerun": [], "fingerprints": []}
    for attempt in range(repeats):
        results["warm_rerun"].append(_run_local(output_root))
        child = subprocess.run(
            [sys.executable, "-m", "benchmarks.cache_fingerprint", "--child", output_root],
            check=True,
            capture_output=True,
            text=True,
            env=common.child_env(),
            cwd=PROJECT_ROOT,
        )
        steps = json.loads(child.stdout.strip().splitlines()[-1])
        results["fingerprints"].append(sum(steps.values()))
        print(
            f"  repeat {attempt + 1}: warm rerun {results['warm_rerun'][-1]:.2f} s, "
            f"fingerprints {steps['attach']:.3f} s + MLMD read {steps['read_previous']:.3f} s",
            flush=True,
        )
    return results


def rows(results: dict[str, list[float]]) -> list[common.Row]:
    cost, rerun = results["fingerprints"], results["warm_rerun"]
    spread = f"spread {min(cost):.3f}-{max(cost):.3f} s over {len(cost)} fresh processes"
    return [
        common.Row(
            "cache fingerprints per run (attach + MLMD read, cold)",
            statistics.median(cost),
            None,
            "s",
            TARGET_SECONDS,
            higher_is_better=False,
            note=spread,
        ),
        common.Row(
            "penguin warm rerun, fingerprints included",
            statistics.median(rerun),
            None,
            "s",
            note=f"spread {min(rerun):.2f}-{max(rerun):.2f} s; fingerprints are "
            f"{statistics.median(cost) / statistics.median(rerun):.1%} of it",
        ),
    ]


def run(quick: bool, work_dir: str | None = None) -> list[common.Row]:
    """Rows for `python -m benchmarks all`."""
    work_dir = work_dir or tempfile.mkdtemp(prefix="fingerprint-bench-")
    return rows(measure(work_dir, 2 if quick else 3))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cache_fingerprint")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(fingerprint_seconds(args.child)))
        return 0
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="fingerprint-bench-")
    table = rows(measure(work_dir, args.repeats))
    print(common.format_table(table))
    return 1 if any(row.passed is False for row in table) else 0


if __name__ == "__main__":
    sys.exit(main())
