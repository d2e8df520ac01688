"""`deploy --recurring CRON`'s checks before anything is uploaded: KFP's six-field cron (seconds
first, robfig/cron v1.2.0 as KFP 2.14.3's API server parses it), --max_concurrency's range, and
--recurring with --run. The recurring run on KFP itself: test_local_cluster_kfp_recurring.py."""

from __future__ import annotations

import pytest

from components import ConfigError
from kubeflow import recurring, run_kubeflow


@pytest.mark.parametrize(
    "cron",
    [
        "0 0 2 * * *",
        "*/10 * * * * *",
        "0 30 9-17/2 1,15 jan-jun mon-fri",
        "0 0 0 ? * SUN",
        "@hourly",
        "@every 1h30m",
    ],
)
def test_kfps_cron_forms_pass(cron):
    assert recurring.check_cron(cron) == cron


@pytest.mark.parametrize(
    ("cron", "says"),
    [
        ("0 2 * * *", "5 fields (Unix cron's 5: KFP would read the first as seconds)"),
        ("0 0 2 * * * *", "7 fields;"),
        ("0 60 * * * *", "minute field '60': '60' is not within 0-59"),
        ("0 0 24 * * *", "hour field '24': '24' is not within 0-23"),
        ("0 0 0 0 * *", "day of month field '0': '0' is not within 1-31"),
        ("0 0 0 * 13 *", "month field '13': '13' is not within 1-12"),
        ("0 0 0 * * 7", "day of week field '7': '7' is not within 0-6"),
        ("0 0 0 * * fri-mon", "day of week field 'fri-mon': 'fri-mon' is not within 0-6"),
        ("*/0 * * * * *", "second field '*/0': step '0' is not a positive number"),
        ("0 x * * * *", "minute field 'x': 'x' is not a number"),
        ("@fortnightly", "unknown descriptor"),
    ],
)
def test_a_bad_cron_is_one_line_naming_the_field_and_the_form(cron, says):
    with pytest.raises(ConfigError) as raised:
        recurring.check_cron(cron)
    message = str(raised.value)
    assert message.startswith(f"invalid --recurring {cron!r}: {says}"), message
    assert "KFP's cron has 6 fields, seconds first" in message and "\n" not in message


def test_max_concurrency_is_kfps_range():
    assert recurring.check_max_concurrency(10) == 10
    for value in (0, 11):
        with pytest.raises(ConfigError, match=f"invalid --max_concurrency {value}: .* 1 to 10"):
            recurring.check_max_concurrency(value)


def test_the_cli_refuses_before_anything_is_read_or_uploaded(tmp_path, capsys):
    """Exit 2 with one `error:` line; the package (absent here) and the endpoint (none) are not
    even looked at."""
    missing = str(tmp_path / "none.yaml")
    cases = [
        (["--recurring=0 2 * * *"], "invalid --recurring '0 2 * * *': 5 fields"),
        (["--recurring=@hourly", "--max_concurrency=0"], "invalid --max_concurrency 0"),
        (["--recurring=@hourly", "--run"], "--recurring creates a recurring run"),
    ]
    for flags, says in cases:
        assert run_kubeflow.main(["deploy", f"--package={missing}", *flags]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: {says}"), line


def test_recurring_needs_exactly_one_action(capsys):
    with pytest.raises(SystemExit):
        run_kubeflow.parse_args(["recurring", "--disable", "a", "--delete", "b"])
    assert "not allowed with argument" in capsys.readouterr().err
    args = run_kubeflow.parse_args(["recurring", "--delete", "a"])
    assert (args.delete, args.disable, args.enable) == ("a", None, None)
