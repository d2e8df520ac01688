"""What every command-line entry point of the project shares (pipeline/run_local.py,
pipeline/predict.py, kubeflow/run_kubeflow.py): the process's stderr (file descriptor 2, which
child processes inherit) without the lines TensorFlow's CUDA build prints on every import on a
machine without GPUs (every other line, native or Python, passes through unchanged), and an exit
that skips the interpreter teardown's harmless TensorFlow tracebacks. Neither needs the local
runner's package (pipeline/local), which the Kubeflow front-end and the predictor do not import."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

# TensorFlow's CUDA wheels register their cuFFT/cuDNN/cuBLAS plugins twice (XLA and TF) and log
# each as an error; they say nothing about the run, and TF_CPP_MIN_LOG_LEVEL=3 would also hide
# real C++ errors.
NOISE = re.compile(rb"Unable to register cu(FFT|DNN|BLAS) factory: Attempting to register")


def _pump(read_fd: int, write_fd: int, noise: re.Pattern) -> None:
    pending = b""
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        kept = b"".join(line + b"\n" for line in lines if not noise.search(line))
        if kept:
            os.write(write_fd, kept)
    if pending and not noise.search(pending):
        os.write(write_fd, pending)
    os.close(read_fd)


@contextlib.contextmanager
def filtered_stderr(noise: re.Pattern = NOISE) -> Iterator[None]:
    """Inside: fd 2 is a pipe read by a thread that drops lines matching `noise`."""
    sys.stderr.flush()
    try:
        original = os.dup(2)
    except OSError:  # no stderr at all (closed): nothing to filter
        yield
        return
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    thread = threading.Thread(
        target=_pump, args=(read_fd, original, noise), name="stderr-filter", daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        # Restoring fd 2 closes this process's write end; the thread drains what is left
        # (a child process that outlives the run keeps the pipe open: do not wait for it).
        os.dup2(original, 2)
        thread.join(timeout=5)
        os.close(original)


def exit_without_teardown(code: int) -> NoReturn:
    """Ends the process after the atexit handlers ran and the streams are flushed, skipping
    the interpreter's teardown. TensorFlow functions that live until then (held by caches of
    Beam, TFMA and tf.Transform) are otherwise deleted after TensorFlow's modules have been
    cleared, and each prints an `Exception ignored in: AtomicFunction.__del__` traceback that
    says nothing about the run. Errors of the run itself were reported before this point."""
    try:
        atexit._run_exitfuncs()  # what the interpreter runs first when it exits normally
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
