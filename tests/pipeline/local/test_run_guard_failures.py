"""How a component failure is put into words (run_guard.describe_failure)."""

from __future__ import annotations

import errno

from pipeline.local import guard as run_guard


def _chained(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as cause:
            raise outer from cause
    except BaseException as error:
        return error


def test_disk_full_names_the_file():
    error = _chained(
        RuntimeError("Transform failed"),
        OSError(errno.ENOSPC, "No space left on device", "/out/Split-train/data.gz"),
    )
    assert run_guard.describe_failure(error) == (
        "disk full (or file size limit reached) while writing /out/Split-train/data.gz: "
        "No space left on device"
    )


def test_disk_full_without_a_file_names_the_beam_step():
    error = _chained(
        RuntimeError(
            "OSError: [Errno 27] File too large "
            "[while running 'EncodeAndWrite[TransformIndex1]/WriteToTFRecord/WriteShard0']"
        ),
        OSError(errno.EFBIG, "File too large"),
    )
    assert run_guard.describe_failure(error) == (
        "disk full (or file size limit reached) while writing an output file (Beam step "
        "EncodeAndWrite[TransformIndex1]/WriteToTFRecord/WriteShard0): File too large"
    )


def test_other_failures_are_their_own_text():
    assert run_guard.describe_failure(ValueError("bad label")) == "bad label"
