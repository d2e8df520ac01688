"""run_local's flags and input errors: a clear one-line message and exit code 2, before any
component starts."""

from __future__ import annotations

import pytest

from pipeline import local, run_local


def test_data_without_label_is_a_usage_error(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(["--data", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--data and --label go together" in capsys.readouterr().err


def test_unknown_strategy_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(["--strategy", "magic"])
    assert exit_info.value.code == 2
    assert "--strategy: invalid choice: 'magic'" in capsys.readouterr().err


def test_missing_data_directory(capsys, tmp_path):
    code = run_local.main(
        ["--data", str(tmp_path / "none"), "--label", "y", "--output_root", str(tmp_path / "out")]
    )
    assert code == run_local.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: data directory ") and "(--data)" in err
    assert not (tmp_path / "out").exists()


def test_label_not_in_csv_names_file_and_column(capsys, tmp_path, write_csv):
    path = write_csv("rows.csv", "a,b\n1,x\n")
    code = run_local.main(
        ["--data", write_csv.dir, "--label", "kind", "--output_root", str(tmp_path / "out")]
    )
    assert code == run_local.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "label column 'kind' (--label)" in err and path in err


def test_out_of_range_value_names_the_field(capsys, tmp_path):
    code = run_local.main(["--train_fraction", "1.5", "--output_root", str(tmp_path)])
    assert code == run_local.EXIT_BAD_INPUT
    assert "train_fraction must be between" in capsys.readouterr().err


def test_beam_mode_auto_choice():
    small = local.choose_beam("auto", None, 1_000, [])
    assert (small.mode, small.num_workers) == ("in_memory", 1)
    big = local.choose_beam("auto", None, local.IN_MEMORY_LIMIT_BYTES, [])
    assert big.mode == (
        "multi_processing" if (__import__("os").cpu_count() or 1) > 1 else "in_memory"
    )
    images = local.choose_beam("auto", None, 10 * local.IN_MEMORY_LIMIT_BYTES, [], True)
    assert (images.mode, images.num_workers) == ("in_memory", 1)
    forced = local.choose_beam("multi_processing", 3, 10, ["--x=1"])
    assert (forced.mode, forced.num_workers, forced.extra_args) == (
        "multi_processing",
        3,
        ("--x=1",),
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--strategy", "mirrored", "--ps", "1"], "training.ps is only valid with strategy"),
        (["--strategy", "parameter_server", "--workers", "2"], "training.ps must be >= 1"),
        (
            ["--strategy", "multi_worker_mirrored", "--workers", "9", "--shard_policy", "file"],
            "'file' needs at least as many Transform shards as workers",
        ),
    ],
)
def test_bad_cluster_flags_fail_before_any_component(capsys, tmp_path, flags, message):
    code = run_local.main([*flags, "--output_root", str(tmp_path / "out")])
    assert code == run_local.EXIT_BAD_INPUT
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
