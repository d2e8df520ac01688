"""A user's own module (TFX's `module_file`) at run time: where it was staged and how an executor,
a training task or a Beam worker imports it.

The runner (pipeline.user_code) stages the module file and every module it imports from its own
folder under the pipeline root, in a directory named by a digest of their syntax trees, and hands
the components a UserModule (the exec property USER_MODULE_KEY, also carried by training tasks).
Whoever runs user code calls activate(): the staged directory (copied to local disk first when it
is on an object store) goes first on sys.path and on PYTHONPATH, so that processes started from
there (training tasks, Beam's multi-process workers) import it too, and any earlier version of
those modules is dropped from sys.modules. Nothing is built or installed: an edit is one new
directory, and the same behaviour (a comment edit) is the same directory.

Beam SDK workers of a portable, Flink, Spark or Dataflow run do not inherit this process's
environment: with_beam_package() adds the staged directory as a wheel to the Beam pipeline's
--extra_package flags (as TFX's executors add the wheel of their module_file), which Beam stages
to every SDK worker and the worker's boot installs (pipeline.beam.boot, Beam's own boot in its
images and on Dataflow). The wheel is written by hand (a zip of the staged files and its
metadata, no pip) once per digest on the executor's machine: a few milliseconds.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable
from typing import Any

# Exec property of every component that runs user code (Transform, Trainer, Evaluator).
USER_MODULE_KEY = "user_module"
# Written into every staged directory: the module names it holds (what activate() reloads).
MANIFEST_FILE = "_tfx_scaleout_user_code.json"
_ENV_PATH = "PYTHONPATH"


@dataclasses.dataclass(frozen=True)
class UserModule:
    """A staged user module: its import name, the staged directory (a local path or an object-store
    URI) and the digest of its files' syntax trees (the directory's last name)."""

    module: str
    uri: str
    digest: str
    # The file the user named (for messages), as given on the command line.
    source: str = ""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> UserModule | None:
        if not text:
            return None
        values = json.loads(text)
        return cls(**values) if values else None


def from_exec_properties(exec_properties: dict[str, Any]) -> UserModule | None:
    return UserModule.from_json(exec_properties.get(USER_MODULE_KEY))


def _local_copy(user_module: UserModule) -> str:
    """The staged directory on local disk: itself when local, else copied once per digest."""
    if "://" not in user_module.uri:
        return user_module.uri
    import tensorflow as tf

    target = os.path.join(tempfile.gettempdir(), "tfx-scaleout-user-code", user_module.digest)
    if os.path.isfile(os.path.join(target, MANIFEST_FILE)):
        return target
    if not tf.io.gfile.exists(f"{user_module.uri}/{MANIFEST_FILE}"):
        raise _not_staged(user_module)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f"{user_module.digest}-", dir=os.path.dirname(target))
    for directory, _, files in tf.io.gfile.walk(user_module.uri):
        relative = os.path.relpath(directory.rstrip("/"), user_module.uri.rstrip("/"))
        os.makedirs(os.path.join(scratch, relative), exist_ok=True)
        for name in files:
            tf.io.gfile.copy(
                f"{directory.rstrip('/')}/{name}", os.path.join(scratch, relative, name), True
            )
    with contextlib.suppress(OSError):  # another process copied the same digest first
        os.rename(scratch, target)
    return target


def _not_staged(user_module: UserModule) -> FileNotFoundError:
    return FileNotFoundError(
        f"the user module {user_module.module} ({user_module.source or 'module_file'}) is "
        f"not staged at {user_module.uri} (removed since the pipeline was compiled?): "
        "compile or run the pipeline again, which stages it"
    )


def module_names(directory: str) -> list[str]:
    with open(os.path.join(directory, MANIFEST_FILE), encoding="utf-8") as handle:
        return list(json.load(handle)["modules"])


def activate(user_module: UserModule | None) -> str | None:
    """Makes the staged module importable in this process and in the processes it starts; returns
    the local directory (None without a user module)."""
    if user_module is None:
        return None
    directory = _local_copy(user_module)
    if not os.path.isfile(os.path.join(directory, MANIFEST_FILE)):
        raise _not_staged(user_module)
    tops = {name.split(".")[0] for name in module_names(directory)}
    for name in list(sys.modules):
        if name.split(".")[0] in tops:
            module = sys.modules[name]
            if not (getattr(module, "__file__", "") or "").startswith(directory + os.sep):
                del sys.modules[name]
    if directory not in sys.path:
        sys.path.insert(0, directory)
    paths = [p for p in os.environ.get(_ENV_PATH, "").split(os.pathsep) if p]
    if directory not in paths:
        os.environ[_ENV_PATH] = os.pathsep.join([directory, *paths])
    importlib.invalidate_caches()
    return directory


def load_function(path: str) -> Callable[..., Any]:
    """`package.module.function` imported (after activate() for a user module)."""
    module_name, _, function = path.rpartition(".")
    return getattr(importlib.import_module(module_name), function)


# --- Beam SDK workers -------------------------------------------------------------------------


def distribution_name(digest: str) -> str:
    return f"tfx_scaleout_user_code_{digest}"


def beam_package(user_module: UserModule, out_dir: str | None = None) -> str:
    """A wheel of the staged directory (its modules at the top level, as on sys.path), built
    once per digest; returns its path."""
    directory = _local_copy(user_module)
    out_dir = out_dir or os.path.join(tempfile.gettempdir(), "tfx-scaleout-user-code-wheels")
    name = distribution_name(user_module.digest)
    path = os.path.join(out_dir, f"{name}-0-py3-none-any.whl")
    if os.path.isfile(path):
        return path
    os.makedirs(out_dir, exist_ok=True)
    files: list[tuple[str, bytes]] = []
    for folder, _, names in sorted(os.walk(directory)):
        for file_name in sorted(names):
            if file_name.endswith(".py"):
                full = os.path.join(folder, file_name)
                with open(full, "rb") as handle:
                    files.append(
                        (os.path.relpath(full, directory).replace(os.sep, "/"), handle.read())
                    )
    tops = sorted({n.split(".")[0] for n in module_names(directory)})
    info = f"{name}-0.dist-info"
    metadata = [
        (f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0\n".encode()),
        (
            f"{info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: tfx-scaleout\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n",
        ),
        (f"{info}/top_level.txt", "".join(f"{t}\n" for t in tops).encode()),
    ]
    records = [
        f"{entry},sha256={_urlsafe_sha256(data)},{len(data)}" for entry, data in files + metadata
    ]
    records.append(f"{info}/RECORD,,")
    scratch = f"{path}.{os.getpid()}.tmp"
    with zipfile.ZipFile(scratch, "w", zipfile.ZIP_DEFLATED) as wheel:
        for entry, data in [*files, *metadata, (f"{info}/RECORD", "\n".join(records).encode())]:
            # A fixed date: the same files are the same wheel, byte for byte.
            wheel.writestr(zipfile.ZipInfo(entry, date_time=(1980, 1, 1, 0, 0, 0)), data)
    os.replace(scratch, path)
    return path


def _urlsafe_sha256(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def with_beam_package(beam_pipeline_args: list[str], user_module: UserModule | None) -> list[str]:
    """The Beam pipeline arguments with the user module's wheel staged for the SDK workers,
    for runners whose workers are not this process's children (portable, Flink, Spark,
    Dataflow); unchanged for the DirectRunner and LOOPBACK workers (this process or its
    children, which activate()'s sys.path and PYTHONPATH reach)."""
    from components import compat

    if user_module is None or compat.runs_locally(beam_pipeline_args):
        return list(beam_pipeline_args)
    flag = f"--extra_package={beam_package(user_module)}"
    return list(beam_pipeline_args) if flag in beam_pipeline_args else [*beam_pipeline_args, flag]


def prepare_beam_executor(executor, exec_properties: dict[str, Any]) -> UserModule | None:
    """For a Beam component's executor that runs user code (Transform, Evaluator): the staged
    module importable here and in every SDK worker its Beam pipeline starts."""
    from components import compat

    module = from_exec_properties(exec_properties)
    if module is not None:
        activate(module)
        args = with_beam_package(compat.beam_pipeline_args(executor), module)
        compat.set_beam_pipeline_args(executor, args)
    return module
