"""Kubeflow Pipelines' own backend code (kfp_check/, pinned to kubeflow/pipelines 2.14.3) on every
compiled variant (tests/kubeflow/kfp_backend.py):
- the API server's upload parser and run creation (argocompiler.Compile), the API server's and
  Argo's validation of the Workflow (`argo lint --strict`): what the Workflow says about each task;
- every task of that Workflow through KFP's own container driver (driver.Container, with the
  Workflow's arguments), each task's outputs published to a real ML Metadata store as the
  launcher publishes them: the pod spec patch each task's pod gets (image, command, resources,
  volumes, node selector, tolerations) and each ExecutorInput. What StatisticsGen then receives
  is fed to the compiled command: TFX 1.16's own entry point fails on it (tensorflow/tfx#7768,
  issue 27); the image's `kubeflow.run_executor` (issue 27 item 1) must not."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests import session
from tests.kubeflow import kfp_backend
from tests.kubeflow.variants import PIPELINE_ROOT, VARIANTS

PRODUCER, CONSUMER = "CsvExampleGen", "StatisticsGen"
TFX_ENTRY_POINT = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
# KFP's own images in the Workflow: the API server's defaults (argocompiler/argo.go:115-125,
# no V2_DRIVER_IMAGE / V2_LAUNCHER_IMAGE set) and what they run.
DRIVER_IMAGE = "ghcr.io/kubeflow/kfp-driver:latest"
LAUNCHER_IMAGE = "ghcr.io/kubeflow/kfp-launcher:latest"
LAUNCHER = "/kfp-launcher/launch"
# The first run on a machine builds kfp_check (minutes: docs/benchmarks.md); later ones take
# seconds, the TFX entry point's run aside.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kfp_check(request) -> str:
    say = session.say(request.config)
    try:
        with session.phase("kfp_check: KFP's Go code build") as p:
            built = kfp_backend.build(say=say)
            p["detail"] = "built" if built.seconds else "cached"
    except kfp_backend.Unavailable as error:
        session.unavailable(str(error))
    if built.seconds:
        say(f"tests: kfp_check built in {built.seconds:.0f}s")
    return built.binary


@pytest.fixture(scope="module")
def workflows(kfp_check, compiled_files, tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("kfp_argo")
    return {
        name: kfp_backend.argo(kfp_check, path, str(folder))
        for name, path in compiled_files.items()
    }


@pytest.fixture(scope="module")
def driven(kfp_check, compiled_files, tmp_path_factory) -> dict[str, dict[str, dict]]:
    """variant -> task -> {"executor_input", "pod_spec_patch"} from KFP's container driver."""
    out = {}
    for name, path in compiled_files.items():
        folder = tmp_path_factory.mktemp(f"kfp_run_{name}")
        mlmd = kfp_backend.MlmdServer(str(folder / "mlmd.sqlite")).start()
        try:
            out[name] = kfp_backend.run_tasks(kfp_check, path, str(folder), mlmd)
        finally:
            mlmd.stop()
    return out


@pytest.fixture(scope="module")
def penguins(compiled) -> dict:
    return compiled["penguins"][0]


@pytest.fixture(scope="module")
def handed_off(driven) -> dict[str, dict]:
    return {task: out["executor_input"] for task, out in driven["penguins"].items()}


def _executor_label(spec: dict, task: str) -> str:
    component = spec["components"][spec["root"]["dag"]["tasks"][task]["componentRef"]["name"]]
    return component["executorLabel"]


def _platform_executors(platform: dict | None) -> dict:
    """executor label -> its KubernetesExecutorConfig (JSON form) in the file's PlatformSpec."""
    kubernetes = (platform or {}).get("platforms", {}).get("kubernetes", {})
    return kubernetes.get("deploymentSpec", {}).get("executors", {})


def _command(patch: dict, executor_input: dict) -> list[str]:
    """The task's user container as its pod runs it: the pod spec patch's args after the
    launcher (`/kfp-launcher/launch ... --`), {{$}} replaced as the launcher replaces it
    (kubeflow/pipelines 2.14.3 backend/src/v2/component/launcher_v2.go:719-727)."""
    [container] = patch["containers"]
    text = json.dumps(executor_input, separators=(",", ":"))
    argv = [part.replace("{{$}}", text) for part in container["args"]]
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_workflow_has_kfp_s_driver_and_launcher_around_every_task(workflows, compiled, variant):
    """Upload parser, argocompiler.Compile, the API server's validation and argo lint passed
    (kfp_backend.argo raises otherwise); each compiled task became a driver step then an
    executor step fed by the driver's pod spec patch, in the compiled order."""
    spec, _ = compiled[variant]
    templates = {t["name"]: t for t in workflows[variant]["spec"]["templates"]}
    assert templates["system-container-driver"]["container"]["image"] == DRIVER_IMAGE
    impl = templates["system-container-impl"]
    assert impl["podSpecPatch"] == "{{inputs.parameters.pod-spec-patch}}"
    [copier] = impl["initContainers"]
    assert copier["image"] == LAUNCHER_IMAGE and copier["args"] == ["--copy", LAUNCHER]
    steps = {task["name"]: task for task in templates["root"]["dag"]["tasks"]}
    compiled_tasks = spec["root"]["dag"]["tasks"]
    assert set(steps) == {f"{t}-driver" for t in compiled_tasks} | set(compiled_tasks)
    for name, task in compiled_tasks.items():
        assert steps[name]["depends"] == f"{name}-driver.Succeeded"
        assert steps[name]["arguments"]["parameters"][0]["value"] == (
            f"{{{{tasks.{name}-driver.outputs.parameters.pod-spec-patch}}}}"
        )
        upstream = sorted(task.get("dependentTasks", []))
        depends = steps[f"{name}-driver"].get("depends", "")
        assert sorted(p.split(".")[0] for p in depends.split(" && ") if p) == upstream


def test_a_task_named_like_kfp_s_own_driver_step_is_refused(kfp_check, compiled_files, tmp_path):
    """The control: the name the ExampleGen span task had before (kubeflow/compile.py
    DRIVER_SUFFIX), which collides with the step KFP's compiler adds for CsvExampleGen."""
    with open(compiled_files["penguins"]) as handle:
        text = handle.read()
    old = tmp_path / "old-name.yaml"
    old.write_text(text.replace("CsvExampleGen-span", "CsvExampleGen-driver"))
    with pytest.raises(kfp_backend.CheckFailed, match="duplicated nodeName CsvExampleGen-driver"):
        kfp_backend.argo(kfp_check, str(old), str(tmp_path))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_kfp_s_driver_gives_each_pod_the_compiled_container_and_platform_settings(
    driven, compiled, variant
):
    spec, platform = compiled[variant]
    executors = _platform_executors(platform)
    assert set(driven[variant]) == set(spec["root"]["dag"]["tasks"])
    for task, out in driven[variant].items():
        patch = out["pod_spec_patch"]
        [container] = patch["containers"]
        label = _executor_label(spec, task)
        compiled_container = spec["deploymentSpec"]["executors"][label]["container"]
        assert container["image"] == compiled_container["image"], task
        assert container["command"][0] == LAUNCHER and container["command"][-1] == "--", task
        assert container["args"] == compiled_container["command"] + compiled_container["args"]
        wanted = compiled_container.get("resources", {})
        limits = container["resources"]["limits"]
        assert float(limits["cpu"]) == wanted["cpuLimit"], task
        assert limits["memory"] == f"{wanted['memoryLimit']:g}G", task
        accelerator = wanted.get("accelerator")
        assert limits.get("nvidia.com/gpu") == (accelerator or {}).get("count"), task
        settings = executors.get(label, {})
        assert patch.get("tolerations", []) == settings.get("tolerations", []), task
        assert patch.get("nodeSelector", {}) == settings.get("nodeSelector", {}).get("labels", {})
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"] for v in patch.get("volumes", [])
        }
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
        assert claims == {m["constant"]: m["constant"] for m in settings.get("pvcMount", [])}
        assert mounts == {m["constant"]: m["mountPath"] for m in settings.get("pvcMount", [])}
        # Every output under the root `deploy` starts the run with (the file's).
        for outputs in out["executor_input"]["outputs"]["artifacts"].values():
            [artifact] = outputs["artifacts"]
            assert artifact["uri"].startswith(f"{spec['defaultPipelineRoot']}/"), task


def test_the_gpu_trainer_is_scheduled_on_gpus_and_the_pvc_is_mounted(driven):
    """The variants' intent, as the driver wrote it: the default Trainer asks for one GPU and
    tolerates GPU nodes; the PVC variant mounts the claim in every pod, its Trainer pinned."""
    [trainer] = driven["penguins"]["Trainer"]["pod_spec_patch"]["containers"]
    assert trainer["image"].startswith("registry.example.com/tfx-scaleout-gpu@")
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert driven["penguins"]["Trainer"]["pod_spec_patch"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    for task, out in driven["pvc"].items():
        assert out["pod_spec_patch"]["volumes"] == [
            {"name": "tfx-data", "persistentVolumeClaim": {"claimName": "tfx-data"}}
        ], task
    assert driven["pvc"]["Trainer"]["pod_spec_patch"]["nodeSelector"] == {"pool": "gpu"}


def test_the_backend_sends_the_upstream_artifact_with_an_empty_type(handed_off, penguins):
    produced = handed_off[PRODUCER]["outputs"]["artifacts"]
    [examples] = handed_off[CONSUMER]["inputs"]["artifacts"]["examples"]["artifacts"]
    # metadata/client.go:988 Schema "" -> OutputArtifact.ToRuntimeArtifact's type.
    assert examples["type"] == {"instanceSchema": ""}
    [output] = produced["examples"]["artifacts"]
    assert output["type"]["instanceSchema"].startswith("title: tfx.Examples\n")
    assert examples["uri"] == output["uri"]
    # <root>/<pipeline>/<run id>/<task>/<salt>/<output> (driver.go:476-527, client.go GetPipeline).
    run_root = f"{PIPELINE_ROOT}/penguins-pipeline/00000000-0000-4000-8000-000000000001"
    assert examples["uri"].startswith(f"{run_root}/{PRODUCER}/")
    assert examples["uri"].endswith("/examples")
    assert int(examples["name"]) > 0  # the MLMD artifact id
    assert examples["metadata"]["display_name"] == "examples"
    assert json.loads(examples["metadata"]["store_session_info"])["Provider"] == "gs"
    # The driver's launcher-managed log output (driver/driver.go:491-504), typed system.Artifact.
    logs = handed_off[CONSUMER]["outputs"]["artifacts"]["executor-logs"]["artifacts"]
    assert logs[0]["type"] == {"schemaTitle": "system.Artifact"}
    given = penguins["root"]["dag"]["tasks"][CONSUMER]["inputs"]["parameters"]
    expected = {name: value["runtimeValue"]["constant"] for name, value in given.items()}
    assert handed_off[CONSUMER]["inputs"]["parameterValues"] == expected


def test_example_gen_gets_the_span_task_s_outputs_and_the_run_s_data_root(handed_off, penguins):
    """Parameters wired from the span task's outputs and from the pipeline's own input
    (resolve.go: taskOutputParameter and componentInputParameter), through MLMD."""
    span = handed_off["CsvExampleGen-span"]["inputs"]["parameterValues"]
    default = penguins["root"]["inputDefinitions"]["parameters"]["data_root"]["defaultValue"]
    assert span["input_base"] == default
    example_gen = handed_off[PRODUCER]["inputs"]["parameterValues"]
    assert example_gen["input_config"] == span["input_config"]  # passed on (kfp_check run.go)
    assert example_gen["span"] == 0 and example_gen["input_base"] == default


def test_tfx_s_own_entry_point_fails_on_it(handed_off, driven):
    """The bug issue 27 is about: TFX's stock entry point, given what the backend sends."""
    argv = _command(driven["penguins"][CONSUMER]["pod_spec_patch"], handed_off[CONSUMER])
    argv[argv.index("-m") + 1] = TFX_ENTRY_POINT
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert "in _retrieve_class_path" in result.stderr, result.stderr[-3000:]
    assert "AttributeError: 'NoneType' object has no attribute 'get'" in result.stderr


def test_run_executor_gives_tfx_the_declared_type(handed_off, driven):
    """kubeflow.run_executor's restoration, then what TFX's entry point does with the result
    (kubeflow_v2_run_executor._run_executor: json_format.Parse into ExecutorInput, then
    parse_raw_artifact_dict), on the backend's input."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils
    from tfx.types import standard_artifacts

    from kubeflow import run_executor

    argv = _command(driven["penguins"][CONSUMER]["pod_spec_patch"], handed_off[CONSUMER])
    assert argv[argv.index("-m") + 1] == "kubeflow.run_executor"
    args, _ = run_executor.parse_flags(argv[argv.index("-m") + 1 :])
    executor_input = json.loads(args.json_serialized_invocation_args)
    inputs_spec = json.loads(args.json_serialized_inputs_spec_args)
    restored = run_executor.restore_types(executor_input, inputs_spec, args.executor_class_path)
    message = json_format.Parse(
        json.dumps(restored), pipeline_spec_pb2.ExecutorInput(), ignore_unknown_fields=True
    )
    parsed = kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict(message.inputs.artifacts)
    [examples] = parsed["examples"]
    assert isinstance(examples, standard_artifacts.Examples)
    assert examples.uri == executor_input["inputs"]["artifacts"]["examples"]["artifacts"][0]["uri"]
