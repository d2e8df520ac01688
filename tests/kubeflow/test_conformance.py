"""Every compiled variant is a file the open-source Kubeflow Pipelines backend accepts: only
container and importer executors (its Argo compiler refuses resolvers), every task input wired
to a declared input or an upstream output of the same type, every placeholder in a command
resolvable by the launcher, an object-store pipeline root its launcher opens, and a
PlatformSpec whose per-executor settings parse strictly with kfp-kubernetes' own schema
(vendor/kubernetes_executor_config.*, from kubeflow/pipelines at the commit noted there)."""

from __future__ import annotations

import os
import re

import pytest
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    json_format,
    message_factory,
    text_format,
)
from kfp.pipeline_spec import pipeline_spec_pb2

from kubeflow.config import is_pinned
from tests.kubeflow import ir_runner
from tests.kubeflow.variants import VARIANTS

VENDOR = os.path.join(os.path.dirname(__file__), "vendor")
PARAMETER_REFERENCE = re.compile(r"^\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}$")
ARTIFACT_REFERENCE = re.compile(
    r"^\{\{\$\.(inputs|outputs)\.artifacts\['([^']+)'\]\.(uri|path|metadata)\}\}$"
)
OUTPUT_PARAMETER_REFERENCE = re.compile(
    r"^\{\{\$\.outputs\.parameters\['([^']+)'\]\.output_file\}\}$"
)


def kubernetes_executor_config_class():
    """kfp_kubernetes.KubernetesExecutorConfig from the vendored descriptor."""
    pool = descriptor_pool.Default()
    name = "kfp_kubernetes.KubernetesExecutorConfig"
    try:
        descriptor = pool.FindMessageTypeByName(name)
    except KeyError:
        with open(os.path.join(VENDOR, "kubernetes_executor_config.descriptor.pbtxt")) as handle:
            file_proto = text_format.Parse(handle.read(), descriptor_pb2.FileDescriptorProto())
        pool.Add(file_proto)
        descriptor = pool.FindMessageTypeByName(name)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def _variants():
    return pytest.mark.parametrize("variant", sorted(VARIANTS))


@_variants()
def test_only_container_and_importer_executors(compiled, variant):
    spec, _ = compiled[variant]
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())  # strict
    ir_runner.check_executors(spec)
    for label, executor in spec["deploymentSpec"]["executors"].items():
        assert set(executor) <= {"container", "importer"}, label
        if "container" in executor:
            assert is_pinned(executor["container"]["image"]), label
            assert executor["container"]["command"][0] == "python", label


@_variants()
def test_pipeline_root_is_one_the_launcher_opens(compiled, variant):
    spec, _ = compiled[variant]
    ir_runner.check_pipeline_root(spec["defaultPipelineRoot"])
    ir_runner.task_order(spec["root"]["dag"]["tasks"])  # no cycle, no unknown producer


@_variants()
def test_every_task_input_is_declared_and_wired(compiled, variant):
    spec, _ = compiled[variant]
    components = spec["components"]
    tasks = spec["root"]["dag"]["tasks"]
    pipeline_inputs = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    for task_name, task in tasks.items():
        component = components[task["componentRef"]["name"]]
        declared = component.get("inputDefinitions", {})
        given = task.get("inputs", {})
        for name, definition in declared.get("parameters", {}).items():
            if "defaultValue" not in definition and not definition.get("isOptional"):
                assert name in given.get("parameters", {}), (task_name, name)
        for name, value in given.get("parameters", {}).items():
            expected = declared["parameters"][name]["parameterType"]
            if "componentInputParameter" in value:
                source = pipeline_inputs[value["componentInputParameter"]]
                assert source["parameterType"] == expected, (task_name, name)
            elif "taskOutputParameter" in value:
                ref = value["taskOutputParameter"]
                producer = components[tasks[ref["producerTask"]]["componentRef"]["name"]]
                output = producer["outputDefinitions"]["parameters"][ref["outputParameterKey"]]
                assert output["parameterType"] == expected, (task_name, name)
            else:
                assert "constant" in value["runtimeValue"], (task_name, name)
        for name, value in given.get("artifacts", {}).items():
            assert name in declared["artifacts"], (task_name, name)
            ref = value["taskOutputArtifact"]
            producer = components[tasks[ref["producerTask"]]["componentRef"]["name"]]
            output = producer["outputDefinitions"]["artifacts"][ref["outputArtifactKey"]]
            assert ir_runner.schema_title(output["artifactType"]) == ir_runner.schema_title(
                declared["artifacts"][name]["artifactType"]
            ), (task_name, name)


@_variants()
def test_every_placeholder_resolves(compiled, variant):
    """The launcher substitutes `{{$}}` and placeholders naming the component's own inputs and
    outputs; anything else would reach the container as literal text."""
    spec, _ = compiled[variant]
    for component_name, component in spec["components"].items():
        container = spec["deploymentSpec"]["executors"][component["executorLabel"]].get("container")
        if container is None:
            continue
        inputs = component.get("inputDefinitions", {})
        outputs = component.get("outputDefinitions", {})
        for text in [*container["command"], *container.get("args", [])]:
            for placeholder in ir_runner.PLACEHOLDER.findall(text):
                if placeholder == "{{$}}":
                    continue
                if match := PARAMETER_REFERENCE.match(placeholder):
                    assert match.group(1) in inputs.get("parameters", {}), placeholder
                elif match := ARTIFACT_REFERENCE.match(placeholder):
                    side = inputs if match.group(1) == "inputs" else outputs
                    assert match.group(2) in side.get("artifacts", {}), placeholder
                elif match := OUTPUT_PARAMETER_REFERENCE.match(placeholder):
                    assert match.group(1) in outputs.get("parameters", {}), placeholder
                else:
                    pytest.fail(f"{component_name}: unknown placeholder {placeholder}")


@_variants()
def test_platform_spec_parses_with_kfp_kubernetes_protos(compiled, variant):
    spec, platform = compiled[variant]
    if platform is None:
        return  # nothing Kubernetes-specific (no GPU pool settings, no volume)
    json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())  # strict
    config_class = kubernetes_executor_config_class()
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) <= set(spec["deploymentSpec"]["executors"])
    for settings in executors.values():
        json_format.ParseDict(settings, config_class())  # strict: unknown fields fail


def test_the_volume_is_mounted_in_every_pod(compiled):
    spec, platform = compiled["pvc"]
    config_class = kubernetes_executor_config_class()
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == set(spec["deploymentSpec"]["executors"])
    for label, settings in executors.items():
        [mount] = json_format.ParseDict(settings, config_class()).pvc_mount
        assert mount.mount_path == "/mnt/data", label
        assert mount.pvc_name_parameter.runtime_value.constant.string_value == "tfx-data"
    assert "nodeSelector" in executors["Trainer_executor"]
    assert "nodeSelector" not in executors["Pusher_executor"]
    root = spec["root"]["inputDefinitions"]["parameters"]["data_root"]
    assert root["defaultValue"] == "/mnt/data/penguins"


def test_resolver_executors_are_refused_as_the_backend_refuses_them(compiled):
    spec, _ = compiled["penguins"]
    spec = {**spec, "deploymentSpec": {"executors": {"x": {"resolver": {}}}}}
    with pytest.raises(ir_runner.IRRejected, match="resolver not implemented yet"):
        ir_runner.check_executors(spec)
