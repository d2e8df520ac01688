"""The image ExampleGen on a small real folder: mixed sizes, PNG and JPEG, grayscale and RGB,
and deliberately broken files. Exact counts, reasons, shards and a deterministic split."""

from __future__ import annotations

import glob
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components.ml import features
from components.tfx_components.image_example_gen import executor, reader
from tests.components.helpers import IN_MEMORY, run_example_gen

GOOD_PER_CLASS = 12


def _image_bytes(size: tuple[int, int], mode: str, fmt: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    channels = {"L": (size[1], size[0]), "RGB": (size[1], size[0], 3)}[mode]
    image = Image.fromarray(rng.integers(0, 255, size=channels, dtype=np.uint8), mode=mode)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """cat/ and dog/: 12 valid images each (JPEG and PNG, 3 sizes, grayscale and RGB), plus 5
    broken files and one hidden file."""
    root = tmp_path_factory.mktemp("images")
    good = []
    for class_index, name in enumerate(("cat", "dog")):
        (root / name).mkdir()
        for i in range(GOOD_PER_CLASS):
            fmt, ext = ("PNG", ".png") if i % 3 == 0 else ("JPEG", ".jpg")
            size = ((40, 30), (64, 64), (17, 90))[i % 3]
            mode = "L" if i % 2 else "RGB"
            path = root / name / f"{name}_{i:02d}{ext}"
            path.write_bytes(_image_bytes(size, mode, fmt, seed=100 * class_index + i))
            good.append(f"{name}/{path.name}")
    jpeg = _image_bytes((64, 64), "RGB", "JPEG", seed=7)
    broken = {
        "cat/truncated.jpg": jpeg[: len(jpeg) // 2],
        "cat/empty.jpeg": b"",
        "dog/notes.jpg": b"this is not an image\n",
        "dog/really_png.jpg": _image_bytes((20, 20), "RGB", "PNG", seed=8),
        "dog/readme.txt": b"text",
    }
    for relative, data in broken.items():
        (root / relative).write_bytes(data)
    (root / "dog" / ".DS_Store").write_bytes(b"\x00\x01")
    return {"root": str(root), "good": sorted(good), "broken": broken}


def run_executor(out_dir, input_base, *, num_shards=3, max_rejected=0.0):
    return run_example_gen(
        executor.Executor,
        out_dir,
        input_base,
        "*/*",
        {executor.NUM_SHARDS_KEY: num_shards, executor.MAX_REJECTED_FRACTION_KEY: max_rejected},
        IN_MEMORY,
    )


def read_split(uri: str, split: str) -> list[tf.train.Example]:
    files = sorted(glob.glob(os.path.join(uri, f"Split-{split}", "*.gz")))
    return [
        tf.train.Example.FromString(record.numpy())
        for record in tf.data.TFRecordDataset(files, compression_type="GZIP")
    ]


def _value(example, key):
    feature = example.features.feature[key]
    return (feature.bytes_list.value or feature.int64_list.value)[0]


def test_every_file_is_written_or_rejected_with_its_reason(tmp_path, image_folder):
    examples = run_executor(tmp_path / "out", image_folder["root"], max_rejected=0.5)
    found = examples.get_int_custom_property("num_files_found")
    assert found == 2 * GOOD_PER_CLASS + len(image_folder["broken"])
    assert examples.get_int_custom_property("num_files_rejected") == len(image_folder["broken"])
    assert examples.get_int_custom_property("num_hidden_files_ignored") == 1
    counts = json.loads(examples.get_string_custom_property("split_example_counts"))
    train, eval_ = read_split(examples.uri, "train"), read_split(examples.uri, "eval")
    assert counts == {"train": len(train), "eval": len(eval_)}
    assert sum(counts.values()) == 2 * GOOD_PER_CLASS
    assert sorted(_value(e, "path").decode() for e in train + eval_) == image_folder["good"]
    assert json.loads(examples.get_string_custom_property("label_vocabulary")) == ["cat", "dog"]
    assert json.loads(examples.get_string_custom_property("class_example_counts")) == {
        "cat": GOOD_PER_CLASS,
        "dog": GOOD_PER_CLASS,
    }

    rejected = executor.read_rejected_files(
        examples.get_string_custom_property("rejected_files_uri")
    )
    reasons = {os.path.relpath(r.path, image_folder["root"]): r.reason for r in rejected}
    assert set(reasons) == set(image_folder["broken"])
    assert "does not decode" in reasons["cat/truncated.jpg"]
    assert "empty file" in reasons["cat/empty.jpeg"]
    assert "not an image" in reasons["dog/notes.jpg"]
    assert "content is PNG" in reasons["dog/really_png.jpg"]
    assert "unsupported extension '.txt'" in reasons["dog/readme.txt"]


def test_examples_carry_bytes_label_and_size(tmp_path, image_folder):
    examples = run_executor(tmp_path / "out", image_folder["root"], max_rejected=0.5)
    for example in read_split(examples.uri, "train") + read_split(examples.uri, "eval"):
        path = _value(example, features.IMAGE_PATH_KEY).decode()
        class_name = _value(example, features.IMAGE_LABEL_KEY).decode()
        assert path.startswith(class_name + "/")
        assert _value(example, features.IMAGE_LABEL_ID_KEY) == ["cat", "dog"].index(class_name)
        with open(os.path.join(image_folder["root"], path), "rb") as handle:
            assert _value(example, features.IMAGE_KEY) == handle.read()
        decoded = tf.io.decode_image(_value(example, features.IMAGE_KEY), channels=3)
        assert decoded.shape[0] == _value(example, features.IMAGE_HEIGHT_KEY)
        assert decoded.shape[1] == _value(example, features.IMAGE_WIDTH_KEY)


def test_shard_count_and_deterministic_split(tmp_path, image_folder):
    first = run_executor(tmp_path / "a", image_folder["root"], num_shards=3, max_rejected=0.5)
    second = run_executor(tmp_path / "b", image_folder["root"], num_shards=2, max_rejected=0.5)
    assert len(glob.glob(os.path.join(first.uri, "Split-train", "*.gz"))) == 3
    assert len(glob.glob(os.path.join(second.uri, "Split-eval", "*.gz"))) == 2
    # Shards are written under a temporary name and renamed: nothing partial is left behind.
    assert not glob.glob(os.path.join(first.uri, "*", "*.tmp-*"))
    for split in ("train", "eval"):
        paths = [
            sorted(_value(e, "path") for e in read_split(a.uri, split)) for a in (first, second)
        ]
        assert paths[0] == paths[1]
        assert paths[0] == sorted(
            p.encode()
            for p in image_folder["good"]
            if reader.split_index(p, [3, 1]) == ("train", "eval").index(split)
        )


def test_rejects_over_the_allowed_fraction_fail_and_list_the_files(tmp_path, image_folder):
    with pytest.raises(executor.TooManyRejectedFilesError) as error:
        run_executor(tmp_path / "out", image_folder["root"])
    message = str(error.value)
    assert f"{len(image_folder['broken'])} of {2 * GOOD_PER_CLASS + 5} image file(s)" in message
    for relative in image_folder["broken"]:
        assert relative in message


def test_a_folder_without_class_folders_is_a_clear_error(tmp_path):
    (tmp_path / "only").mkdir()
    with pytest.raises(ValueError, match="one sub-folder per class"):
        reader.list_class_names(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        reader.list_class_names(str(tmp_path / "missing"))
