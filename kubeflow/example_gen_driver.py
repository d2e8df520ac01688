"""ExampleGen's driver as a Kubeflow Pipelines task: what TFX's FileBasedDriver does before a
local ExampleGen runs, in a container the open-source KFP backend runs.

Locally, TFX's driver resolves the input span and version and fingerprints the matching files
(names, sizes, modification times), and ExampleGen is cached only when that fingerprint is
unchanged. KFP runs no TFX driver, and TFX's Vertex-only `preCacheCheck` hook is ignored by the
open-source backend, so the compiled pipeline runs this module as an uncached task in front of
ExampleGen (kubeflow.compile.add_example_gen_driver) and passes its outputs as ExampleGen's
parameters: KFP's cache key includes them, so new or changed files rerun ExampleGen and
everything downstream, and an unchanged data_root is a cache hit.

    python -m kubeflow.example_gen_driver --driver_class_path MODULE.CLASS --executor_input '{{$}}'

Reads input_base and input_config (TFX's example_gen_pb2.Input as JSON); writes the
ExecutorOutput KFP's launcher reads: span, input_fingerprint and the input config with the
span's and version's patterns resolved. The computation is the component's own local driver's:
the input processor its DRIVER_CLASS returns (TFX's FileBasedInputProcessor for the CSV
ExampleGen, a whole-tree fingerprint for the image ExampleGen), so a file change that reruns
ExampleGen locally reruns it on Kubeflow too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

SPAN, FINGERPRINT, INPUT_CONFIG, INPUT_BASE = (
    "span",
    "input_fingerprint",
    "input_config",
    "input_base",
)


DEFAULT_DRIVER = "tfx.components.example_gen.driver.FileBasedDriver"


def resolve(
    input_base: str, input_config_json: str, driver_class_path: str = DEFAULT_DRIVER
) -> dict[str, object]:
    """{span, input_fingerprint, input_config} for the files under input_base now, as the
    driver class (a TFX FileBasedDriver) computes them before a local run."""
    from tfx.proto import example_gen_pb2
    from tfx.utils import import_utils, proto_utils

    input_config = example_gen_pb2.Input()
    proto_utils.json_to_proto(input_config_json, input_config)
    driver_class = import_utils.import_class_by_path(driver_class_path)
    # get_input_processor reads no metadata: the driver needs no MLMD connection for it.
    processor = driver_class(None).get_input_processor(
        splits=input_config.splits, range_config=None, input_base_uri=input_base
    )
    span, version = processor.resolve_span_and_version()
    fingerprint = processor.get_input_fingerprint(span, version)
    for split in input_config.splits:
        split.pattern = processor.get_pattern_for_span_version(split.pattern, span, version)
    return {
        SPAN: span,
        FINGERPRINT: fingerprint,
        INPUT_CONFIG: proto_utils.proto_to_json(input_config),
    }


def executor_output(outputs: dict[str, object]) -> dict:
    """KFP's ExecutorOutput JSON: output parameters in parameterValues."""
    return {"parameterValues": dict(outputs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--executor_input", required=True, help="KFP's ExecutorInput as JSON")
    parser.add_argument(
        "--driver_class_path", default=DEFAULT_DRIVER, help="the ExampleGen's TFX driver class"
    )
    args = parser.parse_args(argv)
    executor_input = json.loads(args.executor_input)
    parameters = executor_input["inputs"]["parameterValues"]
    outputs = resolve(parameters[INPUT_BASE], parameters[INPUT_CONFIG], args.driver_class_path)
    output_file = executor_input["outputs"]["outputFile"]
    from tfx.dsl.io import fileio

    fileio.makedirs(os.path.dirname(output_file))
    with fileio.open(output_file, "w") as handle:
        handle.write(json.dumps(executor_output(outputs), sort_keys=True))
    sys.stdout.write(
        f"input span {outputs[SPAN]}, fingerprint {outputs[FINGERPRINT]}, "
        f"under {parameters[INPUT_BASE]}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
