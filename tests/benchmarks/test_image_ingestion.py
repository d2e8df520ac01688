"""The image benchmark's arithmetic and its tf.data baseline on a few real JPEGs."""

from __future__ import annotations

import glob
import os
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from benchmarks import image_ingestion
from pipeline.datasets import images as image_data


def test_steady_state_is_the_line_through_both_runs():
    # 12 s of start-up, then 400 images/s.
    rate, fixed = image_ingestion.steady_state(12 + 5_000 / 400, 12 + 20_000 / 400, 5_000, 20_000)
    assert rate == pytest.approx(400)
    assert fixed == pytest.approx(12)
    # A larger run that was not slower (load from other jobs) has no such line.
    assert image_ingestion.steady_state(30, 29, 5_000, 20_000) is None
    assert image_ingestion.steady_state(30, 30, 5_000, 20_000) is None


def measured(ours_small, ours_large, base_small, base_large):
    def run(seconds, rss, cores):
        return {
            "wall_s": seconds,
            "process_s": seconds,
            "peak_rss": rss,
            "cpu_s": seconds * cores,
            "seconds": {},
            "examples": 0,
        }

    return {
        ("pipeline", 1_000): run(ours_small, 2**30, 1.25),
        ("pipeline", 4_000): run(ours_large, 2**30, 1.25),
        ("baseline", 1_000): run(base_small, 2**29, 1.75),
        ("baseline", 4_000): run(base_large, 2**29, 1.75),
    }


def test_the_target_is_checked_on_further_images_and_the_whole_run_is_reported():
    # Ours: 20 s fixed + 2 ms/image; baseline: 4 s fixed + 1 ms/image.
    rows = image_ingestion.rows_from(measured(22, 28, 5, 8), 4_000, 96, 1)
    steady, whole, cpu, memory = rows
    assert steady.ours == pytest.approx(500) and steady.reference == pytest.approx(1_000)
    assert steady.ratio == pytest.approx(0.5) and steady.passed is False
    assert "fixed cost ours 20 s, tf.data baseline 4 s" in steady.note
    assert whole.ratio == pytest.approx(8 / 28) and whole.target is None
    assert "fixed cost ours 20 s" in whole.note
    assert memory.ratio == pytest.approx(1.0) and memory.passed is True
    # CPU per image over the whole run, reported beside the wall time: 28 s x 1.25 cores.
    assert cpu.ours == pytest.approx(1000 * 35 / 4_000) and cpu.target is None
    assert cpu.reference == pytest.approx(1000 * 14 / 4_000)
    assert "1.25 cores busy" in cpu.note and "1.75 cores busy" in cpu.note
    assert "ours' CPU" not in cpu.note  # not recorded in these runs
    # 2 s fixed + 1.5 ms/image against 6 s + 1.5 ms: the same rate, the target is met.
    met, *_ = image_ingestion.rows_from(measured(3.5, 8, 7.5, 12), 4_000, 96, 1)
    assert met.ratio == pytest.approx(1.0) and met.passed is True
    # The baseline's larger run faster than its smaller one: the line is left out, not made up.
    whole, cpu, memory = image_ingestion.rows_from(measured(22, 28, 8, 7), 4_000, 96, 1)
    assert whole.target is None and memory.passed is True and cpu.target is None
    assert "fixed costs not measured" in whole.note


def test_bytes_on_disk_per_image_against_the_source_files():
    runs = measured(22, 28, 5, 8)
    runs[("pipeline", 4_000)].update(
        trainer_input_bytes=4_000 * 21_000, source_bytes=4_000 * 20_000
    )
    *_, size_row, memory = image_ingestion.rows_from(runs, 4_000, 224, 1)
    assert size_row.ratio == pytest.approx(1.05) and size_row.passed is True
    assert "588 KiB" in size_row.note  # 224 x 224 x 3 float32


def test_repeats_keep_the_fastest_run_and_the_highest_memory():
    first = {"wall_s": 30.0, "peak_rss": 5, "seconds": {"Transform": 20}}
    second = {"wall_s": 25.0, "peak_rss": 3, "seconds": {"Transform": 16}}
    kept = image_ingestion.fastest(image_ingestion.fastest(None, first), second)
    assert kept == {"wall_s": 25.0, "peak_rss": 5, "seconds": {"Transform": 16}}
    assert image_ingestion.fastest(second, first)["wall_s"] == 25.0


def test_baseline_writes_decoded_resized_scaled_pixels_for_every_file(tmp_path):
    data = image_data.write_synthetic(str(tmp_path / "jpeg"), 12, 40, 3, seed=1)
    out = tmp_path / "out"
    argv = ["--data", data, "--out", str(out), "--size", "8"]
    assert image_ingestion.baseline_main(argv) == 0
    [path] = glob.glob(str(out / "*.tfrecord"))
    examples = [tf.train.Example.FromString(r) for r in tf.compat.v1.io.tf_record_iterator(path)]
    assert len(examples) == 12
    classes = sorted(d for d in os.listdir(data) if os.path.isdir(os.path.join(data, d)))
    expected = {}
    for label, name in enumerate(classes):
        for file in glob.glob(os.path.join(data, name, "*.jpg")):
            image = tf.io.decode_jpeg(tf.io.read_file(file), channels=3)
            pixels = (tf.image.resize(image, [8, 8]) / 255.0).numpy().ravel()
            expected[pixels.tobytes()] = label
    for example in examples:
        pixels = np.array(example.features.feature["image_xf"].float_list.value, np.float32)
        assert pixels.shape == (8 * 8 * 3,)
        assert expected[pixels.tobytes()] == example.features.feature["label"].int64_list.value[0]
    assert Image.open(glob.glob(os.path.join(data, "*", "*.jpg"))[0]).size == (40, 40)


def test_each_measured_run_starts_from_an_empty_output_directory(tmp_path):
    from benchmarks import common

    out = tmp_path / "pipeline-20000"
    (out / "Transform" / "1").mkdir(parents=True)
    (out / "Transform" / "1" / "data.tfrecord").write_bytes(b"x" * 1000)
    assert common.fresh_output(str(out)) == str(out)
    assert not out.exists()
    assert common.fresh_output(str(tmp_path / "never-made")) == str(tmp_path / "never-made")


def test_a_measured_run_leaves_no_outputs_unless_asked_and_counts_its_cpu(tmp_path):
    data = image_data.write_synthetic(str(tmp_path / "jpeg"), 6, 40, 2, seed=2)
    work = str(tmp_path / "work")
    os.makedirs(work)
    result = image_ingestion.measure("baseline", data, work, "6", 8, 1)
    assert result["examples"] == 6 and result["cpu_s"] > 0
    # Timed to the work done (TensorFlow imported, files written), the process's exit not.
    assert 1 < result["wall_s"] <= result["process_s"]
    # The pixels are gone once measured (disk and page cache); the run's log stays.
    assert sorted(os.listdir(work)) == ["baseline-6.log"]
    image_ingestion.measure("baseline", data, work, "6", 8, 1, keep_outputs=True)
    assert os.listdir(os.path.join(work, "baseline-6")) == ["images.tfrecord"]


def test_cpu_per_component_and_the_rest_of_the_process():
    result = {"cpu_s": 60.0, "cpu_seconds": {"ImageExampleGen": 17.6, "Transform": 34.9}}
    assert image_ingestion._component_cpu(result) == (
        "; ours' CPU: ImageExampleGen 18 s, Transform 35 s, the rest (start-up, imports, exit) 8 s"
    )


def test_an_executor_class_s_cpu_is_recorded_while_the_context_is_active():
    class Spinning:
        def Do(self, seconds):  # noqa: N802 (TFX's executor API)
            end = time.process_time() + seconds
            while time.process_time() < end:
                pass
            return "done"

    cpu: dict = {}
    with image_ingestion.cpu_seconds_of(Spinning, "Spinning", cpu):
        assert Spinning().Do(0.3) == "done"
    assert 0.3 <= cpu["Spinning"] < 1.0
    Spinning().Do(0.0)
    assert Spinning.Do.__name__ == "Do"  # restored
