"""run_local's flags and input errors: a clear one-line message and exit code 2, before any
component starts."""

from __future__ import annotations

import pytest

from pipeline import run_local
from pipeline.local import policy as local


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
    big = local.choose_beam("auto", None, local.IN_MEMORY_LIMIT_BYTES, [], cores=8)
    assert (big.mode, big.num_workers) == ("multi_processing", 8)
    few_cores = local.choose_beam("auto", None, 100 * local.IN_MEMORY_LIMIT_BYTES, [], cores=2)
    assert (few_cores.mode, few_cores.num_workers) == ("in_memory", 1)
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
        (["--strategy", "mirrored", "--ps", "1"], "training.ps (--ps) is only valid with strategy"),
        (["--strategy", "parameter_server", "--workers", "2"], "training.ps (--ps) must be >= 1"),
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


# --- issue 19: messages and exit codes --------------------------------------------------------


def test_misspelled_flag_is_one_line_with_the_closest_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(["--learnig_rate", "0.1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err
    assert "--learnig_rate: did you mean --learning_rate?" in err


def test_data_given_a_file_says_to_pass_its_directory(capsys, tmp_path, write_csv):
    path = write_csv("rows.csv", "a,b\n1,x\n2,y\n")
    code = run_local.main(["--data", path, "--label", "b", "--output_root", str(tmp_path / "o")])
    assert code == run_local.EXIT_BAD_INPUT
    assert f"pass --data {write_csv.dir}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--images", "x", "--task", "regression"], "--task: for CSV data"),
        (["--delimiter", ";;"], "--delimiter must be one character"),
        (["--exclude_columns", "a", "--keep_columns", "a"], "in both --exclude_columns and"),
        (["--data", "d", "--label", "y", "--exclude_columns", "y"], "names the label column"),
        (["--images", "x", "--keep_text_columns", "t"], "--keep_text_columns: for CSV data"),
    ],
)
def test_column_and_task_flag_rules(capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(flags)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_keep_text_columns_names_a_column_the_files_lack(capsys, tmp_path, write_csv):
    write_csv("rows.csv", "when,b\n2013-01-01,x\n2013-01-02,y\n")
    code = run_local.main(
        ["--data", write_csv.dir, "--label", "b", "--output_root", str(tmp_path / "o")]
        + ["--keep_text_columns", "whem"]
    )
    assert code == run_local.EXIT_BAD_INPUT
    assert "--keep_text_columns names column(s) ['whem']" in capsys.readouterr().err


def test_one_class_label_stops_before_any_component(capsys, tmp_path, write_csv):
    write_csv("rows.csv", "a,b\n1,x\n2,x\n3,x\n")
    out = tmp_path / "out"
    code = run_local.main(["--data", write_csv.dir, "--label", "b", "--output_root", str(out)])
    assert code == run_local.EXIT_BAD_INPUT
    assert "one distinct value ('x')" in capsys.readouterr().err
    assert not out.exists()


def test_rows_without_label_beyond_the_allowed_fraction_stop_with_one_line(
    capsys, tmp_path, write_csv
):
    write_csv(
        "a.csv", "x,y\n" + "".join(f"{i % 4},{'' if i < 2 else 'ab'[i % 2]}\n" for i in range(20))
    )
    code = run_local.main(
        ["--data", write_csv.dir, "--label", "y", "--output_root", str(tmp_path / "o")]
    )
    assert code == run_local.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: 2 of 20 row(s) (10.0%) in ") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()  # stopped before the run guard made its folder


def test_class_weights_are_for_tabular_classification(capsys, tmp_path):
    code = run_local.main(
        ["--dataset", "digits", "--class_weight", "balanced", "--output_root", str(tmp_path)]
    )
    assert code == run_local.EXIT_BAD_INPUT
    assert "training.class_weight (--class_weight)" in capsys.readouterr().err


def test_no_infer_feature_shape_with_a_curated_schema_is_one_line(capsys, tmp_path):
    """The penguins' curated schema is imported as it is: shape inference is SchemaGen's."""
    code = run_local.main(["--no_infer_feature_shape", "--output_root", str(tmp_path)])
    assert code == run_local.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "dataset.infer_feature_shape (--no_infer_feature_shape)" in err and err.count("\n") == 1
