"""Image ingestion + Transform vs. a hand-written tf.data baseline, images/s and memory.

    python -m benchmarks.image_ingestion [--quick] [--work_dir DIR] [--images N] [--size S]
                                         [--repeats K] [--keep_outputs]

On one generated JPEG set (pipeline.datasets.images synth: 256x256, 10 classes), side by side in one
run, each in a fresh process with peak resident memory summed over its process tree:
- ours: a LocalDagRunner pipeline of the project's ImageExampleGen -> ImportSchemaGen ->
  ShardedTransform with the image preprocessing_fn (the full pipeline's first data steps), in
  the Beam mode `run_local.py --beam_mode auto` picks for images: in-process (threads and
  TensorFlow's thread pool use the cores; --workers 2 measures multi-processing). ExampleGen
  validates every file (one decode, JPEG at 1/8 scale) and writes the encoded bytes; Transform
  analyzes (label vocabulary) and writes the transform graph only (materialize=False, as
  pipeline.builder wires images): the Trainer reads ExampleGen's shards through the graph and
  decodes the pixels in its tf.data pipeline (benchmarks/training_input.py measures that side);
- the reference: tf.data lists the same files, reads, decodes, resizes and scales them with a
  parallel AUTOTUNE map and writes one tf.Example per image (float pixels + label id) to an
  uncompressed TFRecord file: what a hand-written "decode once, write pixels" job does.
The baseline resizes to --size (default 96: float32 pixels are 110 KB per image; at 224, 602 KB,
12 GB for 20,000 images). Memory is measured at a quarter of the images and at all of them: it
must not grow with the image count. Bytes on disk per image: what the Trainer reads
(ExampleGen's shards; Transform writes no examples) against the source JPEG files (target
<= 1.1x).

The target (>= 1.0x the baseline's images/s) is checked on the rate of further images: the line
through the N/4 and N runs, each side's fixed start-up cost (imports, tracing) excluded and
reported. The whole run at N images is reported beside it, each side timed from the start of its
process to its work done (the last output closed; ours: the pipeline run returned), so that
neither side's exit counts: interpreter teardown takes ours 1-3 s, and the baseline's tf.data
iterator took 0-9 s to stop its threads, idle, on these machines. --repeats K runs each side K
times per size, alternating, and keeps the fastest. Each side's CPU time (user + system, whole
process tree) per image is reported too: with the wall time it shows how many cores each side
kept busy. A run's outputs are removed
once it is measured (--keep_outputs keeps them), so no run pays for evicting an earlier run's
gigabytes from the page cache.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time

from benchmarks import common
from components.records import example_wire

PIPELINE_NAME = "image-bench"
# The rate of further images, ours / the baseline's.
TARGET_VS_BASELINE = 1.0
# Bytes on disk per image the Trainer reads (ExampleGen's shards) / the source JPEG file's.
TARGET_BYTES_PER_IMAGE = 1.1
# Peak memory at N images / at N/4 images: "does not grow with the image count".
TARGET_MEMORY_GROWTH = 1.25
FULL_IMAGES = 20_000
QUICK_IMAGES = 2_000
SOURCE_SIZE = 256
CLASSES = 10
DEFAULT_SIZE = 96
SHARDS = 4

IMAGE_SCHEMA = """
feature { name: "image" type: BYTES value_count { min: 1 max: 1 } }
feature { name: "class_name" type: BYTES value_count { min: 1 max: 1 } }
feature { name: "label" type: INT value_count { min: 1 max: 1 } }
feature { name: "path" type: BYTES value_count { min: 1 max: 1 } }
feature { name: "height" type: INT value_count { min: 1 max: 1 } }
feature { name: "width" type: INT value_count { min: 1 max: 1 } }
"""


def synth_images(work_dir: str, images: int) -> str:
    from pipeline.datasets import images as image_data

    return image_data.write_synthetic(
        os.path.join(work_dir, f"jpeg-{images}"), images, SOURCE_SIZE, CLASSES, seed=0
    )


# --- ours, in a child process ---------------------------------------------------------------


def build_pipeline(data_dir: str, root: str, beam_args: list[str], size: int):
    from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen

    from components.ml import features
    from components.tfx_components.image_example_gen.component import ImageExampleGen
    from components.tfx_components.transform.component import ShardedTransform
    from pipeline import builder

    schema_path = os.path.join(root, "schema.pbtxt")
    os.makedirs(root, exist_ok=True)
    with open(schema_path, "w") as handle:
        handle.write(IMAGE_SCHEMA)
    example_gen = ImageExampleGen(
        input_base=data_dir,
        split_buckets={builder.TRAIN_SPLIT: 3, builder.EVAL_SPLIT: 1},
        num_shards=SHARDS,
    ).with_id("ImageExampleGen")
    schema_gen = ImportSchemaGen(schema_file=schema_path)
    transform = ShardedTransform(
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        preprocessing_fn=builder.IMAGE_PREPROCESSING_FN,
        # As pipeline.builder wires images: the transform graph only; the Trainer reads
        # ExampleGen's shards through it.
        materialize=False,
        custom_config={
            features.LABEL_KEY_CONFIG: features.IMAGE_LABEL_KEY,
            **builder.image_transform_config(size),
        },
    ).with_id("Transform")
    return common.data_pipeline(
        PIPELINE_NAME, root, [example_gen, schema_gen, transform], beam_args
    )


def component_seconds(root: str) -> dict:
    """Seconds per component and the examples ImageExampleGen wrote, from MLMD."""
    from pipeline.mlmd import records

    db, executions, seconds = common.component_executions(root)
    (examples,) = db.outputs_by_type(executions["ImageExampleGen"].id)["Examples"]
    counts = json.loads(records.custom_value(examples, "split_example_counts"))
    outputs = db.outputs_by_type(executions["Transform"].id)
    if "Examples" in outputs:
        raise AssertionError("Transform materialized examples: images keep ExampleGen's shards")
    return {
        "seconds": seconds,
        "examples": sum(counts.values()),
        # What the Trainer reads: ExampleGen's shards (the listings lie beside them).
        "trainer_input_bytes": tree_bytes(examples.uri),
    }


def tree_bytes(folder: str) -> int:
    return sum(
        os.path.getsize(os.path.join(where, name))
        for where, _, names in os.walk(folder)
        for name in names
    )


def pipeline_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--size", type=int, required=True)
    args = parser.parse_args(argv)
    from components.tfx_components.image_example_gen import executor as image_example_gen_executor
    from components.tfx_components.transform import executor as transform_executor
    from pipeline.local import policy as local

    beam_args = common.direct_beam_args(args.workers)
    cpu: dict[str, float] = {}
    with (
        cpu_seconds_of(image_example_gen_executor.Executor, "ImageExampleGen", cpu),
        cpu_seconds_of(transform_executor.Executor, "Transform", cpu),
    ):
        local.run_dag(build_pipeline(args.data, args.root, beam_args, args.size))
    # Done: the transform graph is written and the run recorded in MLMD.
    done_at = time.time()
    print(json.dumps({**component_seconds(args.root), "cpu_seconds": cpu, "done_at": done_at}))
    return 0


@contextlib.contextmanager
def cpu_seconds_of(executor_class, name: str, into: dict):
    """While active, into[name] = the CPU seconds of executor_class's Do (the LocalDagRunner
    runs one component at a time, in this process): all of this process's threads and the
    children it reaped (Beam's worker processes)."""
    do = executor_class.Do
    who = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)

    def timed(self, *args, **kwargs):
        start = common.cpu_seconds(*who)
        try:
            return do(self, *args, **kwargs)
        finally:
            into[name] = round(common.cpu_seconds(*who) - start, 2)

    executor_class.Do = timed
    try:
        yield into
    finally:
        executor_class.Do = do


# --- the reference, in a child process --------------------------------------------------------


def encode_example(pixels_f32: bytes, label: int, image_key: str, label_key: str) -> bytes:
    """tf.train.Example {image_key: FloatList(pixels), label_key: Int64List([label])}, written
    straight in the protobuf wire format, as ImageExampleGen writes its examples: building it
    through the Python proto classes costs ~4 ms per 96x96x3 image, more than decoding it."""
    return example_wire.example(
        {
            image_key: example_wire.float32_feature(pixels_f32),
            label_key: example_wire.int64_feature(label),
        }
    )


def baseline_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", type=int, required=True)
    args = parser.parse_args(argv)
    import tensorflow as tf

    classes = sorted(
        name for name in os.listdir(args.data) if os.path.isdir(os.path.join(args.data, name))
    )
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            classes, list(range(len(classes))), tf.string, tf.int64
        ),
        default_value=-1,
    )

    def load(path):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        image = tf.image.resize(image, [args.size, args.size]) / 255.0
        label = table.lookup(tf.strings.split(path, os.sep)[-2])
        return image, label

    files = tf.data.Dataset.list_files(os.path.join(args.data, "*", "*.jpg"), shuffle=False)
    dataset = (
        files.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
        .batch(64)
        .prefetch(tf.data.AUTOTUNE)
    )
    os.makedirs(args.out, exist_ok=True)
    # Uncompressed, as the pipeline's Transform writes image pixels.
    options = tf.io.TFRecordOptions(compression_type="")
    count = 0
    # The iterator is kept until the time is taken: destroying it (tf.data stops its map and
    # autotuning threads) took from 0 to 9 s of idle time on these machines, cleanup after the
    # work, like the interpreter's exit, not part of it.
    batches = iter(dataset)
    with tf.io.TFRecordWriter(os.path.join(args.out, "images.tfrecord"), options) as writer:
        for images, labels in batches:
            for image, label in zip(images.numpy(), labels.numpy(), strict=True):
                writer.write(encode_example(image.tobytes(), int(label), "image_xf", "label"))
                count += 1
    # Done: the last record is written and the file closed.
    done_at = time.time()
    print(json.dumps({"examples": count, "done_at": done_at}), flush=True)
    del batches
    return 0


# --- the measurements -----------------------------------------------------------------------


def measure(
    kind: str,
    data_dir: str,
    work_dir: str,
    tag: str,
    size: int,
    workers: int,
    keep_outputs: bool = False,
) -> dict:
    out = common.fresh_output(os.path.join(work_dir, f"{kind}-{tag}"))
    command = [common.PYTHON, "-m", "benchmarks.image_ingestion", f"_{kind}", "--data", data_dir]
    if kind == "pipeline":
        command += ["--root", out, "--workers", str(workers)]
    else:
        command += ["--out", out]
    command += ["--size", str(size)]
    result = common.run_measured(
        command, env=common.child_env(), log_path=os.path.join(work_dir, f"{kind}-{tag}.log")
    )
    details = json.loads(result.stdout.strip().splitlines()[-1])
    done_at = details.pop("done_at")
    if kind == "pipeline":
        details["source_bytes"] = tree_bytes(data_dir)
    if not keep_outputs:
        # Gigabytes of pixels per run: left in place they fill the disk and the page cache,
        # and on these machines a write that must first evict cached pages costs ~4 s of
        # kernel CPU per GB against ~0.5 s: every later run of either side would be slowed.
        common.fresh_output(out)
    return {
        **details,
        # From the start of the process to the work done (start-up and imports included, the
        # exit not): what the images/s are computed from.
        "wall_s": done_at - result.started_at,
        "process_s": result.seconds,
        "peak_rss": result.peak_rss_bytes,
        "cpu_s": result.cpu_seconds,
    }


def run(
    quick: bool,
    work_dir: str | None = None,
    images: int | None = None,
    size: int = DEFAULT_SIZE,
    workers: int | None = None,
    repeats: int = 1,
    keep_outputs: bool = False,
):
    images = images or (QUICK_IMAGES if quick else FULL_IMAGES)
    # What run_local's --beam_mode auto picks for images.
    workers = workers or common.auto_workers(0, images=True)
    work_dir = work_dir or tempfile.mkdtemp(prefix="image-bench-")
    measured = {}
    for count in (images // 4, images):
        data_dir = synth_images(work_dir, count)
        # Ours and the baseline alternate, so a burst of load from other jobs on a shared machine
        # hits both; each point keeps its fastest run (and the highest memory of its runs).
        for _ in range(repeats):
            for kind in ("pipeline", "baseline"):
                print(f"  image_ingestion: {count:,} images: {kind} ...", flush=True)
                result = measure(kind, data_dir, work_dir, str(count), size, workers, keep_outputs)
                if result["examples"] != count:
                    raise AssertionError(f"{kind} wrote {result['examples']} of {count} images")
                measured[(kind, count)] = fastest(measured.get((kind, count)), result)
                print(
                    f"  image_ingestion: {count:,} images: {kind} {result['wall_s']:.1f} s "
                    f"(process {result['process_s']:.1f} s), "
                    f"{count / result['wall_s']:.0f} images/s, CPU {result['cpu_s']:.1f} s, "
                    f"peak RSS "
                    f"{result['peak_rss'] / 2**30:.2f} GiB"
                    + (f", components {result['seconds']}" if "seconds" in result else "")
                    + (
                        f", components' CPU {result['cpu_seconds']}"
                        if "cpu_seconds" in result
                        else ""
                    ),
                    flush=True,
                )
    return rows_from(measured, images, size, workers)


def fastest(kept: dict | None, result: dict) -> dict:
    """The faster of two runs of one point (its CPU time with it), with the higher peak
    memory of the two."""
    if kept is None:
        return result
    faster = result if result["wall_s"] < kept["wall_s"] else kept
    return {**faster, "peak_rss": max(kept["peak_rss"], result["peak_rss"])}


def steady_state(seconds_small: float, seconds_large: float, small: int, large: int):
    """(images/s, fixed seconds) of the line through (small, t_small) and (large, t_large): the
    rate at which each further image is processed, and the start-up cost that does not depend on
    the image count (imports, tracing, process exit). None when the larger run was not the
    slower one (load from other jobs): then there is no such line."""
    if seconds_large <= seconds_small:
        return None
    rate = (large - small) / (seconds_large - seconds_small)
    return rate, seconds_large - large / rate


def _component_cpu(result: dict) -> str:
    """'; ours' CPU: ImageExampleGen 18 s, Transform 36 s, the rest 10 s' (start-up, imports,
    the orchestrator, exit), or '' when the run did not record it."""
    cpu = result.get("cpu_seconds") or {}
    if not cpu:
        return ""
    parts = [f"{name} {seconds:.0f} s" for name, seconds in cpu.items()]
    rest = result["cpu_s"] - sum(cpu.values())
    return f"; ours' CPU: {', '.join(parts)}, the rest (start-up, imports, exit) {rest:.0f} s"


def rows_from(measured: dict, images: int, size: int, workers: int) -> list:
    small_count = images // 4
    ours, reference = measured[("pipeline", images)], measured[("baseline", images)]
    small = measured[("pipeline", small_count)]
    reference_small = measured[("baseline", small_count)]
    line = steady_state(small["wall_s"], ours["wall_s"], small_count, images)
    reference_line = steady_state(
        reference_small["wall_s"], reference["wall_s"], small_count, images
    )
    beam_mode = "in-process" if workers == 1 else f"multi_processing x{workers}"
    further = f"image ExampleGen+Transform, images/s from {small_count:,} to {images:,} images"
    if line is None or reference_line is None:
        print(f"  {further}: not measured, a larger run was not slower than its smaller one")
        fixed_note = "fixed costs not measured (a larger run was not slower)"
        rows = []
    else:
        (rate, fixed), (reference_rate, reference_fixed) = line, reference_line
        fixed_note = f"fixed cost ours {fixed:.0f} s, tf.data baseline {reference_fixed:.0f} s"
        rows = [
            common.Row(
                further,
                rate,
                reference_rate,
                "images/s",
                TARGET_VS_BASELINE,
                note=f"each further image, start-up excluded: {fixed_note} (the line through "
                "both runs' wall times)",
            )
        ]
    rows += [
        common.Row(
            f"image ExampleGen+Transform, {images:,} JPEG {SOURCE_SIZE}px (baseline -> {size}px), "
            "whole run",
            images / ours["wall_s"],
            images / reference["wall_s"],
            "images/s",
            None,
            note=f"ours {ours['wall_s']:.0f} s from the process's start to the work done "
            f"(process {ours['process_s']:.0f} s with its exit; per component: "
            f"{ours['seconds']}), tf.data baseline {reference['wall_s']:.0f} s (process "
            f"{reference['process_s']:.0f} s); {fixed_note}; Beam {beam_mode}",
        ),
        common.Row(
            f"image ExampleGen+Transform, CPU ms per image, whole run, {images:,} images",
            1000 * ours["cpu_s"] / images,
            1000 * reference["cpu_s"] / images,
            "ms",
            None,
            higher_is_better=False,
            note=f"user + system CPU of each process tree: ours {ours['cpu_s']:.0f} s in "
            f"{ours['process_s']:.0f} s ({ours['cpu_s'] / ours['process_s']:.2f} cores busy), "
            f"tf.data baseline {reference['cpu_s']:.0f} s in {reference['process_s']:.0f} s "
            f"({reference['cpu_s'] / reference['process_s']:.2f} cores busy)"
            + _component_cpu(ours),
        ),
    ]
    if ours.get("trainer_input_bytes") and ours.get("source_bytes"):
        rows.append(
            common.Row(
                f"bytes on disk per image the Trainer reads vs the source JPEG, {images:,} images",
                ours["trainer_input_bytes"] / images / 1024,
                ours["source_bytes"] / images / 1024,
                "KiB",
                TARGET_BYTES_PER_IMAGE,
                higher_is_better=False,
                note="ExampleGen's shards (encoded bytes; Transform writes none); float32 "
                f"pixels at {size}px would be {size * size * 3 * 4 / 1024:.0f} KiB",
            )
        )
    rows.append(
        common.Row(
            f"image pipeline peak RSS, {images:,} vs {small_count:,} images",
            ours["peak_rss"] / 2**30,
            small["peak_rss"] / 2**30,
            "GiB",
            TARGET_MEMORY_GROWTH,
            higher_is_better=False,
            note=f"tf.data baseline peak {reference['peak_rss'] / 2**30:.2f} GiB at {images:,}",
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_pipeline":
        return pipeline_main(argv[1:])
    if argv and argv[0] == "_baseline":
        return baseline_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks.image_ingestion")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--images", type=int, default=None)
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument(
        "--keep_outputs",
        action="store_true",
        help="keep each run's outputs under --work_dir (default: removed once measured)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each side at each size, alternating; the fastest of each is kept",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    rows = run(
        args.quick,
        args.work_dir,
        args.images,
        args.size,
        args.workers,
        args.repeats,
        args.keep_outputs,
    )
    print(common.format_table(rows))
    return 0 if all(row.passed is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
