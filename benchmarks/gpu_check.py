"""GPU check: MobileNetV2 at 224 on synthetic JPEG shards, MirroredStrategy, mixed precision,
with and without XLA; images/s, the input-bound ratio and GPU utilisation (nvidia-smi).

    python -m benchmarks.gpu_check [--images 4096] [--size 224] [--steps 60] [--batch 128]
                                   [--work_dir DIR] [--json PATH]

One prepared run (about 4-6 minutes on one GPU at the defaults): writes --images 256x256 JPEGs,
runs the project's ImageExampleGen -> Transform on them (encoded bytes kept: the shards the
Trainer reads), then for XLA off and on trains MobileNetV2 (weights=None) under
tf.distribute.MirroredStrategy (all local GPUs; the Trainer's `--strategy mirrored`) with the
mixed_float16 policy, fed by components.ml.inputs.make_dataset (decode -> resize -> normalize
in tf.data) and by one cached batch, and samples nvidia-smi's utilisation while the real input
feeds it. Without a GPU it runs the same steps on the CPU in float32 (what the test does at a
tiny size) and reports utilisation as not measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading

from benchmarks import common, image_ingestion, training_input

SAMPLE_EVERY_S = 0.5


class GpuSampler:
    """nvidia-smi utilisation.gpu (%) of every GPU, sampled every SAMPLE_EVERY_S while active."""

    def __init__(self):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("nvidia-smi") is not None

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            result = subprocess.run(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                check=False,
                timeout=10,
            )
            values = [float(v) for v in result.stdout.split() if v.strip().isdigit()]
            if values:
                self.samples.append(statistics.mean(values))

    @contextlib.contextmanager
    def active(self):
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    def summary(self) -> str:
        if not self.samples:
            return "not measured"
        return f"mean {statistics.mean(self.samples):.0f} %, max {max(self.samples):.0f} %"


def run(images: int, size: int, steps: int, batch: int, work_dir: str, rounds: int) -> dict:
    import tensorflow as tf  # Keras 2: benchmarks.common imported components (KERAS_ENV)

    gpus = tf.config.list_physical_devices("GPU")
    data_dir = image_ingestion.synth_images(work_dir, images)
    print(f"gpu_check: {len(gpus)} GPU(s); {images} JPEGs -> Transform at {size}px", flush=True)
    files, graph = training_input.make_shards(data_dir, os.path.join(work_dir, "shards"), size)
    if gpus:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    strategy = tf.distribute.MirroredStrategy()
    global_batch = batch * strategy.num_replicas_in_sync
    results: dict = {
        "gpus": [gpu.name for gpu in gpus],
        "replicas": strategy.num_replicas_in_sync,
        "policy": tf.keras.mixed_precision.global_policy().name,
        "images": images,
        "size": size,
        "global_batch": global_batch,
        "runs": {},
    }
    for xla in (False, True):
        sampler = GpuSampler()
        measured = training_input.input_bound(
            files,
            graph,
            "mobilenet_v2",
            global_batch,
            steps,
            rounds=rounds,
            strategy=strategy,
            jit_compile=xla,
            during_real=sampler.active if GpuSampler.available() and gpus else None,
        )
        measured["gpu_utilisation"] = sampler.summary()
        name = "xla" if xla else "no_xla"
        results["runs"][name] = measured
        print(
            f"gpu_check: MobileNetV2 {size}px, {name}: {measured['images_per_s']:.0f} images/s, "
            f"input-bound ratio {measured['ratio']:.2f} (step {measured['real_step_ms']:.1f} ms "
            f"real, {measured['synthetic_step_ms']:.1f} ms cached), GPU utilisation "
            f"{measured['gpu_utilisation']}",
            flush=True,
        )
    return results


def rows_from(results: dict) -> list:
    rows = []
    for name, measured in results["runs"].items():
        rows.append(
            common.Row(
                f"MobileNetV2 {results['size']}px, {results['policy']}, {name}, "
                f"{results['replicas']} replica(s): input-bound ratio",
                measured["ratio"],
                None,
                "x",
                training_input.INPUT_BOUND_TARGET,
                higher_is_better=False,
                note=f"{measured['images_per_s']:.0f} images/s, global batch "
                f"{results['global_batch']}, GPU utilisation {measured['gpu_utilisation']}",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check")
    parser.add_argument("--images", type=int, default=4096)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=128, help="per replica")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="gpu-check-")
    results = run(args.images, args.size, args.steps, args.batch, work_dir, args.rounds)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    print(json.dumps(results, indent=2))
    print(common.format_table(rows_from(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
