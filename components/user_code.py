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
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import sys
import tempfile
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


def module_names(directory: str) -> list[str]:
    with open(os.path.join(directory, MANIFEST_FILE), encoding="utf-8") as handle:
        return list(json.load(handle)["modules"])


def activate(user_module: UserModule | None) -> str | None:
    """Makes the staged module importable in this process and in the processes it starts; returns
    the local directory (None without a user module)."""
    if user_module is None:
        return None
    directory = _local_copy(user_module)
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
