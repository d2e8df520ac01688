"""components.user_code where it runs: a staged module copied from an object store to local disk,
and the wheel that carries it to Beam SDK workers in other processes (portable, Flink, Spark,
Dataflow), installed as pipeline/beam/boot.py installs staged packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from components import user_code
from pipeline.beam import boot


def _staged(tmp_path, digest: str = "0123456789abcdef") -> user_code.UserModule:
    """A staged directory as pipeline.user_code.stage writes it: a module, a package it
    imports, the manifest."""
    directory = tmp_path / "root" / "_user_code" / digest
    (directory / "helpers").mkdir(parents=True)
    (directory / "my_model.py").write_text("from helpers import width\nWIDTH = width()\n")
    (directory / "helpers" / "__init__.py").write_text("def width():\n    return 7\n")
    manifest = {"modules": ["helpers", "my_model"], "files": {}}
    (directory / user_code.MANIFEST_FILE).write_text(json.dumps(manifest))
    return user_code.UserModule(module="my_model", uri=str(directory), digest=digest)


def test_a_module_staged_on_a_file_system_uri_is_copied_to_local_disk(tmp_path, monkeypatch):
    """The path pods take for gs:// (any URI TensorFlow's file systems open: file:// here)."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    local = _staged(tmp_path)
    remote = user_code.UserModule(
        module=local.module, uri=f"file://{local.uri}", digest=local.digest
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    directory = user_code.activate(remote)
    assert directory == str(tmp_path / "tmp" / "tfx-scaleout-user-code" / local.digest)
    assert sorted(os.listdir(directory)) == sorted(os.listdir(local.uri))
    assert sys.path[0] == directory and os.environ["PYTHONPATH"] == directory
    try:
        import my_model  # type: ignore[import-not-found]

        assert my_model.WIDTH == 7
        assert my_model.__file__ == os.path.join(directory, "my_model.py")
    finally:
        for name in ("my_model", "helpers"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("scheme", ["file://", ""])
def test_a_staged_module_that_is_gone_says_so(tmp_path, scheme):
    """On an object store, or on a volume (a local path in the pod)."""
    gone = user_code.UserModule(module="m", uri=f"{scheme}{tmp_path}/nothing", digest="d" * 16)
    with pytest.raises(FileNotFoundError, match="m .* is not staged at .*compile or run"):
        user_code.activate(gone)


@pytest.mark.parametrize(
    ("args", "staged"),
    [
        ([], False),
        (["--runner=DirectRunner", "--direct_running_mode=multi_processing"], False),
        (["--runner=PortableRunner", "--environment_type=LOOPBACK"], False),
        (["--runner=PortableRunner", "--environment_type=EXTERNAL"], True),
        (["--runner=FlinkRunner", "--flink_master=jm:8081"], True),
        (["--runner=DataflowRunner", "--project=p"], True),
    ],
)
def test_the_wheel_is_staged_for_workers_outside_this_process(tmp_path, args, staged):
    module = _staged(tmp_path)
    result = user_code.with_beam_package(args, module)
    extra = [a for a in result if a.startswith("--extra_package=")]
    assert bool(extra) == staged
    assert result[: len(args)] == args
    if staged:
        assert user_code.with_beam_package(result, module) == result  # added once
    assert user_code.with_beam_package(args, None) == args


def test_the_wheel_installs_as_the_beam_boot_installs_it_and_imports(tmp_path):
    module = _staged(tmp_path)
    wheel = user_code.beam_package(module, str(tmp_path / "wheels"))
    assert os.path.basename(wheel) == "tfx_scaleout_user_code_0123456789abcdef-0-py3-none-any.whl"
    # The same files make the same wheel (a digest's wheel is reused, never rebuilt).
    first = Path(wheel).read_bytes()
    os.remove(wheel)
    assert Path(user_code.beam_package(module, str(tmp_path / "wheels"))).read_bytes() == first
    with zipfile.ZipFile(wheel) as archive:
        assert "my_model.py" in archive.namelist()
        assert "helpers/__init__.py" in archive.namelist()
    target = tmp_path / "worker" / "site-packages"
    target.mkdir(parents=True)
    boot.install([wheel], None, str(target))
    distributions = boot.installed_modules(str(target))
    assert distributions == {
        "tfx_scaleout_user_code_0123456789abcdef-0.dist-info": ["helpers", "my_model"]
    }
    env = dict(os.environ, PYTHONPATH=str(target))
    where = boot.check_resolution(env, str(tmp_path), str(target), ["helpers", "my_model"])
    assert where["my_model"] == str(target / "my_model.py")
    printed = subprocess.run(
        [sys.executable, "-c", "import my_model; print(my_model.WIDTH)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed.strip() == "7"
