"""The user-code flags of the Kubeflow compile: the same checks as a local run, one `error:` line
naming the flag (exit 2, no pipeline file) when the code or the place it is staged cannot work,
and the module staged where the pods read it (--user_code_root on the mounted volume here; the
gs:// default runs through the IR runner in test_ir_user_code.py)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from kubeflow import run_kubeflow
from pipeline import PROJECT_ROOT
from pipeline import user_code as user_code_lib
from tests.kubeflow.test_bad_input import compile_argv

HOOK = os.path.join(PROJECT_ROOT, "examples", "penguin_hook.py")
TFX_STYLE = os.path.join(PROJECT_ROOT, "examples", "penguin_tfx_style.py")
# A curated schema for users' CSV data on the cluster (the penguins one, under another name).
PENGUIN_SCHEMA = os.path.join(PROJECT_ROOT, "schemas", "penguins", "schema.pbtxt")


def _error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


def _no_staging(monkeypatch) -> None:
    def refuse(*_):
        raise AssertionError("staged although the compile fails")

    monkeypatch.setattr(user_code_lib, "_stage_remote", refuse)
    monkeypatch.setattr(user_code_lib, "_stage_local", refuse)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--module_file=no/such_module.py"], "error: --module_file no/such_module.py: no such"),
        # A user's run_fn on users' data: the rows are only read by the pods.
        (
            [
                f"--module_file={TFX_STYLE}",
                "--data_root=gs://bucket/penguins",
                "--label=species",
                f"--schema={PENGUIN_SCHEMA}",
            ],
            "error: --train_steps and --eval_steps are needed with your run_fn",
        ),
        (
            [f"--module_file={HOOK}", "--user_code_root=/srv/code"],
            "error: invalid --user_code_root /srv/code: every pod imports --module_file from "
            "there, so it is a gs:// URI",
        ),
        (
            [f"--module_file={HOOK}", "--user_code_root=s3://bucket/code"],
            "error: invalid --user_code_root s3://bucket/code",
        ),
        (
            [
                f"--module_file={HOOK}",
                "--pvc_name=data",
                "--mount_path=/no/such/mount",
                "--user_code_root=/no/such/mount/code",
            ],
            "error: invalid --user_code_root /no/such/mount/code: --pvc_name data is not mounted "
            "on this machine at --mount_path /no/such/mount",
        ),
        (
            [f"--module_file={HOOK}", "--no_transform_materialize"],
            "error: --no_transform_materialize gives the Trainer ExampleGen's raw examples: it is "
            "for a run_fn of yours",
        ),
        (
            ["--no_transform_materialize"],
            "error: --no_transform_materialize gives the Trainer ExampleGen's raw examples: it is "
            "for a run_fn of yours",
        ),
    ],
)
def test_bad_user_code_flags(tmp_path, capsys, monkeypatch, flags, message):
    _no_staging(monkeypatch)
    assert run_kubeflow.main(compile_argv(tmp_path, *flags)) == 2
    assert _error(capsys).startswith(message)
    assert not (tmp_path / "p.yaml").exists()


def test_a_pipeline_root_this_machine_cannot_write_names_the_flag_and_the_remedies(
    tmp_path, capsys, monkeypatch
):
    def unwritable(uri, *_):
        raise PermissionError(f"403 POST {uri}: caller does not have storage.objects.create")

    monkeypatch.setattr(user_code_lib, "_stage_remote", unwritable)
    assert run_kubeflow.main(compile_argv(tmp_path, f"--module_file={HOOK}")) == 2
    error = _error(capsys)
    assert error.startswith(
        f"error: --module_file {HOOK}: cannot stage it at gs://bucket/tfx/_user_code/"
    )
    assert "PermissionError: 403 POST" in error
    assert "gcloud auth application-default login" in error and "--user_code_root" in error
    assert not (tmp_path / "p.yaml").exists()


def test_user_code_root_on_the_volume_mounted_here(tmp_path, capsys):
    """Compiled where the volume is mounted at --mount_path (a notebook pod): the module is
    staged on it, and the pods, which mount it at the same path, import it from there."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    flags = [
        f"--module_file={HOOK}",
        "--pvc_name=data",
        f"--mount_path={mount}",
        f"--user_code_root={mount}/code",
    ]
    assert run_kubeflow.main(compile_argv(tmp_path, *flags)) == 0
    out = capsys.readouterr().out
    assert "Trainer: the project's run_fn with your model hook penguin_hook.build_model" in out
    with open(tmp_path / "p.yaml") as handle:
        spec = next(yaml.safe_load_all(handle))
    parameters = spec["root"]["dag"]["tasks"]["Trainer"]["inputs"]["parameters"]
    module = json.loads(parameters["user_module"]["runtimeValue"]["constant"])
    assert module["uri"] == f"{mount}/code/{module['digest']}"
    assert f"staged {HOOK} for the pods (Trainer): {module['uri']}" in out
    assert sorted(os.listdir(module["uri"])) == [user_code_lib.MANIFEST_FILE, "penguin_hook.py"]


def test_no_transform_materialize_gives_the_trainer_task_examplegen_s_examples(tmp_path, capsys):
    """As a local run (tests/pipeline/test_transform_materialize.py): Transform writes the graph
    only, and the Trainer task's examples come from the ExampleGen task."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    flags = [
        f"--module_file={TFX_STYLE}",
        "--pvc_name=data",
        f"--mount_path={mount}",
        f"--user_code_root={mount}/code",
    ]

    def tasks(*more: str) -> dict:
        assert run_kubeflow.main(compile_argv(tmp_path, *flags, *more)) == 0, capsys.readouterr()
        with open(tmp_path / "p.yaml") as handle:
            spec = next(yaml.safe_load_all(handle))
        return spec["root"]["dag"]["tasks"], spec["components"]

    def examples_producer(dag: dict) -> str:
        artifacts = dag["Trainer"]["inputs"]["artifacts"]
        return artifacts["examples"]["taskOutputArtifact"]["producerTask"]

    dag, components = tasks("--no_transform_materialize")
    assert examples_producer(dag) == "CsvExampleGen"
    transform_outputs = components[dag["Transform"]["componentRef"]["name"]]["outputDefinitions"]
    assert "transformed_examples" not in transform_outputs["artifacts"]
    dag, components = tasks()
    assert examples_producer(dag) == "Transform"
    transform_outputs = components[dag["Transform"]["componentRef"]["name"]]["outputDefinitions"]
    assert "transformed_examples" in transform_outputs["artifacts"]
