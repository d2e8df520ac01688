"""Plain functions behind the image ExampleGen: list class folders, validate one image file,
encode it as a tf.Example and pick its split. The Beam executor wires them together; tests call
them directly.

Layout read: <input_base>/<class name>/<file>.{jpg,jpeg,png} (extensions case-insensitive).
Every regular file in a class folder is either written as an example or rejected with a reason;
hidden files (names starting with '.', e.g. .DS_Store) are counted and reported as ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os

import tensorflow as tf
from PIL import Image

from components.ml import features
from components.records import example_wire

# Extension (lower case) -> the format PIL must find in the bytes.
EXTENSION_FORMATS = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG"}


@dataclasses.dataclass(frozen=True)
class RejectedFile:
    path: str
    reason: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class ImageFacts:
    width: int
    height: int
    format: str
    mode: str


def list_class_names(input_base: str) -> list[str]:
    """Sorted names of the class sub-folders (hidden ones excluded): the label vocabulary; a
    class's id is its index here, stable for a given set of folders."""
    if not tf.io.gfile.isdir(input_base):
        raise FileNotFoundError(f"image directory {input_base!r} does not exist")
    names = sorted(
        name.rstrip("/")
        for name in tf.io.gfile.listdir(input_base)
        if not name.startswith(".") and tf.io.gfile.isdir(os.path.join(input_base, name))
    )
    if len(names) < 2:
        raise ValueError(
            f"{input_base!r} must hold one sub-folder per class (at least 2), found "
            f"{names or 'none'}"
        )
    return names


def relative_path(class_name: str, path: str) -> str:
    """'class/file.jpg', the path of a listed file relative to the input base (list_class_files
    lists the files directly inside each class folder)."""
    return f"{class_name}/{os.path.basename(path)}"


def list_class_files(input_base: str, class_name: str) -> tuple[list[str], list[str]]:
    """(files, hidden files) in one class folder, sorted; sub-folders are not descended into."""
    folder = os.path.join(input_base, class_name)
    files: list[str] = []
    hidden: list[str] = []
    for name in sorted(tf.io.gfile.listdir(folder)):
        path = os.path.join(folder, name.rstrip("/"))
        if tf.io.gfile.isdir(path):
            continue
        (hidden if name.startswith(".") else files).append(path)
    return files, hidden


def validate_image(path: str, data: bytes) -> ImageFacts:
    """Fully decodes the image (PIL) and checks its format against its extension.

    Raises ValueError with the reason: empty file, unsupported extension, not an image,
    extension that lies about the content, truncated or corrupt data.
    """
    extension = os.path.splitext(path)[1].lower()
    expected = EXTENSION_FORMATS.get(extension)
    if expected is None:
        raise ValueError(
            f"unsupported extension {extension or '(none)'!r} "
            f"(expected one of {', '.join(sorted(EXTENSION_FORMATS))})"
        )
    if not data:
        raise ValueError("empty file (0 bytes)")
    try:
        with Image.open(io.BytesIO(data)) as image:
            found = image.format
            if found != expected:
                raise ValueError(f"extension {extension!r} but the content is {found}")
            facts = ImageFacts(
                width=image.width, height=image.height, format=found, mode=image.mode
            )
            if found == "JPEG":
                # Decode at 1/8 scale: every entropy-coded byte is still read (truncation and
                # corrupt data are caught), without the full-size inverse DCT.
                image.draft(image.mode, (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()
    except ValueError:
        raise
    except Image.UnidentifiedImageError:
        raise ValueError("not an image (no JPEG or PNG header)") from None
    except (OSError, SyntaxError, Image.DecompressionBombError) as error:
        raise ValueError(f"does not decode: {error}") from None
    if facts.width < 1 or facts.height < 1:
        raise ValueError(f"empty image ({facts.width}x{facts.height})")
    return facts


def split_index(relative_path: str, buckets: list[int]) -> int:
    """Deterministic split by hash of the path relative to the input base ('class/file.jpg'),
    so the split does not change when the folder moves."""
    digest = hashlib.md5(relative_path.encode("utf-8")).digest()
    bucket = int.from_bytes(digest[:8], "little") % sum(buckets)
    for index, size in enumerate(buckets):
        if bucket < size:
            return index
        bucket -= size
    raise AssertionError("unreachable")


def shard_index(relative_path: str, shards: int) -> int:
    """Output shard of a file within its split, from another part of the same path hash."""
    digest = hashlib.md5(relative_path.encode("utf-8")).digest()
    return int.from_bytes(digest[8:16], "little") % shards


def to_example(
    data: bytes, relative_path: str, class_name: str, label: int, facts: ImageFacts
) -> bytes:
    """The serialized tf.Example of one image file (written in the wire format directly: see
    components.records.example_wire)."""
    return example_wire.example(
        {
            features.IMAGE_KEY: example_wire.bytes_feature(data),
            features.IMAGE_LABEL_KEY: example_wire.bytes_feature(class_name.encode("utf-8")),
            features.IMAGE_LABEL_ID_KEY: example_wire.int64_feature(label),
            features.IMAGE_PATH_KEY: example_wire.bytes_feature(relative_path.encode("utf-8")),
            features.IMAGE_HEIGHT_KEY: example_wire.int64_feature(facts.height),
            features.IMAGE_WIDTH_KEY: example_wire.int64_feature(facts.width),
        }
    )
