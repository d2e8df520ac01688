"""What every entry point shares: CUDA plugin-registration noise dropped from fd 2 (children
included), everything else kept; the exit that runs atexit handlers but skips teardown."""

from __future__ import annotations

import os
import subprocess
import sys

from pipeline import entrypoint

NOISE = (
    "2026-12-01 08:00:00.0: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:479] "
    "Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT when "
    "one has already been registered\n"
)


def test_noise_is_dropped_and_real_errors_pass(capfd):
    with entrypoint.filtered_stderr():
        os.write(2, NOISE.encode())
        os.write(2, b"E tensorflow/core/real.cc:1] a real error\n")
        sys.stderr.write("python stderr\n")
        subprocess.run(
            [sys.executable, "-c", f"import os; os.write(2, {NOISE.encode()!r} + b'child\\n')"],
            check=True,
        )
        os.write(2, b"partial")
    err = capfd.readouterr().err
    assert "Unable to register" not in err
    assert "a real error\n" in err and "python stderr\n" in err and "child\n" in err
    assert "partial" in err  # a last line without a newline is kept


def test_exit_runs_atexit_handlers_and_keeps_the_code():
    script = (
        "import atexit, sys\n"
        "from pipeline import entrypoint\n"
        "atexit.register(lambda: print('cleaned up', flush=True))\n"
        "print('summary')\n"
        "entrypoint.exit_without_teardown(3)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 3
    assert result.stdout.splitlines() == ["summary", "cleaned up"]
