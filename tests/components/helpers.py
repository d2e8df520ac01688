"""Helpers shared by the component tests: raw tf.Examples and direct ExampleGen executor runs."""

from __future__ import annotations

import glob
import json
import os

import tensorflow as tf
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from components.tfx_components.example_gen import executor


def serialize(instance: dict) -> bytes:
    feature = {}
    for key, values in instance.items():
        if not values:
            continue  # missing: the feature is absent
        if isinstance(values[0], bytes):
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        elif isinstance(values[0], float):
            feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


IN_MEMORY = ["--direct_running_mode=in_memory"]
MULTI_PROCESSING = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def run_example_gen(executor_class, examples_uri, input_base, pattern, parameters, beam_args):
    """Runs an ExampleGen executor directly: one input pattern split 3:1 into train and eval,
    plus the component's own `parameters`; returns the Examples artifact."""
    examples = standard_artifacts.Examples()
    examples.uri = str(examples_uri)
    output_config = example_gen_pb2.Output(
        split_config=example_gen_pb2.SplitConfig(
            splits=[
                example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=3),
                example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1),
            ]
        )
    )
    input_config = example_gen_pb2.Input(
        splits=[example_gen_pb2.Input.Split(name="single_split", pattern=pattern)]
    )
    exec_properties = {
        "input_base": input_base,
        "input_config": proto_utils.proto_to_json(input_config),
        "output_config": proto_utils.proto_to_json(output_config),
        **parameters,
    }
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=beam_args)
    executor_class(context).Do({}, {"examples": [examples]}, exec_properties)
    return examples


def run_executor(
    tmp_path,
    data_dir,
    *,
    num_shards=3,
    column_types=None,
    max_rejected=0.0,
    beam_args=IN_MEMORY,
    **parameters,
):
    """parameters: further executor parameters (delimiter, excluded_columns, label_key)."""
    return run_example_gen(
        executor.Executor,
        tmp_path / "examples",
        data_dir,
        "*.csv",
        {
            "num_shards": num_shards,
            "null_values": json.dumps(["", "NA"]),
            "column_types": json.dumps(column_types or {}),
            "max_rejected_fraction": max_rejected,
            **parameters,
        },
        beam_args,
    )


def read_split(examples, split):
    files = sorted(glob.glob(os.path.join(examples.uri, f"Split-{split}", "*.gz")))
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return files, [tf.train.Example.FromString(r.numpy()) for r in records]


def shards_of(files) -> list[str]:
    """The shards that files are (or are parts of): data_tfrecord-00001-of-00003[.part-...].gz
    -> data_tfrecord-00001-of-00003 (bulk_tfrecord.StreamBatchesToShards)."""
    return sorted({os.path.basename(f).split(".")[0] for f in files})


def reference_pixels(data: bytes, size: int):
    """The model's input for one encoded image, computed apart from the project's function:
    Pillow picks the JPEG's DCT scale (draft() asks libjpeg for the largest 1/8..1 scale that
    keeps both sides >= size), TensorFlow decodes at that scale (PNG at full size), resizes
    bilinearly, rounds to 8 bits and divides by 255."""
    import io

    import numpy as np
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    if image.format != "JPEG":
        pixels = tf.io.decode_image(data, channels=3, expand_animations=False)
    else:
        full = image.size
        image.draft(image.mode, (size, size))
        scale = next(s for s in (1, 2, 4, 8) if image.size == tuple(-(-d // s) for d in full))
        pixels = tf.io.decode_jpeg(data, channels=3, ratio=scale)
    resized = tf.image.resize(pixels, [size, size], method="bilinear").numpy()
    return np.clip(np.round(resized), 0, 255) / 255.0
