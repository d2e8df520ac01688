"""Plain functions behind the image ExampleGen: list class folders, validate one image file,
encode it as a tf.Example and pick its split. The Beam executor wires them together; tests call
them directly.

Layout read: <input_base>/<class name>/... (class folders walked recursively; a file in a nested
folder belongs to its top-level class). A file is accepted by its content, not its name: bytes
that decode as JPEG or PNG are an image whatever the extension (a PNG named .jpg is kept and
listed as "extension differs"). Every file found is exactly one of: written, rejected (with a
reason) or ignored (hidden files such as .DS_Store, and files directly under the root, which
belong to no class). Folders a walk must not enter (symlink loops, links to a folder already
walked) are listed as skipped; folders that cannot be listed are rejected.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import posixpath
from typing import NamedTuple

import tensorflow as tf
from PIL import Image

from components.ml import features
from components.records import example_wire

# Formats accepted (PIL's names), and the extensions (lower case) that name each.
ACCEPTED_FORMATS = ("JPEG", "PNG")
EXTENSION_FORMATS = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG"}


@dataclasses.dataclass(frozen=True)
class ListedPath:
    """A path with the reason it is listed (rejected, ignored, skipped, extension differs)."""

    path: str
    reason: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


# The rejected-files listing's rows (kept under its historical name).
RejectedFile = ListedPath


class ClassFile(NamedTuple):
    """One file found in a class folder: its path, its path relative to the input base
    ('class/sub/file.jpg', what the split hashes and the example records), class and label."""

    path: str
    relative: str
    class_name: str
    label: int


@dataclasses.dataclass(frozen=True)
class ClassListing:
    """What a recursive walk of one class folder found."""

    files: list[ClassFile]
    ignored: list[ListedPath]  # hidden files: counted with the files found
    skipped: list[ListedPath]  # folders not entered (symlink loops, duplicates): not files
    rejected: list[ListedPath]  # folders that could not be listed: counted with the found


@dataclasses.dataclass(frozen=True)
class ImageFacts:
    width: int
    height: int
    format: str
    mode: str
    # The extension does not name the format found in the bytes (kept, listed).
    extension_differs: bool = False


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


def list_root_files(input_base: str) -> list[ListedPath]:
    """Files directly under the input base: they belong to no class and are ignored (listed)."""
    ignored = []
    for name in sorted(tf.io.gfile.listdir(input_base)):
        path = os.path.join(input_base, name.rstrip("/"))
        if not tf.io.gfile.isdir(path):
            ignored.append(ListedPath(path, "directly under the image root: in no class folder"))
    return ignored


def relative_path(input_base: str, path: str) -> str:
    """'class/sub/file.jpg': the path relative to the input base, '/'-separated."""
    base = input_base.rstrip("/") + "/"
    if not path.startswith(base):
        raise ValueError(f"{path!r} is not under {input_base!r}")
    return path[len(base) :].replace(os.sep, "/")


def list_class_files(input_base: str, class_name: str, label: int = 0) -> ClassListing:
    """Every file under one class folder, recursively, in sorted path order.

    Local folders follow symbolic links, but never into a folder already entered (a loop, or a
    second link to the same folder: its files would be counted twice); remote file systems
    (gs://, ...) have no links."""
    files: list[ClassFile] = []
    ignored: list[ListedPath] = []
    skipped: list[ListedPath] = []
    rejected: list[ListedPath] = []
    local = "://" not in input_base
    entered: set[str] = set()

    def walk(folder: str) -> None:
        if local:
            real = os.path.realpath(folder)
            if real in entered:
                loop = any(real == os.path.realpath(a) for a in _ancestors(folder, input_base))
                reason = "symlink loop" if loop else "link to a folder already listed"
                skipped.append(ListedPath(folder, f"{reason} ({real}): not entered"))
                return
            entered.add(real)
        try:
            names = sorted(name.rstrip("/") for name in tf.io.gfile.listdir(folder))
        except (OSError, tf.errors.OpError) as error:
            rejected.append(ListedPath(folder, f"unreadable folder: {_error_text(error)}"))
            return
        for name in names:
            path = os.path.join(folder, name)
            is_dir = os.path.isdir(path) if local else tf.io.gfile.isdir(path)
            if name.startswith("."):
                if is_dir:
                    skipped.append(ListedPath(path, "hidden folder: not entered"))
                else:
                    ignored.append(ListedPath(path, "hidden file"))
            elif is_dir:
                walk(path)
            else:
                relative = relative_path(input_base, path)
                files.append(ClassFile(path, relative, class_name, label))

    walk(os.path.join(input_base, class_name))
    return ClassListing(sorted(files), ignored, skipped, rejected)


def _ancestors(folder: str, input_base: str) -> list[str]:
    parents = []
    current = os.path.dirname(folder)
    while len(current) >= len(input_base.rstrip("/")) and current != os.path.dirname(current):
        parents.append(current)
        current = os.path.dirname(current)
    return parents


def _error_text(error: Exception) -> str:
    return getattr(error, "message", None) or str(error)


def validate_image(path: str, data: bytes) -> ImageFacts:
    """Decodes the image once (PIL; JPEG at 1/8 scale, which still reads every entropy-coded
    byte) and identifies its format by the bytes, not the name.

    Raises ValueError with the reason: empty file, not an image, an image format other than
    JPEG or PNG, truncated or corrupt data. A JPEG or PNG under another extension is valid
    (ImageFacts.extension_differs)."""
    if not data:
        raise ValueError("empty file (0 bytes)")
    extension = posixpath.splitext(path)[1].lower()
    try:
        with Image.open(io.BytesIO(data)) as image:
            found = image.format
            if found not in ACCEPTED_FORMATS:
                raise ValueError(
                    f"not a JPEG or PNG (the content is {found}; accepted: "
                    f"{', '.join(ACCEPTED_FORMATS)})"
                )
            facts = ImageFacts(
                width=image.width,
                height=image.height,
                format=found,
                mode=image.mode,
                extension_differs=EXTENSION_FORMATS.get(extension) != found,
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


def extension_note(path: str, facts: ImageFacts) -> ListedPath:
    extension = posixpath.splitext(path)[1].lower() or "(none)"
    return ListedPath(path, f"extension differs: {extension!r} but the content is {facts.format}")


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
