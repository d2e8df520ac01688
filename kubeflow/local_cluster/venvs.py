"""A virtual environment of its own, beside the project's, for a tool whose pins conflict with
the TFX 1.16 stack (kfp.local's kfp release in the tests, grpcio-tools' protoc for KFP's generated
Go modules): made from the Python the project's venv was made from, installed from PyPI once and
kept under ~/.cache/tfx-scaleout/ while its pins stay the same. Here rather than under tests/
because the local cluster's KFP build (builds.build_kfp) needs protoc too."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

ROOT = os.path.join(os.path.expanduser("~"), ".cache", "tfx-scaleout")


def python_of(name: str) -> str:
    return os.path.join(ROOT, name, "bin", "python")


def ensure(name: str, pins: list[str], python: str | None = None) -> str:
    """The interpreter of ~/.cache/tfx-scaleout/<name>, made (again) when its pins changed."""
    folder = os.path.join(ROOT, name)
    os.makedirs(ROOT, exist_ok=True)
    # Two processes at once (the test session's early builds and a test) make it once.
    with open(os.path.join(ROOT, f".{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure(name, folder, pins, python)


def _ensure(name: str, folder: str, pins: list[str], python: str | None) -> str:
    marker = os.path.join(folder, "tfx-scaleout-pins.txt")
    text = "".join(f"{pin}\n" for pin in pins)
    if os.path.exists(marker):
        with open(marker) as handle:
            if handle.read() == text:
                return python_of(name)
    base = python or os.path.join(sys.base_prefix, "bin", "python3")
    subprocess.run([base, "-m", "venv", "--clear", folder], check=True, capture_output=True)
    install = subprocess.run(
        [python_of(name), "-m", "pip", "install", "--quiet", *pins],
        capture_output=True,
        text=True,
    )
    if install.returncode != 0:
        raise RuntimeError(f"pip install {pins} into {folder} failed:\n{install.stderr[-3000:]}")
    with open(marker, "w") as handle:
        handle.write(text)
    return python_of(name)
