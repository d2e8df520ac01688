"""Predict with a pushed model: classify image files, or predict the label of CSV rows.

    python -m pipeline.predict --model tfx_output/digits-pipeline/serving_model img1.jpg ...
    python -m pipeline.predict --model tfx_output/diabetes-pipeline/serving_model --csv rows.csv

--model is a SavedModel directory, or the Pusher's base directory (the newest numbered version
in it is used). The model's serving_images signature applies the same transform graph as
training (decode, resize, scale) to the raw file bytes. Prints one line per file: path, class
name, probability. A file that is not a readable JPEG/PNG is reported by name (exit code 2) and
the others are still classified.

--csv FILE: rows with the columns the model reads (a label column, and columns the model does
not read, are ignored; empty cells and the null tokens training read as missing, NA and the like,
are missing values). Which columns, their types and which ones need a value are read from the
model itself: the tf.Example parse in its serving_default signature (its feature keys, types and
defaults), so a model a user's run_fn exported (TFX's penguin module, say) is read as well as
this project's. Prints one line per row: its line number and the prediction in the label's units
(regression), or the class name and its probability (classification), or, for another model's
outputs, each output's values. A cell that is not of the column's type, or a missing value in a
column the model requires (a fixed shape without a default), is reported with its line (exit
code 2) and the other rows are still predicted.
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


def model_description(model_dir: str, signature) -> dict:
    """What the model reads and says: {"features": {name: int|float|string}, "required": [...],
    "task", "label"}. Features from the serving signature's tf.Example parse; the task from its
    outputs; the label's name from this project's export note (assets.extra), when there is
    one."""
    import json

    from components.ml import export, features

    read = serving_features(signature)
    outputs = set(signature.structured_outputs)
    if {features.CLASSES, features.PROBABILITIES} <= outputs:
        task = features.CLASSIFICATION
    elif features.PREDICTION in outputs:
        task = features.REGRESSION
    else:
        task = ""  # another model's outputs: each is printed as it is
    label = ""
    note = os.path.join(model_dir, "assets.extra", export.RAW_FEATURES_FILE)
    if os.path.isfile(note):
        with open(note) as handle:
            label = json.load(handle).get("label", "")
    return {
        "features": {name: kind for name, (kind, _) in read.items()},
        "required": sorted(name for name, (_, required) in read.items() if required),
        "task": task,
        "label": label or (features.PREDICTION if task == features.REGRESSION else "class"),
    }


_KINDS = {"DT_INT64": "int", "DT_FLOAT": "float", "DT_STRING": "string"}


def serving_features(signature) -> dict[str, tuple[str, bool]]:
    """{feature: (int|float|string, required)} that a signature taking serialized tf.Examples
    parses: read from its graph's ParseExampleV2 ops (the keys are constant inputs; a dense
    feature whose default is empty has to be in every example). Raises ValueError, naming the
    signature's inputs, for one that takes no tf.Examples."""
    import tensorflow as tf

    inputs = signature.structured_input_signature[1]
    if len(inputs) != 1 or next(iter(inputs.values())).dtype != tf.string:
        raise ValueError(
            f"the serving_default signature takes {sorted(inputs)}, not serialized tf.Examples: "
            "--csv needs a model whose serving signature parses tf.Examples (--model)"
        )
    graph = signature.graph.as_graph_def()
    scopes = [(list(graph.node), ":0")] + [
        (list(function.node_def), ":output:0") for function in graph.library.function
    ]
    found: dict[str, tuple[str, bool]] = {}
    for nodes, _ in scopes:
        by_name = {node.name: node for node in nodes}
        for node in nodes:
            if node.op == "ParseExampleV2":
                found.update(_parsed_features(node, by_name))
    if not found:
        raise ValueError(
            "found no tf.Example parse in the serving_default signature's graph: cannot tell "
            "which columns the model reads (--model)"
        )
    return found


def _constant(name: str, by_name: dict):
    """The value of the constant that feeds `name` (through Reshape/Identity), else None."""
    import tensorflow as tf

    node = by_name.get(name.split(":")[0].lstrip("^"))
    while node is not None and node.op in ("Reshape", "Identity"):
        node = by_name.get(node.input[0].split(":")[0])
    if node is None or node.op != "Const":
        return None
    return tf.make_ndarray(node.attr["value"].tensor)


def _parsed_features(node, by_name: dict) -> dict[str, tuple[str, bool]]:
    from tensorflow.core.framework import types_pb2

    def keys(index: int) -> list[str]:
        value = _constant(node.input[index], by_name)
        return [] if value is None else [key.decode() for key in value.reshape(-1)]

    def kinds(attr: str) -> list[str]:
        return [_KINDS.get(types_pb2.DataType.Name(t), "string") for t in node.attr[attr].list.type]

    # ParseExampleV2(serialized, names, sparse_keys, dense_keys, ragged_keys, dense_defaults...)
    sparse, dense, ragged = keys(2), keys(3), keys(4)
    found = {}
    for key, kind in zip(sparse, kinds("sparse_types"), strict=False):
        found[key] = (kind, False)
    for key, kind in zip(ragged, kinds("ragged_value_types"), strict=False):
        found[key] = (kind, False)
    for index, (key, kind) in enumerate(zip(dense, kinds("Tdense"), strict=False)):
        default = _constant(node.input[5 + index], by_name)
        found[key] = (kind, default is not None and default.size == 0)
    return found


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

    loaded = tf.saved_model.load(model_dir)
    if features.SERVING_SIGNATURE not in loaded.signatures:
        raise ValueError(
            f"{model_dir} has no {features.SERVING_SIGNATURE!r} signature (signatures: "
            f"{sorted(loaded.signatures)}) (--model)"
        )
    serve = loaded.signatures[features.SERVING_SIGNATURE]
    description = model_description(model_dir, serve)
    # As ExampleGen reads them: an empty (or blank) cell is missing too.
    null_values = set(DatasetConfig.null_values)
    required = set(description["required"])
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
            values = tf.reshape(outputs[features.PREDICTION], [-1]).numpy()
            texts = [f"{description['label']}={value:.6g}" for value in values]
        elif description["task"] == features.CLASSIFICATION:
            names = outputs[features.CLASSES].numpy()
            probabilities = tf.reduce_max(outputs[features.PROBABILITIES], axis=1).numpy()
            texts = [
                f"{description['label']}={name.decode()}\t{probability:.4f}"
                for name, probability in zip(names, probabilities, strict=True)
            ]
        else:
            texts = _outputs_text(outputs, len(batch))
        for (line, _), text in zip(batch, texts, strict=True):
            yield line, text, None


def _outputs_text(outputs: dict, rows: int) -> list[str]:
    """Each output's values per row (`name=[v1, v2]`, tab-separated): what a model whose outputs
    this project does not know (a user's run_fn: logits, say) returned."""
    import numpy as np

    columns = []
    for name in sorted(outputs):
        values = np.asarray(outputs[name]).reshape(rows, -1)
        columns.append([f"{name}=[{', '.join(map(_value_text, row.tolist()))}]" for row in values])
    return ["\t".join(cells) for cells in zip(*columns, strict=True)]


def _value_text(value) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return f"{value:.6g}" if isinstance(value, float) else str(value)


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
