"""Side by side: this project's local pipeline vs. TFX 1.16's own penguin example.

Both run in one invocation on this machine, each as a fresh process the way a user starts it,
cold (empty output root) then warm (the same command again, nothing changed). Each round runs
ours cold, the reference cold, ours warm, the reference warm, so that both sides of a ratio meet
the same load; with several rounds the ratios are per round and the table gives their medians:

    python -m benchmarks.penguin_vs_tfx_example [--rounds N] [--work_dir DIR]

The reference is tfx.examples.penguin.penguin_pipeline_local.create_pipeline with the arguments
its __main__ uses, tuning off (keras-tuner rejects tf-keras models) and TF_USE_LEGACY_KERAS=1,
on the same palmerpenguins rows in the format it expects (penguins_processed.csv layout: the
four measurements and an integer species; the 342 rows with measurements).

Prints wall times and the ratios targeted:
  ours cold / reference cold  <= 0.15 (issue 30; the foundation issue's was 0.5)
  ours warm / reference cold  <= 0.1
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from components import KERAS_ENV

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_DRIVER = """
import os, sys
{prelude}from absl import flags, logging
from tfx import v1 as tfx
from tfx.examples.penguin import penguin_pipeline_local as example

flags.FLAGS(sys.argv[:1])
logging.set_verbosity(logging.INFO)
work = sys.argv[1]
name = "penguin_local_keras"
tfx.orchestration.LocalDagRunner().run(example.create_pipeline(
    pipeline_name=name,
    pipeline_root=os.path.join(work, "tfx", "pipelines", name),
    data_root=os.path.join(work, "data"),
    module_file=os.path.join(work, "penguin_utils_keras.py"),
    accuracy_threshold=0.6,
    serving_model_dir=os.path.join(work, "serving_model", name),
    metadata_path=os.path.join(work, "tfx", "metadata", name, "metadata.db"),
    user_provided_schema_path=None,
    enable_tuning={tuning},
    enable_bulk_inferrer={bulk_inferrer},
    examplegen_input_config=None,
    examplegen_range_config_date=None,
    resolver_range_config=None,
    beam_pipeline_args=example._beam_pipeline_args_by_runner["DirectRunner"],
    enable_transform_input_cache={transform_input_cache},
    enable_example_diff=False,
))
"""


def reference_driver(
    *,
    tuning: bool = False,
    bulk_inferrer: bool = True,
    transform_input_cache: bool = True,
    prelude: str = "",
) -> str:
    """A script that runs TFX's own penguin_pipeline_local.create_pipeline with these choices
    (argv[1]: the work folder of write_reference_inputs)."""
    return _DRIVER.format(
        prelude=prelude,
        tuning=tuning,
        bulk_inferrer=bulk_inferrer,
        transform_input_cache=transform_input_cache,
    )


REFERENCE_DRIVER = reference_driver()

SPECIES = {"Adelie": 0, "Chinstrap": 1, "Gentoo": 2}
MEASUREMENTS = {
    "bill_length_mm": "culmen_length_mm",
    "bill_depth_mm": "culmen_depth_mm",
    "flipper_length_mm": "flipper_length_mm",
    "body_mass_g": "body_mass_g",
}


def write_reference_inputs(work_dir: str) -> int:
    """The example's data layout from the same palmerpenguins CSV, and its module file."""
    import importlib.util

    import palmerpenguins

    source = os.path.join(os.path.dirname(palmerpenguins.__file__), "data", "penguins.csv")
    # The example reads <data_root>/labelled/* and, for its BulkInferrer, <data_root>/unlabelled/*
    # (the same rows without the label).
    labelled_dir = os.path.join(work_dir, "data", "labelled")
    unlabelled_dir = os.path.join(work_dir, "data", "unlabelled")
    os.makedirs(labelled_dir, exist_ok=True)
    os.makedirs(unlabelled_dir, exist_ok=True)
    rows = 0
    with (
        open(source, newline="") as raw,
        open(os.path.join(labelled_dir, "penguins_processed.csv"), "w", newline="") as labelled,
        open(
            os.path.join(unlabelled_dir, "penguins_unlabelled.csv"), "w", newline=""
        ) as unlabelled,
    ):
        labelled_writer, unlabelled_writer = csv.writer(labelled), csv.writer(unlabelled)
        labelled_writer.writerow(["species", *MEASUREMENTS.values()])
        unlabelled_writer.writerow(list(MEASUREMENTS.values()))
        for record in csv.DictReader(raw):
            values = [record[column] for column in MEASUREMENTS]
            if "NA" in values:
                continue  # the example's processed data has no missing measurements
            labelled_writer.writerow([SPECIES[record["species"]], *values])
            unlabelled_writer.writerow(values)
            rows += 1
    # Located, not imported: importing it would load all of TFX into this harness process.
    module = importlib.util.find_spec("tfx.examples.penguin.penguin_utils_keras").origin
    shutil.copy(module, os.path.join(work_dir, "penguin_utils_keras.py"))
    return rows


def timed(command: list[str], env: dict, log_path: str) -> float:
    started = time.monotonic()
    with open(log_path, "w") as log:
        result = subprocess.run(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, check=False
        )
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(
            f"command failed ({result.returncode}): {' '.join(command)}; see {log_path}"
        )
    return seconds


def measure(work_dir: str, rounds: int = 1) -> tuple[dict, int]:
    """Wall seconds per (ours|reference, cold|warm), one per round, and the reference's row
    count. Each round starts from empty output directories."""
    ours_dir = os.path.join(work_dir, "ours")
    reference_dir = os.path.join(work_dir, "reference")
    env = dict(os.environ, **KERAS_ENV, PYTHONUNBUFFERED="1")
    driver = os.path.join(reference_dir, "run_reference.py")
    ours = [
        sys.executable,
        os.path.join(PROJECT_ROOT, "pipeline", "run_local.py"),
        "--output_root",
        ours_dir,
    ]
    reference = [sys.executable, driver, reference_dir]
    times: dict = {}
    rows = 0
    for round_index in range(rounds):
        for path in (ours_dir, reference_dir):
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(path)
        rows = write_reference_inputs(reference_dir)
        with open(driver, "w") as handle:
            handle.write(REFERENCE_DRIVER)
        for phase in ("cold", "warm"):
            for name, command in (("ours", ours), ("reference", reference)):
                log_path = os.path.join(work_dir, f"{name}-{phase}-{round_index + 1}.log")
                print(
                    f"round {round_index + 1}/{rounds}: {name} {phase} ... (log: {log_path})",
                    flush=True,
                )
                seconds = timed(command, env, log_path)
                times.setdefault((name, phase), []).append(seconds)
                print(f"  {seconds:.1f} s", flush=True)
    return times, rows


# (label, ours' phase, the reference's phase, target ratio or None)
TARGETS = (
    ("cold", "cold", "cold", 0.15),
    ("warm vs cold", "warm", "cold", 0.1),
    ("warm vs warm", "warm", "warm", None),
)


def ratios(times: dict, ours: str, reference: str) -> list[float]:
    """Per round: ours' seconds in one phase over the reference's in another."""
    return [
        mine / theirs
        for mine, theirs in zip(times["ours", ours], times["reference", reference], strict=True)
    ]


def run(quick: bool, work_dir: str | None = None) -> list:
    """Rows for `python -m benchmarks all` (the caller skips this one in --quick)."""
    from benchmarks.common import Row

    del quick  # one size only: the whole pipeline on penguins, cold then warm
    times, _ = measure(work_dir or tempfile.mkdtemp(prefix="penguin-bench-"))
    return [
        Row(
            f"penguin pipeline {label} vs TFX example {reference}",
            statistics.median(times["ours", ours]),
            statistics.median(times["reference", reference]),
            "s",
            target,
            higher_is_better=False,
        )
        for label, ours, reference, target in TARGETS
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", default=None, help="default: a new temporary directory")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the four runs (default 1)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="penguin-bench-")
    times, rows = measure(work_dir, args.rounds)
    print(
        f"\nmachine: {os.cpu_count()} CPU core(s); reference on {rows} penguin rows, "
        f"ours on all 344 rows of penguins.csv; {args.rounds} round(s), medians"
    )
    print(
        f"{'run':<16}{'ours s':>10}{'reference s':>14}{'ratio':>10}{'target':>10}{'':>6}"
        "  ratio per round"
    )
    for label, ours, reference, target in TARGETS:
        per_round = ratios(times, ours, reference)
        ratio = statistics.median(per_round)
        verdict = "" if target is None else ("pass" if ratio <= target else "FAIL")
        target_text = "" if target is None else f"<= {target}"
        print(
            f"{label:<16}{statistics.median(times['ours', ours]):>10.1f}"
            f"{statistics.median(times['reference', reference]):>14.1f}{ratio:>10.3f}"
            f"{target_text:>10}{verdict:>6}  {', '.join(f'{r:.3f}' for r in per_round)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
