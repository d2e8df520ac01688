"""The whole pipeline at 1M, 3M and 10M rows: peak memory per size and per component, rows/s.

    python -m benchmarks.scale_memory [--quick] [--work_dir DIR] [--sizes 1000000 3000000 ...]

For each size: synthetic CSV files (pipeline.datasets.synthetic, 16 files per million rows), then
`python pipeline/run_local.py --data DIR --label label --schema schemas/synth/schema.pbtxt` in a
fresh process, uncached, in the Beam mode `--beam_mode auto` picks for that input, with a bounded
number of training and evaluation steps (the Trainer's input pipeline runs; how long the model
trains is not what this measures). Peak resident memory is summed over the process tree (Beam's
worker processes, the Trainer's processes) and sampled every 0.2 s; each component's peak is the
peak of the samples between its MLMD execution's start and end. Target: peak <= 3 GiB at every
size, and ExampleGen + Transform rows/s (their MLMD execution seconds) at the largest size >= 0.9x
the rate at the smallest of 1M rows and up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from benchmarks import common, scale

TARGET_PEAK_GIB = 3.0
TARGET_LINEARITY = 0.9
FULL_SIZES = (1_000_000, 3_000_000, 10_000_000)
QUICK_SIZES = (200_000,)
TRAIN_STEPS = 500
EVAL_STEPS = 50
# Exit 3: the run completed and the model was not pushed (not blessed): still a complete run.
COMPLETE_EXIT_CODES = (0, 3)


def run_pipeline(
    data_dir: str, work_dir: str, tag: str, name: str, extra_args: tuple[str, ...] = ()
) -> tuple[common.ProcessResult, str]:
    """`run_local.py` on synthetic CSV in a fresh process, uncached (a fresh output root under
    work_dir/tag), bounded training and evaluation steps, measured: (the process's result, the
    pipeline's folder, which holds metadata.sqlite)."""
    root = common.fresh_output(os.path.join(work_dir, tag))
    command = [common.PYTHON, "pipeline/run_local.py", "--data", data_dir, "--label", "label"]
    command += ["--schema", os.path.join("schemas", "synth", "schema.pbtxt")]
    command += ["--output_root", root, "--pipeline_name", name]
    command += ["--train_steps", str(TRAIN_STEPS), "--eval_steps", str(EVAL_STEPS)]
    result = common.run_measured(
        command + list(extra_args),
        env=common.child_env(),
        log_path=os.path.join(work_dir, f"{tag}.log"),
        ok_codes=COMPLETE_EXIT_CODES,
    )
    return result, os.path.join(root, name)


def measure(data_dir: str, work_dir: str, rows: int) -> dict:
    result, pipeline_dir = run_pipeline(data_dir, work_dir, f"whole-{rows}", f"scale-memory-{rows}")
    _, executions, seconds = common.component_executions(pipeline_dir)
    components = {}
    for name, execution in executions.items():
        start = execution.create_time_since_epoch / 1000
        end = execution.last_update_time_since_epoch / 1000
        components[name] = {
            "seconds": round(seconds[name], 1),
            "peak_mib": round(result.peak_between(start, end) / 2**20),
        }
    return {
        "rows": rows,
        "wall_s": result.seconds,
        "peak_rss": result.peak_rss_bytes,
        "components": components,
        "workers": scale.auto_workers(data_dir),
    }


def example_gen_transform_rate(measured: dict) -> float:
    parts = measured["components"]
    seconds = sum(
        info["seconds"]
        for name, info in parts.items()
        if name.endswith("ExampleGen") or name == "Transform"
    )
    return measured["rows"] / seconds


def run(quick: bool, work_dir: str | None = None, sizes=None) -> list[common.Row]:
    sizes = tuple(sizes or (QUICK_SIZES if quick else FULL_SIZES))
    work_dir = work_dir or tempfile.mkdtemp(prefix="scale-memory-")
    results = []
    for rows in sizes:
        data_dir = scale.synth_data(work_dir, rows)
        print(f"  scale_memory: {rows:,} rows: whole pipeline ...", flush=True)
        measured = measure(data_dir, work_dir, rows)
        print(f"  scale_memory: {rows:,} rows: {json.dumps(measured)}", flush=True)
        results.append(measured)
    table = []
    for measured in results:
        worst = max(measured["components"].items(), key=lambda item: item[1]["peak_mib"])
        table.append(
            common.Row(
                f"whole pipeline peak RSS, {measured['rows']:,} rows "
                f"({scale.mode_name(measured['workers'])})",
                measured["peak_rss"] / 2**30,
                None,
                "GiB",
                TARGET_PEAK_GIB,
                higher_is_better=False,
                note=f"{measured['wall_s']:.0f} s; largest component {worst[0]} "
                f"{worst[1]['peak_mib']:,} MiB; per component "
                + json.dumps(measured["components"]),
            )
        )
    large = [m for m in results if m["rows"] >= 1_000_000]
    if len(large) > 1:
        first, last = large[0], large[-1]
        table.append(
            common.Row(
                f"ExampleGen+Transform rows/s at {last['rows']:,} vs {first['rows']:,} rows",
                example_gen_transform_rate(last),
                example_gen_transform_rate(first),
                "rows/s",
                TARGET_LINEARITY,
                note="MLMD execution seconds of the two components, whole-pipeline runs above",
            )
        )
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    args = parser.parse_args(argv)
    print(common.format_table(run(args.quick, args.work_dir, args.sizes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
