"""The model's input pipeline: TFRecord shards -> batched (features, label): Transform's shards
for tabular data, ExampleGen's (encoded images) with the transform graph applied for images."""

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
    decode_images_per_element: bool = True,
    cache_decoded_images: bool = False,
) -> tf.data.Dataset:
    """Transformed gzip TFRecord shards -> (features, label) batches.

    Files are listed and interleaved across shards, records are batched before parsing (one
    vectorized parse per batch, label split off in the same map), and everything is parallel
    and prefetched with AUTOTUNE. cache_records (for data that fits in memory) keeps the
    decompressed records after the first pass, so later epochs skip reading and gzip decoding.
    (Caching parsed examples instead was slower: batching many small tensors per example costs
    more than one vectorized parse per batch.)

    Images (the transform graph records a resize target): the files are ExampleGen's shards, not
    Transform's (Transform analyzes and materializes nothing for images); see make_image_dataset.
    """
    image_size = image_preprocessing.image_size_of(tf_transform_output)
    if image_size:
        return make_image_dataset(
            file_pattern,
            tf_transform_output,
            label_key,
            batch_size,
            shuffle=shuffle,
            repeat=repeat,
            seed=seed,
            cache_records=cache_records,
            decode_per_element=decode_images_per_element,
            cache_decoded=cache_decoded_images,
        )
    dataset = _records(file_pattern, shuffle, seed)
    feature_spec = tf_transform_output.transformed_feature_spec()
    label_name = features.transformed_name(label_key)

    def parse(records):
        batch = tf.io.parse_example(records, feature_spec)
        label = batch.pop(label_name)
        return batch, label

    dataset = _epochs(dataset, batch_size, shuffle, repeat, seed, cache=cache_records)
    dataset = dataset.batch(batch_size).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return without_autotune_thread(dataset.prefetch(tf.data.AUTOTUNE))


def without_autotune_thread(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The dataset with tf.data's autotuning model off (options.autotune.enabled = False).

    Why: deleting an autotuned iterator can block for as long as the iterator has lived. Its
    model thread (tensorflow/core/framework/model.cc, Model::OptimizeLoop, read at tensorflow
    commit 2a73ba5) sleeps for an optimization period that doubles after each optimization, up
    to a minute, and is woken by a cancellation callback; it then checks IsCancelled(), which
    tsl's CancellationManager (third_party/xla/xla/tsl/framework/cancellation.cc at 18c005b,
    StartCancelWithStatus) sets only after running every callback and cancelling every child.
    A thread that wakes in between sleeps out the rest of its period, and the iterator's
    destructor (RootDataset::Iterator, under MirroredStrategy's MultiDeviceIterator) joins it.
    Measured: 1 of 4 deletions of a MirroredStrategy iterator took 2.1 s instead of 0.2 s after
    3.3 s of use; at 75 columns the Trainer lost 1.1 and 5.1 s in 2 of 3 runs (fit() takes
    about 6 s there; docs/benchmarks.md).

    What changes: each AUTOTUNE stage runs at tf.data's starting parallelism, min(16, cores)
    (GetAutotuneDefaultParallelism), where the model would tune the stages within one thread
    per core in all; prefetch(AUTOTUNE) buffers still grow, through tf.data's legacy prefetch
    autotuner, which needs no model. Measured no slower: the same fit() times on penguins, and
    the image input at or above tf.data's own on a JPEG folder (docs/benchmarks.md).
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def _records(file_pattern, shuffle: bool, seed: int | None) -> tf.data.Dataset:
    files = tf.data.Dataset.list_files(file_pattern, shuffle=shuffle, seed=seed)
    return files.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type=compression_of(path)),
        cycle_length=tf.data.AUTOTUNE,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not shuffle,
    )


def _epochs(dataset, batch_size: int, shuffle: bool, repeat: bool, seed, cache: bool):
    """Elements -> the epochs the model reads: cached after the first pass (cache), shuffled
    within 10 batches' worth (shuffle: reshuffled each epoch), repeated (repeat)."""
    if cache:
        dataset = dataset.cache()
    if shuffle:
        dataset = dataset.shuffle(buffer_size=10 * batch_size, seed=seed)
    if repeat:
        dataset = dataset.repeat()
    return dataset


def make_image_dataset(
    file_pattern: str | Sequence[str],
    tf_transform_output: tft.TFTransformOutput,
    label_key: str,
    batch_size: int,
    *,
    shuffle: bool,
    repeat: bool,
    seed: int | None = None,
    cache_records: bool = False,
    decode_per_element: bool = True,
    cache_decoded: bool = False,
) -> tf.data.Dataset:
    """ExampleGen's image shards (raw tf.Examples: encoded bytes, class name, ...) -> (pixels,
    label id) batches, through the same two steps TFMA and serving apply: the transform graph
    (tft's TransformFeaturesLayer: label vocabulary) and image_preprocessing.decode_transformed
    (decode -> resize -> normalize), whose resize and normalize halves run apart: images are
    batched (and cached) as 8-bit pixels and each batch is normalized in one op.

    Only the image and the label are parsed, and the transform graph runs on batches of records
    (one vectorized parse and one graph call per batch). decode_per_element (the default) then
    decodes one image per parallel AUTOTUNE map call and batches again; otherwise each batch is
    decoded inside its parallel map call. Per element used less CPU and ran faster under load
    from other jobs on 2 cores; on a quieter machine the two were within noise
    (benchmarks/training_input.py measures both).

    cache_decoded (when the decoded images fit in memory: decoded_bytes): the first pass decodes
    and keeps the 8-bit pixels; later epochs shuffle and batch them without reading or
    decoding. On a CPU that also runs the model, the decode otherwise competes with every
    training step.
    """
    image_size = image_preprocessing.image_size_of(tf_transform_output)
    if not image_size:
        raise ValueError("the transform graph records no image size: not an image pipeline")
    raw_spec = tf_transform_output.raw_feature_spec()
    parsed_spec = {name: raw_spec[name] for name in (features.IMAGE_KEY, label_key)}
    transform_layer = tf_transform_output.transform_features_layer()
    label_name = features.transformed_name(label_key)
    encoded_name = image_preprocessing.ENCODED_IMAGE

    def transform_batch(records):
        """[batch] serialized raw examples -> ({encoded image: [batch]}, [batch] label ids)."""
        transformed = transform_layer(tf.io.parse_example(records, parsed_spec))
        kept = {encoded_name: tf.reshape(transformed[encoded_name], [-1])}
        return kept, tf.reshape(transformed[label_name], [-1])

    def resize_batch(records):
        kept, label = transform_batch(records)
        return image_preprocessing.resize_transformed(kept, image_size), label

    def resize_one(kept, label):
        return image_preprocessing.resize_transformed_one(kept, image_size), label

    def normalize_batch(resized, label):
        return image_preprocessing.normalize_transformed(resized), label

    def resized(dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Records -> batches of resized uint8 images with their labels."""
        dataset = dataset.batch(batch_size)
        if not decode_per_element:
            return dataset.map(resize_batch, num_parallel_calls=tf.data.AUTOTUNE)
        dataset = dataset.map(transform_batch, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
        return dataset.map(resize_one, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)

    def normalized(dataset: tf.data.Dataset) -> tf.data.Dataset:
        dataset = dataset.map(normalize_batch, num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    dataset = _records(file_pattern, shuffle, seed)
    if cache_decoded:
        # Decoded once, then cached as 8-bit pixels one image per element (shuffled across
        # batches); each batch is normalized as it leaves the cache.
        dataset = _epochs(resized(dataset).unbatch(), batch_size, shuffle, repeat, seed, cache=True)
        return without_autotune_thread(normalized(dataset.batch(batch_size)))
    dataset = _epochs(dataset, batch_size, shuffle, repeat, seed, cache=cache_records)
    return without_autotune_thread(normalized(resized(dataset)))


def decoded_bytes(num_images: int, image_size: int) -> int:
    """Memory the decoded images take (8-bit pixels at the transformed size, 3 channels): what
    cache_decoded holds."""
    return num_images * image_size * image_size * image_preprocessing.CHANNELS
