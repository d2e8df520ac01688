"""The image ExampleGen on small real folders: mixed sizes, PNG and JPEG, grayscale and RGB,
nested class folders, and deliberately bad input (broken, unreadable and misnamed files,
symlink loops, a class with only invalid files). Exact counts, reasons, listings that survive
a failed run, shards and a deterministic split."""

from __future__ import annotations

import glob
import io
import json
import os
import shutil
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components.ml import features
from components.tfx_components.image_example_gen import driver, executor, reader
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
    """cat/ and dog/: 12 valid images each (JPEG and PNG, 3 sizes, grayscale and RGB), one more
    in a nested folder of cat/, a PNG named .jpg (kept: accepted by content), 6 broken files,
    a hidden file, a file directly under the root, and a symlink loop."""
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
    nested = root / "cat" / "indoor" / "sofa"
    nested.mkdir(parents=True)
    (nested / "cat_nested.jpeg").write_bytes(_image_bytes((30, 30), "RGB", "JPEG", seed=50))
    good.append("cat/indoor/sofa/cat_nested.jpeg")
    (root / "dog" / "really_png.jpg").write_bytes(_image_bytes((20, 20), "RGB", "PNG", seed=8))
    good.append("dog/really_png.jpg")
    # A link back to an ancestor: followed naively, the walk never ends.
    os.symlink(root / "cat", nested / "loop")
    jpeg = _image_bytes((64, 64), "RGB", "JPEG", seed=7)
    broken = {
        "cat/truncated.jpg": jpeg[: len(jpeg) // 2],
        "cat/empty.jpeg": b"",
        "dog/notes.jpg": b"this is not an image\n",
        "dog/readme.txt": b"text",
        "dog/anim.png": _image_bytes((8, 8), "RGB", "GIF", seed=9),
    }
    for relative, data in broken.items():
        (root / relative).write_bytes(data)
    os.symlink(root / "missing.jpg", root / "dog" / "dangling.jpg")
    broken["dog/dangling.jpg"] = b""
    (root / "dog" / ".DS_Store").write_bytes(b"\x00\x01")
    (root / "labels.csv").write_bytes(b"not read\n")
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


def test_every_file_is_written_rejected_or_ignored(tmp_path, image_folder):
    examples = run_executor(tmp_path / "out", image_folder["root"], max_rejected=0.5)
    found = examples.get_int_custom_property("num_files_found")
    good, broken = image_folder["good"], image_folder["broken"]
    # 2 ignored: the hidden file and the file directly under the root.
    assert found == len(good) + len(broken) + 2
    assert examples.get_int_custom_property("num_files_rejected") == len(broken)
    assert examples.get_int_custom_property("num_files_ignored") == 2
    assert examples.get_int_custom_property("num_hidden_files_ignored") == 1
    assert examples.get_int_custom_property("num_root_files_ignored") == 1
    assert examples.get_int_custom_property("num_extension_differs") == 1
    assert examples.get_int_custom_property("num_folders_skipped") == 1
    counts = json.loads(examples.get_string_custom_property("split_example_counts"))
    train, eval_ = read_split(examples.uri, "train"), read_split(examples.uri, "eval")
    assert counts == {"train": len(train), "eval": len(eval_)}
    assert sum(counts.values()) == len(good)
    assert sorted(_value(e, "path").decode() for e in train + eval_) == good
    assert json.loads(examples.get_string_custom_property("label_vocabulary")) == ["cat", "dog"]
    assert json.loads(examples.get_string_custom_property("class_example_counts")) == {
        "cat": GOOD_PER_CLASS + 1,
        "dog": GOOD_PER_CLASS + 1,
    }

    root = image_folder["root"]

    def listed(key):
        items = executor.read_listing(examples.get_string_custom_property(key))
        return {os.path.relpath(item.path, root): item.reason for item in items}

    reasons = listed("rejected_files_uri")
    assert set(reasons) == set(broken)
    assert "does not decode" in reasons["cat/truncated.jpg"]
    assert "empty file" in reasons["cat/empty.jpeg"]
    assert "not an image" in reasons["dog/notes.jpg"]
    assert "not an image" in reasons["dog/readme.txt"]
    assert "the content is GIF" in reasons["dog/anim.png"]
    assert "unreadable" in reasons["dog/dangling.jpg"]
    ignored = listed("ignored_files_uri")
    assert set(ignored) == {"dog/.DS_Store", "labels.csv"}
    assert "in no class folder" in ignored["labels.csv"]
    differs = listed("extension_differs_uri")
    assert differs == {"dog/really_png.jpg": "extension differs: '.jpg' but the content is PNG"}
    skipped = listed("skipped_folders_uri")
    assert list(skipped) == ["cat/indoor/sofa/loop"]
    assert "symlink loop" in skipped["cat/indoor/sofa/loop"]


def test_nested_files_belong_to_the_top_level_class(tmp_path, image_folder):
    examples = run_executor(tmp_path / "out", image_folder["root"], max_rejected=0.5)
    nested = [
        e
        for e in read_split(examples.uri, "train") + read_split(examples.uri, "eval")
        if _value(e, features.IMAGE_PATH_KEY) == b"cat/indoor/sofa/cat_nested.jpeg"
    ]
    assert len(nested) == 1
    assert _value(nested[0], features.IMAGE_LABEL_KEY) == b"cat"
    assert _value(nested[0], features.IMAGE_LABEL_ID_KEY) == 0


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


def test_rejects_over_the_allowed_fraction_fail_and_the_listing_survives(tmp_path, image_folder):
    out = tmp_path / "out"
    with pytest.raises(executor.TooManyRejectedFilesError) as error:
        run_executor(out, image_folder["root"])
    message = str(error.value)
    # Of the files read as images: the 2 ignored files are not candidates.
    candidates = len(image_folder["good"]) + len(image_folder["broken"])
    assert f"{len(image_folder['broken'])} of {candidates} image file(s)" in message
    assert "--max_rejected_fraction" in message
    for relative in image_folder["broken"]:
        assert relative in message
    # TFX removes a failed execution's output folder; the listing is beside it, not inside.
    shutil.rmtree(out)
    listing = os.path.join(f"{out}-{executor.REJECTED_DIR}", "rejected.jsonl")
    assert listing in message
    rejected = executor.read_listing(listing)
    assert sorted(os.path.relpath(r.path, image_folder["root"]) for r in rejected) == sorted(
        image_folder["broken"]
    )


def _folder(root, files: dict[str, bytes]) -> str:
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return str(root)


def test_a_class_with_only_invalid_files_stops_the_run_naming_it(tmp_path):
    good = _image_bytes((16, 16), "RGB", "JPEG", seed=1)
    root = _folder(
        tmp_path / "images",
        {
            "cat/a.jpg": good,
            "cat/b.jpg": good,
            "dog/broken.jpg": good[:20],
            "dog/nested/text.png": b"text",
        },
    )
    with pytest.raises(executor.ClassWithoutImagesError) as error:
        run_executor(tmp_path / "out", root, max_rejected=0.9)
    message = str(error.value)
    assert "'dog' (2 file(s), all rejected)" in message
    assert "dog/broken.jpg" in message and "dog/nested/text.png" in message
    assert "'cat'" not in message


def test_unreadable_files_are_rejected_with_the_reason(tmp_path):
    good = _image_bytes((16, 16), "RGB", "JPEG", seed=1)
    root = _folder(
        tmp_path / "images",
        {"cat/a.jpg": good, "cat/locked.jpg": good, "dog/b.jpg": good},
    )
    locked = os.path.join(root, "cat", "locked.jpg")
    os.chmod(locked, 0)
    real_read = executor._read_bytes

    def read_as_unprivileged(path):
        # Root reads a mode-000 file anyway: refuse it as the kernel refuses any other user.
        if path == locked:
            raise PermissionError(13, "Permission denied", path)
        return real_read(path)

    try:
        with mock.patch.object(executor, "_read_bytes", side_effect=read_as_unprivileged):
            examples = run_executor(tmp_path / "out", root, max_rejected=0.5)
    finally:
        os.chmod(locked, 0o644)
    rejected = executor.read_listing(examples.get_string_custom_property("rejected_files_uri"))
    assert [(r.path, r.reason) for r in rejected] == [(locked, "unreadable: Permission denied")]
    assert examples.get_int_custom_property("num_files_found") == 3


def test_listing_follows_links_once_and_reports_unreadable_folders(tmp_path):
    good = _image_bytes((16, 16), "RGB", "JPEG", seed=1)
    root = _folder(tmp_path / "images", {"cat/a.jpg": good, "shared/s.jpg": good})
    os.symlink(os.path.join(root, "shared"), os.path.join(root, "cat", "one"))
    os.symlink(os.path.join(root, "shared"), os.path.join(root, "cat", "two"))
    os.symlink(os.path.join(root, "cat"), os.path.join(root, "cat", "self"))
    listing = reader.list_class_files(root, "cat")
    assert [f.relative for f in listing.files] == ["cat/a.jpg", "cat/one/s.jpg"]
    assert {os.path.basename(s.path): s.reason.split(" (")[0] for s in listing.skipped} == {
        "self": "symlink loop",
        "two": "link to a folder already listed",
    }
    real_listdir = tf.io.gfile.listdir
    blocked = os.path.join(root, "cat", "one")

    def listdir(path):
        if path == blocked:
            raise tf.errors.PermissionDeniedError(None, None, "permission denied")
        return real_listdir(path)

    with mock.patch.object(tf.io.gfile, "listdir", side_effect=listdir):
        listing = reader.list_class_files(root, "cat")
    assert [(r.path, r.reason) for r in listing.rejected] == [
        (blocked, "unreadable folder: permission denied")
    ]


def test_content_decides_not_the_extension():
    png = _image_bytes((8, 8), "RGB", "PNG", seed=2)
    facts = reader.validate_image("x/photo.jpeg", png)
    assert (facts.format, facts.extension_differs) == ("PNG", True)
    assert not reader.validate_image("x/photo.PNG", png).extension_differs
    assert reader.validate_image("x/no_extension", png).extension_differs
    with pytest.raises(ValueError, match="not a JPEG or PNG"):
        reader.validate_image("x/a.png", _image_bytes((8, 8), "RGB", "BMP", seed=2))


def test_the_driver_fingerprints_nested_files(tmp_path):
    good = _image_bytes((16, 16), "RGB", "JPEG", seed=1)
    root = _folder(tmp_path / "images", {"cat/a.jpg": good, "dog/deep/er/b.jpg": good})
    before = driver.tree_fingerprint(root)
    assert "num_files:2" in before
    (tmp_path / "images" / "dog" / "deep" / "er" / "b.jpg").write_bytes(good + b"\0")
    assert driver.tree_fingerprint(root) != before


def test_a_folder_without_class_folders_is_a_clear_error(tmp_path):
    (tmp_path / "only").mkdir()
    with pytest.raises(ValueError, match="one sub-folder per class"):
        reader.list_class_names(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        reader.list_class_names(str(tmp_path / "missing"))
