"""components.compat: the version check that guards every patch of TFX and Beam internals, and
the patches themselves."""

from __future__ import annotations

from importlib import metadata

import pytest

from components import compat


def test_the_installed_stack_is_the_one_the_patches_were_written_for():
    compat.check_versions()  # what importing the module ran
    for name, version in compat.WRITTEN_FOR.items():
        assert metadata.version(name) == version


def test_another_version_fails_naming_the_package_and_what_to_do():
    versions = dict(compat.WRITTEN_FOR, tfx="1.17.0")
    with pytest.raises(compat.CompatError) as error:
        compat.check_versions(installed=versions.__getitem__)
    message = str(error.value)
    assert "tfx 1.17.0 (written for 1.16.0)" in message
    assert "tfx-bsl" not in message
    assert "bash setup.sh" in message and "components/compat.py" in message


def test_a_missing_package_fails_too():
    def installed(name):
        if name == "apache-beam":
            raise metadata.PackageNotFoundError(name)
        return compat.WRITTEN_FOR[name]

    with pytest.raises(compat.CompatError, match="apache-beam not installed"):
        compat.check_versions(installed=installed)


def test_transform_processor_swap_is_undone_after_the_block():
    from tfx.components.transform import executor as tfx_transform_executor

    stock = tfx_transform_executor.TransformProcessor
    with compat.transform_processor(dict):
        assert tfx_transform_executor.TransformProcessor is dict
    assert tfx_transform_executor.TransformProcessor is stock
    assert compat.stock_transform_processor() is stock


def test_tfx_packages_itself_only_for_runners_off_this_machine(monkeypatch):
    from tfx.dsl.components.base import base_beam_executor
    from tfx.utils import dependency_utils

    built = []

    def stock(args):
        built.append(list(args))
        return [*args, "--extra_package=tfx_ephemeral.tar.gz"]

    monkeypatch.setattr(dependency_utils, "make_beam_dependency_flags", stock)
    direct = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
    flink = ["--runner=FlinkRunner", "--flink_master=localhost:8081"]
    with compat.no_tfx_sdist_for_direct_runner():
        # What every TFX Beam executor calls in its constructor.
        assert base_beam_executor.dependency_utils.make_beam_dependency_flags(direct) == direct
        assert dependency_utils.make_beam_dependency_flags([]) == []
        flink_args = dependency_utils.make_beam_dependency_flags(flink)
    assert flink_args == [*flink, "--extra_package=tfx_ephemeral.tar.gz"]
    assert built == [flink]
    # Outside the context TFX's own behaviour is back.
    assert dependency_utils.make_beam_dependency_flags(direct)[-1].startswith("--extra_package")
