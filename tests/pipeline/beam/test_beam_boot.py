"""The SDK-harness boot's own steps on real files: which staged files it installs and in which
order, the install into a worker's directory, and the check that the harness imports the staged
code rather than the environment's copy. The boot end to end (a worker pool, Beam jobs) is in
test_portable_runner.py."""

from __future__ import annotations

import os
import sys
import zipfile

import pytest

from pipeline.beam import boot as beam_boot


def _wheel(directory, name: str, module: str) -> str:
    """A minimal real wheel holding one top-level package."""
    path = os.path.join(directory, f"{name}-1.0-py3-none-any.whl")
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{module}/__init__.py", "VALUE = 1\n")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        )
        wheel.writestr(f"{info}/top_level.txt", f"{module}\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


def test_packages_in_the_order_beam_stages_them(tmp_path):
    staged = tmp_path / "staged"
    staged.mkdir()
    for name in ("b.whl", "a.tar.gz", "workflow.tar.gz"):
        (staged / name).write_bytes(b"x")
    (staged / "extra_packages.txt").write_text("b.whl\na.tar.gz\n")
    names = ["a.tar.gz", "extra_packages.txt", "workflow.tar.gz", "b.whl"]
    assert beam_boot.packages_to_install(str(staged), names) == [
        str(staged / "b.whl"),
        str(staged / "a.tar.gz"),
        str(staged / "workflow.tar.gz"),
    ]
    # Files staged without a manifest entry (Beam's submission_environment_dependencies.txt)
    # are not packages.
    assert beam_boot.packages_to_install(str(staged), ["b.whl"]) == []
    (staged / "b.whl").unlink()
    with pytest.raises(beam_boot.BootError, match="listed but not retrieved"):
        beam_boot.packages_to_install(str(staged), names)


def test_install_into_the_worker_directory_and_resolve_there(tmp_path):
    wheel = _wheel(str(tmp_path), "staged_probe", "staged_probe_pkg")
    target = tmp_path / "site-packages"
    target.mkdir()
    beam_boot.install([wheel], None, str(target))
    assert beam_boot.installed_modules(str(target)) == {
        "staged_probe-1.0.dist-info": ["staged_probe_pkg"]
    }
    env = dict(os.environ, PYTHONPATH=str(target))
    where = beam_boot.check_resolution(env, str(tmp_path), str(target), ["staged_probe_pkg"])
    assert where == {"staged_probe_pkg": str(target / "staged_probe_pkg" / "__init__.py")}


def test_a_staged_module_the_environment_shadows_is_an_error(tmp_path):
    """`components` staged into the worker's directory, but the harness environment finds the
    environment's copy first (the directory is not on its path): the boot refuses."""
    target = tmp_path / "site-packages"
    (target / "components").mkdir(parents=True)
    (target / "components" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with pytest.raises(beam_boot.BootError, match="resolve outside this worker's install"):
        beam_boot.check_resolution(env, str(tmp_path), str(target), ["components"])


def test_a_package_pip_cannot_install_is_an_error_naming_it(tmp_path):
    broken = tmp_path / "broken-1.0.tar.gz"
    broken.write_bytes(b"not a tarball")
    target = tmp_path / "site-packages"
    target.mkdir()
    with pytest.raises(beam_boot.BootError, match=r"could not install .*broken-1\.0\.tar\.gz"):
        beam_boot.install([str(broken)], None, str(target))


def test_worker_pool_wrapper_runs_this_boot_with_this_interpreter(tmp_path, monkeypatch):
    started = {}

    class Pool:
        @staticmethod
        def start(**kwargs):
            started.update(kwargs)
            raise SystemExit(0)  # stop before serving

    from apache_beam.runners.worker import worker_pool_main

    monkeypatch.setattr(worker_pool_main, "BeamFnExternalWorkerPoolServicer", Pool)
    with pytest.raises(SystemExit):
        beam_boot.main(["worker_pool", "--service_port", "50321", "--work_dir", str(tmp_path)])
    assert started["port"] == 50321 and started["use_process"] is True
    wrapper = started["container_executable"]
    assert os.access(wrapper, os.X_OK)
    with open(wrapper) as handle:
        text = handle.read()
    assert f"'{sys.executable}' -I '{os.path.abspath(beam_boot.__file__)}'" in text
    assert f"--semi_persist_dir='{tmp_path}'" in text
