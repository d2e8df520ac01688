"""Image data that runs with nothing downloaded.

- digits: scikit-learn's 1,797 real 8x8 handwritten digits (shipped inside scikit-learn), written
  once as 32x32 grayscale JPEG files into one folder per class;
- synth: a generator of larger synthetic JPEG sets (count, size, classes; deterministic by seed)
  for benchmarks and scale tests. Each class has its own colour and stripe orientation, with
  per-image noise, so a model can learn them.

    python -m pipeline.datasets.images digits --out DIR
    python -m pipeline.datasets.images synth --out DIR --images 20000 --size 256 --classes 10
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent import futures

import numpy as np
from PIL import Image

DIGITS_SIZE = 32
DIGITS_COUNT = 1797
# Written last: its presence means the folder is complete (a killed write is redone).
COMPLETE_MARKER = ".complete"


def _is_complete(root: str, count: int) -> bool:
    marker = os.path.join(root, COMPLETE_MARKER)
    if not os.path.isfile(marker):
        return False
    with open(marker) as handle:
        return handle.read().strip() == str(count)


def _mark_complete(root: str, count: int) -> None:
    with open(os.path.join(root, COMPLETE_MARKER), "w") as handle:
        handle.write(f"{count}\n")


def write_digits(root: str) -> str:
    """scikit-learn's digits as JPEG files under root/<digit>/; skipped when already written."""
    if _is_complete(root, DIGITS_COUNT):
        return root
    from sklearn.datasets import load_digits

    digits = load_digits()
    for label in range(10):
        os.makedirs(os.path.join(root, str(label)), exist_ok=True)
    for index, (pixels, label) in enumerate(zip(digits.images, digits.target, strict=True)):
        # 0..16 intensities -> 0..255 grey, upscaled so that the resize in Transform is real work.
        image = Image.fromarray(np.round(pixels * (255.0 / 16.0)).astype(np.uint8), mode="L")
        image = image.resize((DIGITS_SIZE, DIGITS_SIZE), Image.BILINEAR)
        image.save(os.path.join(root, str(label), f"digit_{index:04d}.jpg"), quality=95)
    _mark_complete(root, len(digits.target))
    return root


def _class_style(label: int, classes: int) -> tuple[np.ndarray, float]:
    hue = label / classes
    colour = np.array(
        [0.5 + 0.5 * np.cos(2 * np.pi * (hue + shift)) for shift in (0.0, 1 / 3, 2 / 3)]
    )
    return colour, np.pi * label / classes


def synthetic_image(label: int, classes: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """size x size RGB uint8: the class's colour and stripe angle, random phase and noise."""
    colour, angle = _class_style(label, classes)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    phase = rng.uniform(0, 2 * np.pi)
    stripes = 0.5 + 0.5 * np.sin(12 * (x * np.cos(angle) + y * np.sin(angle)) * np.pi + phase)
    image = stripes[..., None] * colour[None, None, :] * 255.0
    image += rng.normal(0, 20, size=image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def _write_synthetic_chunk(args) -> int:
    root, indices, classes, size, seed = args
    for index in indices:
        rng = np.random.default_rng([seed, index])
        label = index % classes
        pixels = synthetic_image(label, classes, size, rng)
        Image.fromarray(pixels, mode="RGB").save(
            os.path.join(root, f"class_{label:02d}", f"img_{index:07d}.jpg"), quality=90
        )
    return len(indices)


def write_synthetic(
    root: str, images: int, size: int = 256, classes: int = 10, seed: int = 0, workers: int = 0
) -> str:
    """images JPEG files of size x size under root/class_NN/; deterministic by seed; skipped
    when root already holds exactly this set."""
    if images < classes or classes < 2 or size < 8:
        raise ValueError("synth needs classes >= 2, images >= classes and size >= 8")
    if _is_complete(root, images):
        return root
    for label in range(classes):
        os.makedirs(os.path.join(root, f"class_{label:02d}"), exist_ok=True)
    workers = workers or os.cpu_count() or 1
    chunks = [
        (root, range(start, min(images, start + 500)), classes, size, seed)
        for start in range(0, images, 500)
    ]
    with futures.ProcessPoolExecutor(workers) as pool:
        written = sum(pool.map(_write_synthetic_chunk, chunks))
    _mark_complete(root, written)
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.datasets.images", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    digits = commands.add_parser("digits", help="scikit-learn's digits as JPEG class folders")
    digits.add_argument("--out", required=True)
    synth = commands.add_parser("synth", help="synthetic JPEG class folders")
    synth.add_argument("--out", required=True)
    synth.add_argument("--images", type=int, default=20000)
    synth.add_argument("--size", type=int, default=256)
    synth.add_argument("--classes", type=int, default=10)
    synth.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "digits":
        root = write_digits(args.out)
    else:
        try:
            root = write_synthetic(args.out, args.images, args.size, args.classes, args.seed)
        except ValueError as error:
            parser.error(str(error))
    sys.stdout.write(f"{root}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
