"""The IR runner's container mode, with a stand-in engine that records its command line and
runs the entry point here: what a task's `podman run` gets (the local image for the IR's
image, the IR's command as the entry point, the runtime and ulimits, the image's numeric user,
the store folders and state_dir mounted at the same paths), folders the launcher creates owned
by that user, partial runs (`until`). The real engine and image: test_image_build.py."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.kubeflow import ir_runner
from tests.kubeflow.test_ir_runner import pipeline_spec, read_copy, write

IR_IMAGE = "registry.example.com/x@sha256:" + "1" * 64
LOCAL_IMAGE = "localhost/x:test"

FAKE_ENGINE = """#!{python}
import json, os, subprocess, sys
args = sys.argv[1:]
with open(os.environ["CALLS"], "a") as handle:
    handle.write(json.dumps(args) + "\\n")
if args[:2] == ["image", "inspect"]:
    print("{user}")
    sys.exit(0)
assert args[0] == "run", args
takes_value = {{"--name", "--runtime", "--ulimit", "--user", "--entrypoint", "-v", "-e"}}
env, entrypoint, i = dict(os.environ), None, 1
while args[i].startswith("-"):
    flag = args[i]
    value = args[i + 1] if flag in takes_value else None
    i += 2 if flag in takes_value else 1
    if flag == "--entrypoint":
        entrypoint = json.loads(value)
    elif flag == "-e":
        key, _, val = value.partition("=")
        env[key] = val
command = entrypoint + args[i + 1:]
if command[0] == "python":  # the image's python
    command[0] = {python!r}
sys.exit(subprocess.run(command, env=env).returncode)
"""


def _engine(tmp_path, user: str = "1000:1000") -> str:
    path = tmp_path / "fake-engine"
    path.write_text(FAKE_ENGINE.format(python=sys.executable, user=user))
    path.chmod(0o755)
    return str(path)


def _runner(tmp_path, engine: str, **container) -> ir_runner.IRRunner:
    return ir_runner.IRRunner(
        write(tmp_path, pipeline_spec()),
        str(tmp_path / "state"),
        {"gs://bucket": str(tmp_path / "gcs" / "bucket")},
        container=ir_runner.ContainerRun(
            images={IR_IMAGE: LOCAL_IMAGE}, engine=engine, **container
        ),
    )


def _calls(tmp_path) -> list[list[str]]:
    with open(tmp_path / "calls") as handle:
        return [json.loads(line) for line in handle]


def test_each_task_is_an_engine_run_of_the_local_image(tmp_path, monkeypatch):
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    runner = _runner(tmp_path, _engine(tmp_path), env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    result = runner.run()
    assert result.states() == {"a-produce": "EXECUTED", "b-consume": "EXECUTED"}
    assert read_copy(tmp_path, result, runner) == "hello size 5"
    runs = [call for call in _calls(tmp_path) if call[0] == "run"]
    inspects = [call for call in _calls(tmp_path) if call[0] == "image"]
    assert inspects == [["image", "inspect", "--format", "{{.Config.User}}", LOCAL_IMAGE]] * 2
    spec = pipeline_spec()
    for run, label in zip(runs, ["produce_executor", "consume_executor"], strict=True):
        container = spec["deploymentSpec"]["executors"][label]["container"]
        assert run[:3] == ["run", "--rm", "--name"]
        options = run[4 : 4 + len(ir_runner.PODMAN_RUN_OPTIONS)]
        assert tuple(options) == ir_runner.PODMAN_RUN_OPTIONS
        assert run[run.index("--user") + 1] == "1000:1000"
        assert json.loads(run[run.index("--entrypoint") + 1]) == container["command"]
        volumes = [run[i + 1] for i, word in enumerate(run) if word == "-v"]
        bucket, state = str(tmp_path / "gcs" / "bucket"), str(tmp_path / "state")
        assert volumes == [f"{bucket}:{bucket}", f"{state}:{state}"]
        assert run[run.index("-e") + 1] == "TF_CPP_MIN_LOG_LEVEL=2"
        image = run.index(LOCAL_IMAGE)
        # The IR's args follow the image, placeholders resolved to the mounted paths.
        executor_input = json.loads(run[image + 1])
        assert executor_input["outputs"]["outputFile"].startswith(state + "/pods/")
        assert len(run) == image + 1 + len(container["args"])
    # The folders the launcher creates in the pod (an artifact's parent: prepareOutputFolders)
    # are the pod user's; so is the bucket. The artifact's own folder is the executor's.
    copy = runner.local(result.tasks["b-consume"].outputs["copy"]["uri"])
    if os.geteuid() == 0:
        assert os.stat(os.path.dirname(copy)).st_uid == 1000
        assert os.stat(tmp_path / "gcs" / "bucket").st_uid == 1000
    # The cache key holds the IR's image, as KFP's does: a local runner on the same state hits.
    again = ir_runner.IRRunner(
        write(tmp_path, pipeline_spec()),
        str(tmp_path / "state"),
        {"gs://bucket": str(tmp_path / "gcs" / "bucket")},
    ).run()
    assert set(again.states().values()) == {"CACHED"}


def test_until_runs_the_targets_and_what_they_need(tmp_path, monkeypatch):
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    result = _runner(tmp_path, _engine(tmp_path), user="1234").run(until={"a-produce"})
    assert result.states() == {"a-produce": "EXECUTED"}
    [run] = _calls(tmp_path)  # a given user: no image inspect
    assert run[run.index("--user") + 1] == "1234:1234"
    with pytest.raises(ir_runner.IRRejected, match="no task"):
        _runner(tmp_path, _engine(tmp_path)).run(until={"c-missing"})


def test_refusals(tmp_path, monkeypatch):
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    with pytest.raises(ir_runner.TaskFailed, match="not numeric"):
        _runner(tmp_path, _engine(tmp_path, user="tfx")).run()
    unmapped = ir_runner.IRRunner(
        write(tmp_path, pipeline_spec()),
        str(tmp_path / "state2"),
        {"gs://bucket": str(tmp_path / "gcs" / "bucket")},
        container=ir_runner.ContainerRun(images={}, engine=_engine(tmp_path)),
    )
    with pytest.raises(ir_runner.TaskFailed, match="no local image for " + IR_IMAGE):
        unmapped.run()
    with pytest.raises(ValueError, match="image_paths"):
        ir_runner.IRRunner(
            write(tmp_path, pipeline_spec()),
            str(tmp_path / "state3"),
            {},
            image_paths={"/app": str(tmp_path)},
            container=ir_runner.ContainerRun(images={}),
        )
