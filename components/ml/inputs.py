"""The model's input pipeline: transformed TFRecord shards -> batched (features, label)."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
import tensorflow_transform as tft

from components.ml import features, image_preprocessing


def compression_of(path):
    """TFRecord compression from the file name, as Beam's AUTO does: gzip for '.gz', else none
    (image payloads are written uncompressed: JPEG bytes and pixels barely compress)."""
    if isinstance(path, str):
        return "GZIP" if path.endswith(".gz") else ""
    return tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")


def make_dataset(
    file_pattern: str | Sequence[str],
    tf_transform_output: tft.TFTransformOutput,
    label_key: str,
    batch_size: int,
    *,
    shuffle: bool,
    repeat: bool,
    seed: int | None = None,
    cache_records: bool = False,
    decode_images_per_element: bool = False,
) -> tf.data.Dataset:
    """Transformed gzip TFRecord shards -> (features, label) batches.

    Files are listed and interleaved across shards, records are batched before parsing (one
    vectorized parse per batch, label split off in the same map), and everything is parallel
    and prefetched with AUTOTUNE. cache_records (for data that fits in memory) keeps the
    decompressed records after the first pass, so later epochs skip reading and gzip decoding.
    (Caching parsed examples instead was slower: batching many small tensors per example costs
    more than one vectorized parse per batch.)

    Images: the shards hold encoded bytes; image_preprocessing.decode_transformed (decode ->
    resize -> normalize, the step serving and evaluation apply too) runs here, on batches inside
    the parallel parse map, or with decode_images_per_element one image per parallel map call
    before batching (benchmarks/training_input.py measures both).
    """
    files = tf.data.Dataset.list_files(file_pattern, shuffle=shuffle, seed=seed)
    dataset = files.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type=compression_of(path)),
        cycle_length=tf.data.AUTOTUNE,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not shuffle,
    )
    feature_spec = tf_transform_output.transformed_feature_spec()
    label_name = features.transformed_name(label_key)
    image_size = image_preprocessing.image_size_of(tf_transform_output) or 0  # 0: no image
    decode_batches = bool(image_size) and not decode_images_per_element

    def parse(records):
        batch = tf.io.parse_example(records, feature_spec)
        if decode_batches:
            batch = image_preprocessing.decode_transformed(batch, image_size)
        return split_label(batch)

    def split_label(batch):
        label = batch.pop(label_name)
        return batch, label

    def parse_and_decode_one(record):
        example = tf.io.parse_single_example(record, feature_spec)
        return image_preprocessing.decode_transformed_one(example, image_size)

    if cache_records:
        dataset = dataset.cache()
    if shuffle:
        dataset = dataset.shuffle(buffer_size=10 * batch_size, seed=seed)
    if repeat:
        dataset = dataset.repeat()
    if image_size and decode_images_per_element:
        dataset = dataset.map(parse_and_decode_one, num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.batch(batch_size).map(split_label).prefetch(tf.data.AUTOTUNE)
    dataset = dataset.batch(batch_size).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)
