"""Image ExampleGen executor: a folder of class sub-folders -> hash-split, N-shard gzip TFRecords
of tf.Examples (encoded image bytes, class name, label id, source path, height, width).

Listing, reading and validation run in Beam (one element per class folder, then one per file,
spread over the workers), not in a loop in the driver. Every file is accounted for:
files found = examples written + files rejected; the rejected are written with their reasons to
rejected_files/rejected.jsonl and the counts, the label vocabulary and the per-class counts are
custom properties of the Examples artifact (visible in MLMD). The run fails when more than
max_rejected_fraction of the files are rejected (default 0: any reject fails, listing them).
"""

from __future__ import annotations

import json
import os
from typing import Any

import apache_beam as beam
from absl import logging
from apache_beam.metrics.metric import MetricsFilter
from tfx import types
from tfx.components.example_gen import utils as example_gen_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from components.image_example_gen import reader

METRICS_NAMESPACE = "ImageExampleGen"
DEFAULT_NUM_SHARDS = 4
REJECTED_DIR = "rejected_files"
OUTPUT_FILE_PREFIX = "data_tfrecord"
MAX_REJECTS_IN_MESSAGE = 20
# Execution parameters beyond FileBasedExampleGenSpec's (see component.ImageExampleGenSpec).
NUM_SHARDS_KEY = "num_shards"
MAX_REJECTED_FRACTION_KEY = "max_rejected_fraction"
REJECTED = "rejected"


class TooManyRejectedFilesError(ValueError):
    pass


class _ListClassFolder(beam.DoFn):
    """(class name, label id) -> (path, class name, label id) per file in its folder."""

    def __init__(self, input_base: str):
        self._input_base = input_base
        self._hidden = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "hidden_files_ignored")

    def process(self, class_and_label: tuple[str, int]):
        class_name, label = class_and_label
        files, hidden = reader.list_class_files(self._input_base, class_name)
        self._hidden.inc(len(hidden))
        for path in files:
            yield path, class_name, label


class _FileToExample(beam.DoFn):
    """Reads and validates one file -> its serialized tf.Example tagged with its split, or a
    rejected-file JSON line (tag 'rejected')."""

    def __init__(self, input_base: str, split_names: list[str], split_buckets: list[int]):
        self._input_base = input_base
        self._split_names = split_names
        self._split_buckets = split_buckets
        self._found = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "files_found")
        self._rejected = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "files_rejected")
        self._written = {
            name: beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"examples_{name}")
            for name in split_names
        }

    def process(self, element: tuple[str, str, int]):
        path, class_name, label = element
        self._found.inc()
        relative = os.path.relpath(path, self._input_base)
        try:
            with fileio.open(path, "rb") as handle:
                data = handle.read()
            facts = reader.validate_image(path, data)
        except (ValueError, OSError) as error:
            self._rejected.inc()
            rejected = reader.RejectedFile(path, str(error))
            yield beam.pvalue.TaggedOutput(REJECTED, rejected.to_json())
            return
        name = self._split_names[reader.split_index(relative, self._split_buckets)]
        self._written[name].inc()
        beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"class_{class_name}").inc()
        yield beam.pvalue.TaggedOutput(
            name, reader.to_example(data, relative, class_name, label, facts)
        )


@beam.ptransform_fn
def ReadImageFoldersToSplits(
    pipeline: beam.Pipeline,
    input_base: str,
    class_names: list[str],
    split_names: list[str],
    buckets: list[int],
):
    """Pipeline root -> ({split: serialized examples}, rejected files as JSON lines)."""
    results = (
        pipeline
        | "ClassFolders" >> beam.Create([(name, index) for index, name in enumerate(class_names)])
        | "ListFiles" >> beam.ParDo(_ListClassFolder(input_base))
        # Spread the files over the workers before the reads and decodes.
        | "SpreadFiles" >> beam.Reshuffle()
        | "ReadAndValidate"
        >> beam.ParDo(_FileToExample(input_base, split_names, buckets)).with_outputs(
            REJECTED, *split_names
        )
    )
    return {name: results[name] for name in split_names}, results[REJECTED]


class Executor(base_beam_executor.BaseBeamExecutor):
    """Executor for the image ExampleGen (FileBasedExampleGen spec, driver and artifacts)."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        input_config = example_gen_pb2.Input()
        proto_utils.json_to_proto(
            exec_properties[standard_component_specs.INPUT_CONFIG_KEY], input_config
        )
        output_config = example_gen_pb2.Output()
        proto_utils.json_to_proto(
            exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY], output_config
        )
        if not output_config.split_config.splits:
            raise ValueError("the image ExampleGen splits by hash buckets: give split_config")
        num_shards = int(exec_properties.get(NUM_SHARDS_KEY) or DEFAULT_NUM_SHARDS)
        max_rejected_fraction = float(exec_properties.get(MAX_REJECTED_FRACTION_KEY) or 0.0)
        split_names = [split.name for split in output_config.split_config.splits]
        buckets = [split.hash_buckets for split in output_config.split_config.splits]
        input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
        class_names = reader.list_class_names(input_base)

        examples_artifact = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.EXAMPLES_KEY]
        )
        examples_artifact.split_names = artifact_utils.encode_split_names(
            example_gen_utils.generate_output_split_names(input_config, output_config)
        )
        rejected_uri = os.path.join(examples_artifact.uri, REJECTED_DIR, "rejected.jsonl")
        logging.info(
            "ImageExampleGen: %d class folder(s) under %s -> splits %s (buckets %s), "
            "%d shard(s) each",
            len(class_names),
            input_base,
            split_names,
            buckets,
            num_shards,
        )

        pipeline = self._make_beam_pipeline()
        splits, rejected = pipeline | "ReadImageFoldersToSplits" >> ReadImageFoldersToSplits(
            input_base, class_names, split_names, buckets
        )
        for name, examples in splits.items():
            split_uri = artifact_utils.get_split_uri([examples_artifact], name)
            _ = examples | f"Write[{name}]" >> beam.io.WriteToTFRecord(
                os.path.join(split_uri, OUTPUT_FILE_PREFIX),
                file_name_suffix=".gz",
                num_shards=num_shards,
            )
        _ = rejected | "WriteRejected" >> beam.io.WriteToText(
            rejected_uri[: -len(".jsonl")],
            file_name_suffix=".jsonl",
            num_shards=1,
            shard_name_template="",
        )
        result = pipeline.run()
        result.wait_until_finish()

        counts = _committed_counters(result)
        found = counts.get("files_found", 0)
        rejected_count = counts.get("files_rejected", 0)
        hidden = counts.get("hidden_files_ignored", 0)
        written = {name: counts.get(f"examples_{name}", 0) for name in split_names}
        per_class = {name: counts.get(f"class_{name}", 0) for name in class_names}
        examples_artifact.set_int_custom_property("num_files_found", found)
        examples_artifact.set_int_custom_property("num_files_rejected", rejected_count)
        examples_artifact.set_int_custom_property("num_hidden_files_ignored", hidden)
        examples_artifact.set_int_custom_property("num_shards_per_split", num_shards)
        examples_artifact.set_string_custom_property("rejected_files_uri", rejected_uri)
        examples_artifact.set_string_custom_property("split_example_counts", json.dumps(written))
        examples_artifact.set_string_custom_property("label_vocabulary", json.dumps(class_names))
        examples_artifact.set_string_custom_property("class_example_counts", json.dumps(per_class))
        examples_artifact.set_string_custom_property("payload_format", "FORMAT_TF_EXAMPLE")
        examples_artifact.set_string_custom_property("file_format", "tfrecords_gzip")
        logging.info(
            "ImageExampleGen: %d file(s) found = %s written + %d rejected (%d hidden file(s) "
            "ignored)",
            found,
            " + ".join(f"{n} {name}" for name, n in written.items()),
            rejected_count,
            hidden,
        )
        if sum(written.values()) + rejected_count != found:
            raise AssertionError(
                f"file accounting failed: found {found}, written {written}, "
                f"rejected {rejected_count}"
            )
        if found == 0:
            raise ValueError(f"no files in the class folders under {input_base!r}")
        if rejected_count and rejected_count > max_rejected_fraction * found:
            raise TooManyRejectedFilesError(
                _rejection_message(rejected_uri, found, rejected_count, max_rejected_fraction)
            )


def _committed_counters(result) -> dict[str, int]:
    query = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
    counts: dict[str, int] = {}
    for counter in query["counters"]:
        value = counter.committed if counter.committed is not None else counter.attempted
        counts[counter.key.metric.name] = counts.get(counter.key.metric.name, 0) + int(value)
    return counts


def read_rejected_files(uri: str) -> list[reader.RejectedFile]:
    if not fileio.exists(uri):
        return []
    with fileio.open(uri, "r") as handle:
        return [reader.RejectedFile(**json.loads(line)) for line in handle if line.strip()]


def _rejection_message(uri: str, found: int, rejected: int, max_fraction: float) -> str:
    files = sorted(read_rejected_files(uri), key=lambda f: f.path)
    listing = "\n".join(f"  {item}" for item in files[:MAX_REJECTS_IN_MESSAGE])
    more = (
        f"\n  ... and {len(files) - MAX_REJECTS_IN_MESSAGE} more"
        if len(files) > MAX_REJECTS_IN_MESSAGE
        else ""
    )
    return (
        f"{rejected} of {found} image file(s) rejected (allowed fraction {max_fraction}); "
        f"all are listed in {uri}:\n{listing}{more}"
    )
