"""The images install exactly what CI installs: setup.sh's pip steps (pip version, the lock, the
project without dependencies), in the same order; the GPU image adds only TensorFlow's CUDA
libraries for the lock's TensorFlow; both run as a non-root user at the paths the compiled
pipeline refers to. No Docker engine is needed to check that."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

import pytest

from kubeflow.config import IMAGE_DIGITS_DIR, IMAGE_PROJECT_DIR, IMAGE_VENV
from pipeline import datasets

ROOT = datasets.PROJECT_ROOT
# Flags that change how pip prints or caches, not what it installs.
QUIET_FLAGS = {"--quiet", "-q", "--no-cache-dir"}


def _read(path: str) -> str:
    with open(os.path.join(ROOT, path)) as handle:
        return handle.read()


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", _read(dockerfile))
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, arguments = line.partition(" ")
            result.append((instruction.upper(), arguments.strip()))
    return result


def _pip_installs(commands: list[str]) -> list[tuple[str, ...]]:
    """Each `pip install` as its normalized arguments: the interpreter and quiet flags dropped;
    an editable install of the project (setup.sh) equals a regular one (the image)."""
    installs = []
    for command in commands:
        for part in command.split("&&"):
            words = shlex.split(part.replace('"$VENV/bin/python"', "python"))
            if "pip" not in words or "install" not in words:
                continue
            arguments = words[words.index("install") + 1 :]
            arguments = [w for w in arguments if w not in QUIET_FLAGS and w != "-e"]
            installs.append(tuple(arguments))
    return installs


def _setup_installs() -> list[tuple[str, ...]]:
    return _pip_installs(_read("setup.sh").splitlines())


def _docker_installs(dockerfile: str) -> list[tuple[str, ...]]:
    return _pip_installs([args for name, args in _instructions(dockerfile) if name == "RUN"])


def _lock_pin(package: str) -> str:
    for line in _read("requirements.lock").splitlines():
        name, sep, version = line.partition("==")
        if sep and name.strip().lower() == package:
            return version.strip()
    raise AssertionError(f"{package} is not pinned in requirements.lock")


def test_ci_installs_through_setup_sh():
    assert "bash setup.sh" in _read(".ci/run")
    assert _setup_installs() == [
        ("--upgrade", "pip==24.2"),
        ("-r", "requirements.lock"),
        ("--no-deps", "--no-build-isolation", "."),
    ]


def test_image_installs_exactly_what_setup_sh_installs():
    assert _docker_installs("kubeflow/Dockerfile") == _setup_installs()


def test_gpu_image_adds_only_the_cuda_libraries_of_the_locked_tensorflow():
    setup = _setup_installs()
    installs = _docker_installs("kubeflow/Dockerfile.gpu")
    extra = [i for i in installs if i not in setup]
    assert [i for i in installs if i in setup] == setup
    assert extra == [
        ("-c", "requirements.lock", f"tensorflow[and-cuda]=={_lock_pin('tensorflow')}")
    ]
    # Installed after the lock and before the project, like every other dependency.
    assert installs.index(extra[0]) == installs.index(("-r", "requirements.lock")) + 1


def test_gpu_base_is_cuda_12_3_for_tensorflow_2_16():
    assert _lock_pin("tensorflow") == "2.16.2"
    base = [args for name, args in _instructions("kubeflow/Dockerfile.gpu") if name == "FROM"]
    assert len(base) == 1 and base[0].startswith("nvidia/cuda:12.3.")
    assert "python3.10" in _read("kubeflow/Dockerfile.gpu")


@pytest.mark.parametrize("dockerfile", ["kubeflow/Dockerfile", "kubeflow/Dockerfile.gpu"])
def test_paths_user_and_environment(dockerfile):
    instructions = _instructions(dockerfile)
    users = [args for name, args in instructions if name == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    # No RUN after the switch to the unprivileged user needs root.
    assert instructions[-1][0] == "USER" or all(
        name != "RUN" for name, _ in instructions[instructions.index(("USER", users[-1])) :]
    )
    assert ("WORKDIR", IMAGE_PROJECT_DIR) in instructions
    env = " ".join(args for name, args in instructions if name == "ENV")
    assert "TF_USE_LEGACY_KERAS=1" in env and f"VIRTUAL_ENV={IMAGE_VENV}" in env
    copies = [args for name, args in instructions if name == "COPY"]
    assert "schemas ./schemas" in copies and "requirements.lock ./" in copies


def test_image_writes_the_digits_where_the_compiled_pipeline_reads_them():
    """`compile --dataset digits` points data_root at IMAGE_DIGITS_DIR: the project's image
    writes them there, with the project's own command, after the project is installed and
    before the switch to the unprivileged user (the files are read-only for the pods)."""
    instructions = _instructions("kubeflow/Dockerfile")
    write = ("RUN", f"python -m pipeline.image_data digits --out {IMAGE_DIGITS_DIR}")
    assert write in instructions
    install = next(
        i for i, (name, args) in enumerate(instructions) if name == "RUN" and "pip check" in args
    )
    user = next(i for i, (name, _) in enumerate(instructions) if name == "USER")
    assert install < instructions.index(write) < user


def test_beam_harness_matches_the_locked_beam():
    beam = _lock_pin("apache-beam")
    text = _read("kubeflow/Dockerfile")
    assert f"apache/beam_python3.10_sdk:{beam} " in text
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in text


def test_build_script_needs_a_registry_and_a_docker_engine(tmp_path):
    script = os.path.join(ROOT, "kubeflow", "build_images.sh")
    bash = shutil.which("bash")
    no_registry = subprocess.run(
        [bash, script], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True
    )
    assert no_registry.returncode == 2 and "set REGISTRY" in no_registry.stderr
    # A PATH with the tools the script uses but no docker.
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("git", "dirname"):
        if shutil.which(tool):
            os.symlink(shutil.which(tool), tools / tool)
    no_docker = subprocess.run(
        [bash, script, "--registry", "registry.example.com/me"],
        env={"PATH": str(tools)},
        capture_output=True,
        text=True,
    )
    assert no_docker.returncode == 1 and "no docker command" in no_docker.stderr
