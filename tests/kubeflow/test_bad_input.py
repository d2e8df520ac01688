"""Bad input to compile and deploy: one clear error naming the flag, and nothing written or
uploaded."""

from __future__ import annotations

from unittest import mock

import pytest
import yaml

from kubeflow import deploy, run_kubeflow

IMAGE = "registry.example.com/tfx-scaleout@sha256:" + "1" * 64
GPU_IMAGE = "registry.example.com/tfx-scaleout-gpu@sha256:" + "2" * 64


def compile_argv(tmp_path, *flags: str, root: str = "gs://bucket/tfx", image: str = IMAGE):
    return [
        "compile",
        f"--pipeline_root={root}",
        f"--image={image}",
        f"--gpu_image={GPU_IMAGE}",
        f"--output={tmp_path / 'p.yaml'}",
        *flags,
    ]


@pytest.mark.parametrize(
    ("root", "flags", "message"),
    [
        (
            "/mnt/pipeline",
            ["--pvc_name=pipeline", "--mount_path=/mnt/pipeline"],
            "invalid --pipeline_root /mnt/pipeline: Kubeflow Pipelines' launcher accepts only "
            "object-store pipeline roots",
        ),
        ("file:///tmp/root", [], "invalid --pipeline_root file:///tmp/root: Kubeflow Pipelines'"),
        # s3:// and minio:// roots are the launcher's; the serving directory then is not.
        (
            "s3://bucket/tfx",
            [],
            "invalid --serving_model_dir s3://bucket/tfx/serving_model: the Pusher and "
            "BaselineModel pods share it (TensorFlow has no s3:// or minio:// file system here",
        ),
        ("minio://mlpipeline/v2", [], "invalid --serving_model_dir minio://mlpipeline/v2/serving"),
        ("minio://", [], "invalid --pipeline_root minio:: Kubeflow Pipelines' launcher"),
        ("gs://", [], "invalid --pipeline_root gs:: Kubeflow Pipelines' launcher"),
    ],
)
def test_unsupported_pipeline_roots(tmp_path, capsys, root, flags, message):
    assert run_kubeflow.main(compile_argv(tmp_path, *flags, root=root)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--pvc_name=pipeline"], "--pvc_name 'pipeline' needs --mount_path"),
        (["--pvc_name=pipeline", "--mount_path=mnt"], "needs --mount_path, an absolute path"),
        (["--mount_path=/mnt/pipeline"], "--mount_path needs --pvc_name"),
        (
            ["--serving_model_dir=/srv/models"],
            "invalid --serving_model_dir /srv/models: the Pusher and BaselineModel pods share it",
        ),
        (
            ["--pvc_name=data", "--mount_path=/mnt/data", "--serving_model_dir=/srv/models"],
            "or a path under --mount_path /mnt/data",
        ),
        (
            ["--data_root=s3://bucket/penguins", "--label=species"],
            "invalid --data_root s3://bucket/penguins",
        ),
        (["--images=minio://bucket/flowers", "--schema=schemas/digits/schema.pbtxt"], "--images"),
    ],
)
def test_volume_and_data_locations(tmp_path, capsys, flags, message):
    assert run_kubeflow.main(compile_argv(tmp_path, *flags)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize(
    "image", ["registry.example.com/tfx-scaleout", "localhost:5000/tfx-scaleout", "tfx-scaleout"]
)
def test_image_without_tag(tmp_path, capsys, image):
    argv = compile_argv(tmp_path, "--allow_unpinned_images", image=image)
    assert run_kubeflow.main(argv) == 2
    err = capsys.readouterr().err
    assert f"--image {image!r} names no tag or digest" in err
    assert not (tmp_path / "p.yaml").exists()


@pytest.fixture(scope="module")
def penguins_package(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("package") / "penguins.yaml"
    argv = compile_argv(path.parent)
    argv[-1] = f"--output={path}"
    assert run_kubeflow.main(argv) == 0
    return str(path)


def _deploy_refused(package: str, *flags: str) -> None:
    """Refused before any connection: deploy.connect must not be reached."""
    with mock.patch.object(deploy, "connect", side_effect=AssertionError("connected")) as connect:
        code = run_kubeflow.main(
            ["deploy", f"--package={package}", "--endpoint=http://127.0.0.1:1", *flags]
        )
    assert code == run_kubeflow.EXIT_BAD_INPUT
    connect.assert_not_called()


def test_deploy_refuses_a_package_compiled_for_another_pipeline(penguins_package, capsys):
    _deploy_refused(penguins_package, "--pipeline_name=digits-pipeline", "--run")
    err = capsys.readouterr().err
    assert "invalid --pipeline_name 'digits-pipeline'" in err
    assert "was compiled for pipeline 'penguins-pipeline'" in err


def test_deploy_refuses_resolver_executors(penguins_package, tmp_path, capsys):
    with open(penguins_package) as handle:
        documents = list(yaml.safe_load_all(handle))
    documents[0]["deploymentSpec"]["executors"]["old_resolver"] = {"resolver": {}}
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump_all(documents))
    _deploy_refused(str(old))
    assert "executor(s) ['old_resolver'] are neither containers nor importers" in (
        capsys.readouterr().err
    )


def test_deploy_refuses_a_file_that_is_no_pipeline(tmp_path, capsys):
    other = tmp_path / "values.yaml"
    other.write_text("replicas: 3\n")
    _deploy_refused(str(other))
    assert f"invalid --package {other}: not a compiled KFP pipeline file" in capsys.readouterr().err


def test_deploy_refuses_a_run_pipeline_root_the_launcher_cannot_open(penguins_package, capsys):
    _deploy_refused(penguins_package, "--run", "--run_pipeline_root=/mnt/runs")
    assert "invalid --run_pipeline_root /mnt/runs" in capsys.readouterr().err


def test_matching_pipeline_name_is_accepted(penguins_package):
    assert deploy.check_package(penguins_package, "penguins-pipeline").name == "penguins-pipeline"
    assert deploy.check_package(penguins_package, None) == deploy.Package(
        "penguins-pipeline", "gs://bucket/tfx"
    )
