"""An output root that cannot be written: one clear error before anything starts."""

from __future__ import annotations

import os

from pipeline import run_local


def test_unwritable_output_root_is_one_clear_error(tmp_path, capsys):
    # Tests may run as root, where chmod 0555 stops nothing: a regular file where the output
    # directory must go fails for every user.
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("a file")
    output_root = str(blocker / "out")
    code = run_local.main(["--output_root", output_root])
    assert code == run_local.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: output directory ") and "is not writable" in err
    assert "Traceback" not in err
    assert not os.path.exists(output_root)
