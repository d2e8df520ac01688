"""What the file-based ExampleGens (CSV, images) share: the hash-split input and output configs,
Beam counters read back after the run, where the listings of rejected inputs go (somewhere a
failed run does not remove) and the message that points to them."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from apache_beam.metrics.metric import MetricsFilter
from tfx import types
from tfx.components.example_gen import utils as example_gen_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

MAX_REJECTS_IN_MESSAGE = 20


@dataclasses.dataclass(frozen=True)
class HashSplitOutput:
    """One input pattern split into named outputs by hash buckets, and the Examples artifact
    (its split names set) they are written to."""

    pattern: str
    names: list[str]
    buckets: list[int]
    examples: types.Artifact


def hash_split_output(exec_properties: dict[str, Any], output_dict, component: str):
    """The input and output configs of a hash-splitting ExampleGen (this one, the image one)."""
    input_config = example_gen_pb2.Input()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.INPUT_CONFIG_KEY], input_config
    )
    output_config = example_gen_pb2.Output()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY], output_config
    )
    if len(input_config.splits) != 1 or not output_config.split_config.splits:
        raise ValueError(
            f"{component} reads one input pattern and splits it by hash buckets; "
            "give output_config.split_config"
        )
    examples = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.EXAMPLES_KEY]
    )
    examples.split_names = artifact_utils.encode_split_names(
        example_gen_utils.generate_output_split_names(input_config, output_config)
    )
    splits = output_config.split_config.splits
    return HashSplitOutput(
        pattern=input_config.splits[0].pattern,
        names=[split.name for split in splits],
        buckets=[split.hash_buckets for split in splits],
        examples=examples,
    )


def listings_uri(examples_uri: str, name: str) -> str:
    """The folder for an ExampleGen's listings (rejected rows or files, ignored files):
    '<examples uri>-<name>', beside the Examples artifact's folder, not inside it. When the
    execution fails (too many rejects, the usual reason to read the listing), TFX removes the
    execution's output folders, and with them anything written inside; a sibling folder stays,
    on every file system and orchestrator, and its path is in the error message."""
    return f"{examples_uri.rstrip('/')}-{name}"


def listing_file(examples_uri: str, name: str, listing: str) -> str:
    return os.path.join(listings_uri(examples_uri, name), f"{listing}.jsonl")


def rejection_listing(header: str, uri: str, rejected: list) -> str:
    """`header`, where the rejected are listed, and the first MAX_REJECTS_IN_MESSAGE of them."""
    listing = "\n".join(f"  {item}" for item in rejected[:MAX_REJECTS_IN_MESSAGE])
    more = (
        f"\n  ... and {len(rejected) - MAX_REJECTS_IN_MESSAGE} more"
        if len(rejected) > MAX_REJECTS_IN_MESSAGE
        else ""
    )
    return f"{header}; all are listed in {uri}:\n{listing}{more}"


def committed_counters(result, namespace: str) -> dict[str, int]:
    """Beam counters of one namespace after the run, by name (committed, else attempted)."""
    query = result.metrics().query(MetricsFilter().with_namespace(namespace))
    counts: dict[str, int] = {}
    for counter in query["counters"]:
        name = counter.key.metric.name
        # Runners that do not commit metrics (some portable ones) still report attempted values.
        value = counter.committed if counter.committed is not None else counter.attempted
        counts[name] = counts.get(name, 0) + int(value)
    return counts
