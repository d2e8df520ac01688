"""ShardedCsvExampleGen: a TFX ExampleGen component for CSV files.

Spec = TFX's FileBasedExampleGenSpec plus typed parameters for sharding and row accounting;
driver = TFX's FileBasedDriver (span/version resolution and input fingerprint, so an unchanged
input directory is a cache hit); executor = components.tfx_components.example_gen.executor.
"""

from __future__ import annotations

import json

from tfx.components.example_gen import driver
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import channel, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter

from components.tfx_components.example_gen import executor


class ShardedCsvExampleGenSpec(standard_component_specs.FileBasedExampleGenSpec):
    PARAMETERS = {
        **standard_component_specs.FileBasedExampleGenSpec.PARAMETERS,
        executor.NUM_SHARDS_KEY: ExecutionParameter(type=int),
        # JSON list of strings read as missing values.
        executor.NULL_VALUES_KEY: ExecutionParameter(type=str),
        # JSON object {column: "int"|"float"|"string"}; "{}" infers types over all files.
        executor.COLUMN_TYPES_KEY: ExecutionParameter(type=str),
        executor.MAX_REJECTED_FRACTION_KEY: ExecutionParameter(type=float),
        executor.DELIMITER_KEY: ExecutionParameter(type=str, optional=True),
        # JSON list of columns that are never written (excluded from the features).
        executor.EXCLUDED_COLUMNS_KEY: ExecutionParameter(type=str, optional=True),
        # Rows with no value in this column are rejected.
        executor.LABEL_KEY: ExecutionParameter(type=str, optional=True),
        # JSON list: rows to predict with no value in one of these columns are rejected.
        executor.REQUIRED_COLUMNS_KEY: ExecutionParameter(type=str, optional=True),
    }


class ShardedCsvExampleGen(base_beam_component.BaseBeamComponent):
    """CSV files under input_base -> hash-split, N-shard gzip TFRecords of tf.Examples."""

    SPEC_CLASS = ShardedCsvExampleGenSpec
    DRIVER_CLASS = driver.FileBasedDriver
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(
        self,
        *,
        input_base: str,
        split_buckets: dict[str, int],
        num_shards: int,
        null_values: tuple[str, ...] = executor.DEFAULT_NULL_VALUES,
        column_types: dict[str, str] | None = None,
        max_rejected_fraction: float = 0.0,
        file_pattern: str = "*.csv",
        delimiter: str = ",",
        excluded_columns: tuple[str, ...] = (),
        label_key: str = "",
        required_columns: tuple[str, ...] = (),
    ):
        output_config = example_gen_pb2.Output(
            split_config=example_gen_pb2.SplitConfig(
                splits=[
                    example_gen_pb2.SplitConfig.Split(name=name, hash_buckets=buckets)
                    for name, buckets in split_buckets.items()
                ]
            )
        )
        spec = ShardedCsvExampleGenSpec(
            input_base=input_base,
            input_config=example_gen_pb2.Input(
                splits=[example_gen_pb2.Input.Split(name="single_split", pattern=file_pattern)]
            ),
            output_config=output_config,
            output_data_format=example_gen_pb2.FORMAT_TF_EXAMPLE,
            output_file_format=example_gen_pb2.FORMAT_TFRECORDS_GZIP,
            num_shards=num_shards,
            null_values=json.dumps(list(null_values)),
            column_types=json.dumps(dict(column_types or {})),
            max_rejected_fraction=float(max_rejected_fraction),
            delimiter=delimiter,
            excluded_columns=json.dumps(list(excluded_columns)),
            label_key=label_key,
            **(
                {executor.REQUIRED_COLUMNS_KEY: json.dumps(list(required_columns))}
                if required_columns
                else {}
            ),
            examples=channel.Channel(type=standard_artifacts.Examples),
        )
        super().__init__(spec=spec)
