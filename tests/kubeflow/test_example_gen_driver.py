"""ExampleGen's driver task: the span, fingerprint and resolved input config the component's own
local driver computes, written as the ExecutorOutput KFP's launcher reads."""

from __future__ import annotations

import json
import os

from tfx.proto import example_gen_pb2
from tfx.utils import proto_utils

from kubeflow import example_gen_driver

IMAGE_DRIVER = "components.tfx_components.image_example_gen.driver.ImageFolderDriver"


def input_config(pattern: str) -> str:
    config = example_gen_pb2.Input(
        splits=[example_gen_pb2.Input.Split(name="single_split", pattern=pattern)]
    )
    return proto_utils.proto_to_json(config)


def test_csv_fingerprint_follows_the_files_the_pattern_matches(tmp_path):
    (tmp_path / "a.csv").write_text("x\n1\n")
    first = example_gen_driver.resolve(str(tmp_path), input_config("*.csv"))
    assert first["span"] == 0
    assert json.loads(first["input_config"])["splits"][0]["pattern"] == "*.csv"
    (tmp_path / "notes.txt").write_text("not data")
    assert example_gen_driver.resolve(str(tmp_path), input_config("*.csv")) == first
    (tmp_path / "b.csv").write_text("x\n2\n")
    second = example_gen_driver.resolve(str(tmp_path), input_config("*.csv"))
    assert second["input_fingerprint"] != first["input_fingerprint"]


def test_image_fingerprint_is_the_image_driver_s_whole_tree(tmp_path):
    (tmp_path / "cat" / "nested").mkdir(parents=True)
    (tmp_path / "cat" / "1.jpg").write_bytes(b"1")
    before = example_gen_driver.resolve(str(tmp_path), input_config("*/*"), IMAGE_DRIVER)
    assert before["input_fingerprint"].startswith("tree:")
    # Below the '*/*' glob, where TFX's stock processor would not look.
    (tmp_path / "cat" / "nested" / "2.jpg").write_bytes(b"22")
    after = example_gen_driver.resolve(str(tmp_path), input_config("*/*"), IMAGE_DRIVER)
    assert after["input_fingerprint"] != before["input_fingerprint"]


def test_main_writes_the_executor_output(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text("x\n1\n")
    output_file = tmp_path / "pod" / "output_metadata.json"
    executor_input = {
        "inputs": {
            "parameterValues": {
                "input_base": str(tmp_path / "data"),
                "input_config": input_config("*.csv"),
            }
        },
        "outputs": {"outputFile": str(output_file)},
    }
    assert example_gen_driver.main(["--executor_input", json.dumps(executor_input)]) == 0
    written = json.loads(output_file.read_text())["parameterValues"]
    assert written == example_gen_driver.resolve(str(tmp_path / "data"), input_config("*.csv"))
    assert os.path.isfile(output_file)
