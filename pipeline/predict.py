"""Predict with a pushed model: classify image files, or predict the label of CSV rows.

    python -m pipeline.predict --model tfx_output/digits-pipeline/serving_model img1.jpg ...
    python -m pipeline.predict --model tfx_output/diabetes-pipeline/serving_model --csv rows.csv

--model is a SavedModel directory, or the Pusher's base directory (the newest numbered version
in it is used). The model's serving_images signature applies the same transform graph as
training (decode, resize, scale) to the raw file bytes. Prints one line per file: path, class
name, probability. A file that is not a readable JPEG/PNG is reported by name (exit code 2) and
the others are still classified.

--csv FILE: rows with the columns the model was trained on (a label column, and columns the
model does not read, are ignored; empty cells and the null tokens training read as missing,
NA and the like, are missing values). Prints one line per row: its line number and the
prediction in the label's units (regression), or the class name and its probability
(classification). A cell that is not of the column's type, or a missing value in a column the
model requires (a fixed shape in its schema), is reported with its line (exit code 2) and the
other rows are still predicted.
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


def model_description(model_dir: str) -> dict:
    """The raw features the model reads, its label and task (written by components.ml.export)."""
    import json

    from components.ml import export

    path = os.path.join(model_dir, "assets.extra", export.RAW_FEATURES_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"{model_dir} has no {path}: exported before CSV prediction (--model)")
    with open(path) as handle:
        return json.load(handle)


def _example(row: dict, types: dict, null_values, required=()) -> bytes:
    import tensorflow as tf

    feature = {}
    for name, kind in types.items():
        cell = row.get(name)
        if cell is None or cell.strip() in null_values:
            if name in required:
                raise ValueError(
                    f"column {name!r}: no value, and the model requires one (its schema gives "
                    "the column a fixed shape: every training row had a value; a schema "
                    "inferred with --no_infer_feature_shape makes every column optional)"
                )
            continue
        text = cell.strip()
        try:
            if kind == "int":
                feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(text)]))
            elif kind == "float":
                feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(text)]))
            else:
                feature[name] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[cell.encode()])
                )
        except ValueError:
            raise ValueError(
                f"column {name!r}: {cell!r} is not {'an' if kind == 'int' else 'a'} {kind}"
            ) from None
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def predict_csv(model_dir: str, path: str, batch_size: int = 256):
    """Yields (line, prediction text, None) per row, or (line, None, reason) for a bad row."""
    import csv

    import tensorflow as tf

    from components.ml import features
    from components.tfx_components.example_gen import csv_reader
    from pipeline.config import DatasetConfig

    description = model_description(model_dir)
    serve = tf.saved_model.load(model_dir).signatures[features.SERVING_SIGNATURE]
    # As ExampleGen reads them: an empty (or blank) cell is missing too.
    null_values = set(DatasetConfig.null_values)
    required = set(description.get("required", ()))  # not written by older exports
    with open(path, newline="", encoding="utf-8-sig") as handle:
        delimiter = csv_reader.sniff_delimiter(handle.readline())
        handle.seek(0)
        reader = csv.DictReader(handle, delimiter=delimiter)
        rows = list(reader)
    good: list[tuple[int, bytes]] = []
    for index, row in enumerate(rows):
        line = index + 2
        try:
            good.append((line, _example(row, description["features"], null_values, required)))
        except ValueError as error:
            yield line, None, str(error)
    for start in range(0, len(good), batch_size):
        batch = good[start : start + batch_size]
        outputs = serve(examples=tf.constant([example for _, example in batch]))
        if description["task"] == features.REGRESSION:
            values = outputs[features.PREDICTION].numpy()
            texts = [f"{description['label']}={value:.6g}" for value in values]
        else:
            names = outputs[features.CLASSES].numpy()
            probabilities = tf.reduce_max(outputs[features.PROBABILITIES], axis=1).numpy()
            texts = [
                f"{description['label']}={name.decode()}\t{probability:.4f}"
                for name, probability in zip(names, probabilities, strict=True)
            ]
        for (line, _), text in zip(batch, texts, strict=True):
            yield line, text, None


def main(argv: list[str] | None = None) -> int:
    from pipeline import entrypoint

    with entrypoint.filtered_stderr():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.predict", description=__doc__)
    parser.add_argument("--model", required=True, help="SavedModel or Pusher base directory")
    parser.add_argument("--csv", default=None, help="CSV file of rows to predict")
    parser.add_argument("images", nargs="*", help="JPEG or PNG files")
    args = parser.parse_args(argv)
    if bool(args.csv) == bool(args.images):
        parser.error("give image files or --csv FILE (one of them)")
    try:
        model_dir = resolve_model_dir(args.model)
        bad = 0
        if args.csv:
            for line, text, reason in predict_csv(model_dir, args.csv):
                if text is None:
                    bad += 1
                    sys.stderr.write(f"error: {args.csv}:{line}: {reason}\n")
                else:
                    sys.stdout.write(f"{args.csv}:{line}\t{text}\n")
            return EXIT_BAD_INPUT if bad else 0
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
    from pipeline import entrypoint

    entrypoint.exit_without_teardown(main())
