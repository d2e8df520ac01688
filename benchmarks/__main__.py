"""Every benchmark, side by side in one run, printed as one table.

    python -m benchmarks all [--quick] [--work_dir DIR] [--only NAME ...]

Each benchmark module exposes run(quick) -> list[common.Row]. --quick (under 10 minutes on a
2-core machine) runs the scale benchmark at 200,000 rows, the wide-table Transform at 10 and 80
columns only, the training input check with fewer steps and no per-strategy runs, the
module_file handling of user_module without its pipeline runs, and skips the penguin-vs-TFX-
example comparison (two cold and two warm full pipeline runs, about 7 minutes on its own).
scale_memory (the whole pipeline at 1M, 3M and 10M rows) is full-size only. Modules that do not
exist yet are reported as skipped.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback

from benchmarks import common

# (module, skipped in --quick because ...)
BENCHMARKS = (
    ("scale", None),
    (
        "scale_memory",
        "the whole pipeline at 1M, 3M and 10M rows, about an hour; scale_bad_input's quick run "
        "measures the whole pipeline's peak memory at 200,000 rows",
    ),
    ("scale_bad_input", None),
    ("wide_transform", None),
    ("wide_model", None),
    ("high_cardinality", None),
    ("portable_runner", None),
    ("flink_runner", None),
    ("training_throughput", None),
    ("image_ingestion", None),
    ("training_input", None),
    ("cache_fingerprint", None),
    ("mlmd_inspect", None),
    ("user_module", None),
    ("class_weight", None),
    ("bulk_inference", None),
    ("penguin_vs_tfx_example", "two cold and two warm full pipeline runs, about 7 minutes"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=("all",))
    parser.add_argument("--quick", action="store_true", help="smaller sizes, under 10 minutes")
    parser.add_argument("--work_dir", default=None, help="default: a new temporary directory")
    parser.add_argument("--only", nargs="*", default=None, help="run only these modules")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    rows: list[common.Row] = []
    skipped: list[str] = []
    failed = False
    started = time.monotonic()
    for name, quick_skip in BENCHMARKS:
        if args.only is not None and name not in args.only:
            continue
        if args.quick and quick_skip:
            skipped.append(f"{name}: skipped in --quick ({quick_skip})")
            continue
        try:
            module = importlib.import_module(f"benchmarks.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"benchmarks.{name}":
                raise
            skipped.append(f"{name}: skipped (module benchmarks/{name}.py does not exist yet)")
            continue
        print(f"== {name} ...", flush=True)
        kwargs = {}
        if args.work_dir:
            kwargs["work_dir"] = os.path.join(args.work_dir, name)
            os.makedirs(kwargs["work_dir"], exist_ok=True)
        module_started = time.monotonic()
        try:
            rows.extend(module.run(args.quick, **kwargs))
        except Exception:  # one failing benchmark must not lose the others' figures
            failed = True
            traceback.print_exc()
            skipped.append(f"{name}: FAILED (traceback above)")
        print(f"== {name}: {time.monotonic() - module_started:.0f} s", flush=True)
    print()
    print(common.format_table(rows))
    for line in skipped:
        print(line)
    print(f"total: {time.monotonic() - started:.0f} s{' (--quick)' if args.quick else ''}")
    return 1 if failed or any(row.passed is False for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
