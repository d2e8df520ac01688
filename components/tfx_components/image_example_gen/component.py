"""ImageExampleGen: a TFX ExampleGen component for folders of images, one sub-folder per class.

Spec = TFX's FileBasedExampleGenSpec plus typed parameters for sharding and file accounting;
driver = image_example_gen.driver (TFX's FileBasedDriver, its input fingerprint covering every
file in the folder tree, so an unchanged image folder is a cache hit and a changed nested image
is not); executor = image_example_gen.executor.
"""

from __future__ import annotations

from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import channel, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter

from components.tfx_components.image_example_gen import executor
from components.tfx_components.image_example_gen.driver import ImageFolderDriver

# The split's input pattern TFX's config requires (the executor walks the class folders
# recursively, and the driver fingerprints the whole tree).
CLASS_FOLDER_PATTERN = "*/*"


class ImageExampleGenSpec(standard_component_specs.FileBasedExampleGenSpec):
    PARAMETERS = {
        **standard_component_specs.FileBasedExampleGenSpec.PARAMETERS,
        executor.NUM_SHARDS_KEY: ExecutionParameter(type=int),
        executor.MAX_REJECTED_FRACTION_KEY: ExecutionParameter(type=float),
    }


class ImageExampleGen(base_beam_component.BaseBeamComponent):
    """<input_base>/<class>/**/<JPEG or PNG file> -> hash-split, N-shard gzip TFRecords."""

    SPEC_CLASS = ImageExampleGenSpec
    DRIVER_CLASS = ImageFolderDriver
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(
        self,
        *,
        input_base: str,
        split_buckets: dict[str, int],
        num_shards: int,
        max_rejected_fraction: float = 0.0,
    ):
        spec = ImageExampleGenSpec(
            input_base=input_base,
            input_config=example_gen_pb2.Input(
                splits=[
                    example_gen_pb2.Input.Split(name="single_split", pattern=CLASS_FOLDER_PATTERN)
                ]
            ),
            output_config=example_gen_pb2.Output(
                split_config=example_gen_pb2.SplitConfig(
                    splits=[
                        example_gen_pb2.SplitConfig.Split(name=name, hash_buckets=buckets)
                        for name, buckets in split_buckets.items()
                    ]
                )
            ),
            output_data_format=example_gen_pb2.FORMAT_TF_EXAMPLE,
            output_file_format=example_gen_pb2.FORMAT_TFRECORDS_GZIP,
            num_shards=num_shards,
            max_rejected_fraction=float(max_rejected_fraction),
            examples=channel.Channel(type=standard_artifacts.Examples),
        )
        super().__init__(spec=spec)
