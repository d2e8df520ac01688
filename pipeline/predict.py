"""Classify image files with a pushed image model.

    python -m pipeline.predict --model tfx_output/digits-pipeline/serving_model img1.jpg ...

--model is a SavedModel directory, or the Pusher's base directory (the newest numbered version
in it is used). The model's serving_images signature applies the same transform graph as
training (decode, resize, scale) to the raw file bytes. Prints one line per file: path, class
name, probability. A file that is not a readable JPEG/PNG is reported by name (exit code 2) and
the others are still classified.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# google-api-core warns about Python 3.10 on import; TFX 1.16 requires 3.10.
warnings.filterwarnings("ignore", category=FutureWarning, module="google.api_core")

EXIT_BAD_INPUT = 2


def resolve_model_dir(path: str) -> str:
    """A SavedModel directory, or the newest numeric version under a Pusher base directory."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    if os.path.isdir(path):
        versions = sorted((int(name) for name in os.listdir(path) if name.isdigit()), reverse=True)
        for version in versions:
            candidate = os.path.join(path, str(version))
            if os.path.isfile(os.path.join(candidate, "saved_model.pb")):
                return candidate
    raise FileNotFoundError(
        f"no SavedModel at {path} (expected saved_model.pb in it or in a numbered version "
        "directory under it) (--model)"
    )


def predict_files(model_dir: str, paths: list[str], batch_size: int = 64):
    """Yields (path, class name, probability) for valid files and (path, None, reason) for
    files that are not readable images."""
    import tensorflow as tf

    from components.ml import features
    from components.tfx_components.image_example_gen import reader

    loaded = tf.saved_model.load(model_dir)
    if features.IMAGE_SERVING_SIGNATURE not in loaded.signatures:
        raise ValueError(
            f"{model_dir} has no {features.IMAGE_SERVING_SIGNATURE!r} signature: not an image "
            f"model (signatures: {sorted(loaded.signatures)}) (--model)"
        )
    serve = loaded.signatures[features.IMAGE_SERVING_SIGNATURE]
    good: list[tuple[str, bytes]] = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
            reader.validate_image(path, data)
        except (OSError, ValueError) as error:
            yield path, None, str(error)
            continue
        good.append((path, data))
    for start in range(0, len(good), batch_size):
        batch = good[start : start + batch_size]
        outputs = serve(images=tf.constant([data for _, data in batch]))
        classes = outputs[features.CLASSES].numpy()
        probabilities = tf.reduce_max(outputs[features.PROBABILITIES], axis=1).numpy()
        for (path, _), name, probability in zip(batch, classes, probabilities, strict=True):
            yield path, name.decode(), float(probability)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.predict", description=__doc__)
    parser.add_argument("--model", required=True, help="SavedModel or Pusher base directory")
    parser.add_argument("images", nargs="+", help="JPEG or PNG files")
    args = parser.parse_args(argv)
    try:
        model_dir = resolve_model_dir(args.model)
        bad = 0
        for path, name, value in predict_files(model_dir, args.images):
            if name is None:
                bad += 1
                sys.stderr.write(f"error: {path}: {value}\n")
            else:
                sys.stdout.write(f"{path}\t{name}\t{value:.4f}\n")
    except (FileNotFoundError, ValueError) as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_BAD_INPUT
    return EXIT_BAD_INPUT if bad else 0


if __name__ == "__main__":
    sys.exit(main())
