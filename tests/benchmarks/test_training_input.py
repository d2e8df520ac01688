"""The training-input benchmark and the GPU check, at a tiny size on the CPU: the same code a GPU
run executes (ExampleGen's shards and the transform graph from the project's ImageExampleGen ->
Transform, make_dataset, a model under MirroredStrategy, with and without XLA)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import gpu_check, image_ingestion, training_input

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    work = tmp_path_factory.mktemp("training_input")
    data = image_ingestion.synth_images(str(work), 40)
    files, graph = training_input.make_shards(data, str(work / "shards"), 32)
    return {"data": data, "files": files, "graph": graph}


def test_our_input_and_the_jpeg_folder_give_the_same_images(shards):
    """Same files, same decode -> resize -> normalize: the pipelines the benchmark compares
    produce the same pixels (ours in its split and shard order: compared as sets of images)
    when the folder is decoded as ours decodes; the plain folder reference decodes the 256 px
    JPEGs at full size (ours at 1/8 for 32 px), so its pixels differ."""

    def images(dataset):
        return sorted(
            np.round(image, 5).tobytes()
            for batch, _ in dataset
            for image in (batch["image_xf"] if isinstance(batch, dict) else batch).numpy()
        )

    ours = images(training_input.ours(shards["files"], shards["graph"], 8, per_element=False))
    per_element = images(training_input.ours(shards["files"], shards["graph"], 8, per_element=True))
    scaled = images(training_input.jpeg_folder(shards["data"], 32, 8, scaled=True))
    plain = images(training_input.jpeg_folder(shards["data"], 32, 8))
    assert len(ours) == len(plain) == 40
    assert ours == per_element == scaled
    assert not set(ours) & set(plain)


def test_input_rates_and_input_bound_ratio_are_measured(shards):
    rates = training_input.input_rates(
        shards["files"], shards["graph"], shards["data"], 32, 8, repeats=2
    )
    assert set(rates) == {
        "ours_on_batches",
        "ours_per_element",
        "jpeg_folder",
        "jpeg_folder_scaled",
    }
    for measured in rates.values():
        assert len(measured["rate"]) == len(measured["cpu_ms"]) == 2
        assert min(measured["rate"]) > 0 and min(measured["cpu_ms"]) > 0
    measured = training_input.input_bound(shards["files"], shards["graph"], "small_cnn", 8, 3, 2)
    assert measured["ratio"] > 0 and measured["images_per_s"] > 0 and measured["cpu_ratio"] > 0
    assert [len(ms) for ms in measured["round_step_ms"].values()] == [2, 2]
    assert measured["real_step_ms"] == pytest.approx(min(measured["round_step_ms"]["real"]), abs=1)
    # The Trainer's choice when the decoded images fit: the first pass fills the cache.
    cached = training_input.input_bound(
        shards["files"], shards["graph"], "small_cnn", 8, 3, 1, cache_decoded=True
    )
    assert cached["ratio"] > 0 and cached["images_per_s"] > 0


def test_the_gpu_check_runs_on_the_cpu_at_a_tiny_size(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    argv = ["--images", "24", "--size", "32", "--steps", "2", "--batch", "4", "--rounds", "1"]
    assert gpu_check.main([*argv, "--work_dir", str(tmp_path), "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert set(results["runs"]) == {"no_xla", "xla"}
    for measured in results["runs"].values():
        assert measured["images_per_s"] > 0 and measured["ratio"] > 0
        assert measured["gpu_utilisation"] == "not measured"  # no GPU here
    assert results["replicas"] >= 1 and results["policy"] == "float32"
    printed = capsys.readouterr().out
    assert "MobileNetV2 32px" in printed and "input-bound ratio" in printed


def test_gpu_utilisation_summary():
    sampler = gpu_check.GpuSampler()
    assert sampler.summary() == "not measured"
    sampler.samples = [40.0, 80.0]
    assert sampler.summary() == "mean 60 %, max 80 %"
