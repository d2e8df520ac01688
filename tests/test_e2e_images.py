"""Image classification end to end, as a user runs it: `python pipeline/run_local.py --dataset
digits` in a fresh process (scikit-learn's digits written as JPEG files; the session's
`digits_run`, tests/conftest.py, also the DirectRunner reference of the Flink run), checked
through ML Metadata, and the pushed model classifying JPEG files read from disk with
pipeline.predict."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys

import pytest

from components.tfx_components.image_example_gen import reader
from pipeline.datasets import images as image_data
from pipeline.mlmd import connection, evaluation, records
from tests.docs import pages
from tests.pipeline_components import IMAGE_COMPONENTS
from tests.test_e2e_local import PROJECT_ROOT, explain, run_local, run_logs

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

COMPONENTS = list(IMAGE_COMPONENTS)


def test_every_image_becomes_an_example_and_the_model_is_blessed(digits_run):
    store = records.Store(connection.open_store(digits_run["metadata"]))
    (run,) = store.node_states_by_run().values()
    assert sorted(run) == sorted(COMPONENTS)
    assert all(state == "COMPLETE" for state in run.values()), run
    executions = {store.node_of(e): e.id for e in store.executions(store.run(None))}
    (examples,) = store.outputs_by_type(executions["ImageExampleGen"])["Examples"]
    # The folder's completion marker lies directly under the root: found, ignored and listed.
    assert records.custom_value(examples, "num_files_ignored") == 1
    assert records.custom_value(examples, "num_files_found") == image_data.DIGITS_COUNT + 1
    assert records.custom_value(examples, "num_files_rejected") == 0
    counts = json.loads(records.custom_value(examples, "split_example_counts"))
    assert sum(counts.values()) == image_data.DIGITS_COUNT
    vocabulary = json.loads(records.custom_value(examples, "label_vocabulary"))
    assert vocabulary == [str(digit) for digit in range(10)]
    # Transform writes the transform graph only (no examples): the Trainer reads ExampleGen's
    # shards (encoded bytes) through it.
    assert "Examples" not in store.outputs_by_type(executions["Transform"])
    trainer_inputs, _ = store.events(executions["Trainer"])
    assert examples.id in trainer_inputs
    outputs = store.outputs_by_type(executions["Evaluator"])
    (blessing,) = outputs["ModelBlessing"]
    assert records.custom_value(blessing, "blessed") == 1
    (evaluated,) = outputs["ModelEvaluation"]
    accuracy = evaluation.overall_metrics(evaluated.uri)["sparse_categorical_accuracy"]
    assert accuracy >= 0.9
    stdout = digits_run["result"].stdout
    assert "1797 image file(s) in 10 class folder(s)" in stdout
    assert "files rejected: 0" in stdout
    assert "blessed:       yes" in stdout
    # The project's classification EvalConfig over record batches (the run's log says so).
    text = run_logs(digits_run["metadata"])
    assert "Evaluator: batched evaluation over record batches" in text


def test_pushed_model_classifies_jpeg_files_from_disk(digits_run, tmp_path):
    root = digits_run["data_root"]
    eval_files = [
        os.path.join(root, str(digit), name)
        for digit in range(10)
        for name in sorted(os.listdir(os.path.join(root, str(digit))))
        if reader.split_index(f"{digit}/{name}", [75, 25]) == 1
    ]
    sample = random.Random(0).sample(eval_files, 60)
    corrupt = tmp_path / "broken.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.predict",
            "--model",
            digits_run["serving"],
            *sample,
            str(corrupt),
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=300,
        check=False,
    )
    # The broken file is named and fails the command; every other file is still classified.
    assert result.returncode == 2, explain(result)
    assert f"{corrupt}: does not decode" in result.stderr or f"{corrupt}: not an image" in (
        result.stderr
    )
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert [path for path, _, _ in lines] == sample
    correct = sum(name == os.path.basename(os.path.dirname(path)) for path, name, _ in lines)
    assert correct / len(lines) >= 0.9, result.stdout
    assert all(0.0 < float(probability) <= 1.0 for _, _, probability in lines)


def test_predict_as_images_md_shows_it(digits_run):
    """images.md's predict command in the digits run's sandbox: a.jpg and b.png, two held-out
    digits (the second converted to PNG), each classified on one line."""
    from PIL import Image

    sandbox, root = digits_run["sandbox"], digits_run["data_root"]
    held_out = [
        (digit, os.path.join(root, str(digit), name))
        for digit in (3, 7)
        for name in sorted(os.listdir(os.path.join(root, str(digit))))
        if reader.split_index(f"{digit}/{name}", [75, 25]) == 1
    ]
    (three, jpeg), (seven, other) = held_out[0], next(h for h in held_out if h[0] == 7)
    with open(jpeg, "rb") as source:
        (sandbox.root / "a.jpg").write_bytes(source.read())
    Image.open(other).save(sandbox.root / "b.png")
    result = sandbox.run(pages.command("docs/images.md", "a.jpg b.png"), timeout=300)
    assert result.returncode == 0, explain(result)
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert [path for path, _, _ in lines] == ["a.jpg", "b.png"]
    assert [name for _, name, _ in lines] == [str(three), str(seven)]
    assert all(0.0 < float(probability) <= 1.0 for _, _, probability in lines)


def test_corrupt_image_stops_the_run_at_ingestion_and_is_listed(tmp_path):
    """The README's `--images DIR` on a folder with a truncated JPEG."""
    images = tmp_path / "shapes"
    image_data.write_synthetic(str(images), images=40, size=48, classes=2, seed=3)
    (images / "class_01" / "cut.jpg").write_bytes(
        (images / "class_01" / "img_0000001.jpg").read_bytes()[:300]
    )
    sandbox = pages.Sandbox(tmp_path / "sandbox")
    result = sandbox.run(pages.command("README.md", "--images DIR"), {"DIR": str(images)})
    assert result.returncode == 1, explain(result)
    assert "ImageExampleGen failed" in result.stderr
    assert "1 of 41 image file(s) rejected" in result.stderr
    assert "class_01/cut.jpg: does not decode" in result.stderr
    assert "--max_rejected_fraction" in result.stderr
    # The listing the message names outlives the failed execution (whose outputs TFX removed).
    listing = re.search(r"all are listed in (\S+\.jsonl):", result.stderr)
    assert listing, result.stderr
    with open(listing.group(1)) as handle:
        assert "class_01/cut.jpg" in handle.read()


def test_image_folder_errors_name_the_flag(tmp_path):
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.jpg").write_bytes(b"")
    result = run_local("--images", str(tmp_path / "flat"), "--output_root", str(tmp_path))
    assert result.returncode == 2
    assert "one sub-folder per class" in result.stderr and "(--images)" in result.stderr
    result = run_local("--images", str(tmp_path / "nope"), "--output_root", str(tmp_path))
    assert result.returncode == 2 and "does not exist (--images)" in result.stderr
    result = run_local("--images", str(tmp_path), "--data", str(tmp_path), "--label", "x")
    assert result.returncode == 2 and "--images and --data are exclusive" in result.stderr
