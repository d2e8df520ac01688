"""Recurring runs on Kubeflow Pipelines (KFP's ScheduledWorkflow controller starts their runs):
KFP's cron checked before anything is uploaded, a recurring run of an uploaded version created,
disabled, enabled or deleted, as kfp.Client does (`run_kubeflow.py deploy --recurring CRON`,
`run_kubeflow.py recurring`)."""

from __future__ import annotations

import logging as std_logging

from components import PROGRESS_LOGGER, ConfigError
from kubeflow.deploy import Connection, Deployment, api_error, network_errors

progress_log = std_logging.getLogger(PROGRESS_LOGGER)

# KFP's cron (github.com/robfig/cron v1.2.0's Parse, which the API server checks a recurring run
# with and the scheduled-workflow controller schedules by): seconds first, then the five fields
# of Unix cron. It would also take five fields, read as seconds to days of the month, so that
# Unix's "*/5 * * * *" would fire every 5 seconds: five are refused here.
CRON_FIELDS = (
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    (
        "month",
        1,
        12,
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ),
    ("day of week", 0, 6, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
CRON_DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
MAX_CONCURRENCY = 10  # the API server's limit (apiserver/server/api_converter.go)
RECURRING_ACTIONS = ("disable", "enable", "delete")


def _cron_value(text: str, low: int, names: tuple[str, ...]) -> int:
    if text.lower() in names:
        return names.index(text.lower()) + low
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a number")
    return int(text)


def _check_cron_field(field: str, low: int, high: int, names: tuple[str, ...]) -> None:
    for part in field.split(","):
        span, _, step = part.partition("/")
        if step and (not step.isdigit() or int(step) == 0):
            raise ValueError(f"step {step!r} is not a positive number")
        if span in ("*", "?"):
            continue
        first, _, last = span.partition("-")
        values = [_cron_value(end, low, names) for end in ((first, last) if last else (first,))]
        if any(not low <= value <= high for value in values) or values != sorted(values):
            raise ValueError(f"{span!r} is not within {low}-{high}")


def check_cron(cron: str, flag: str = "--recurring") -> str:
    """The cron expression when KFP takes it (six fields, seconds first, or a descriptor);
    else ConfigError, one line naming the flag, the field and the six-field form."""
    cron = " ".join(cron.split())
    form = (
        "KFP's cron has 6 fields, seconds first: SECOND MINUTE HOUR DAY MONTH WEEKDAY, e.g. "
        "'0 0 * * * *' hourly, '0 */5 * * * *' every 5 minutes"
    )
    if cron.startswith("@"):
        word, _, rest = cron.partition(" ")
        if (word in CRON_DESCRIPTORS and not rest) or (word == "@every" and rest):
            return cron
        raise ConfigError(f"invalid {flag} {cron!r}: unknown descriptor; {form}")
    fields = cron.split(" ")
    if len(fields) != len(CRON_FIELDS):
        hint = " (Unix cron's 5: KFP would read the first as seconds)" if len(fields) == 5 else ""
        raise ConfigError(f"invalid {flag} {cron!r}: {len(fields)} fields{hint}; {form}")
    for field, (name, low, high, names) in zip(fields, CRON_FIELDS, strict=True):
        try:
            _check_cron_field(field, low, high, names)
        except ValueError as error:
            message = f"invalid {flag} {cron!r}: {name} field {field!r}: {error}; {form}"
            raise ConfigError(message) from None
    return cron


def check_max_concurrency(value: int) -> int:
    if not 1 <= value <= MAX_CONCURRENCY:
        raise ConfigError(
            f"invalid --max_concurrency {value}: Kubeflow Pipelines allows 1 to {MAX_CONCURRENCY} "
            "runs of a recurring run at a time"
        )
    return value


def create_recurring_run(
    connection: Connection,
    deployment: Deployment,
    experiment: str,
    name: str,
    cron: str,
    max_concurrency: int = 1,
    no_catchup: bool = False,
    parameters: dict | None = None,
    pipeline_root: str | None = None,
) -> str:
    """A recurring run of the uploaded version on KFP's cron (check_cron's form); returns its
    id. The scheduled-workflow controller starts its runs; `recurring_run_action` stops it."""
    client, endpoint = connection.client, connection.endpoint
    try:
        experiment_id = client.create_experiment(experiment).experiment_id
        recurring = client.create_recurring_run(
            experiment_id=experiment_id,
            job_name=name,
            cron_expression=cron,
            max_concurrency=max_concurrency,
            no_catchup=no_catchup,
            pipeline_id=deployment.pipeline_id,
            version_id=deployment.version_id,
            params=parameters or {},
            pipeline_root=pipeline_root,
        )
    except network_errors() as error:
        raise api_error(f"creating recurring run {name}", endpoint, error) from error
    progress_log.info(
        "recurring run %s created (%s): %r, at most %d at a time",
        name,
        recurring.recurring_run_id,
        cron,
        max_concurrency,
    )
    return recurring.recurring_run_id


def recurring_run_action(connection: Connection, recurring_run_id: str, action: str) -> None:
    """Disables (no more runs until enabled; its runs so far stay), enables or deletes a
    recurring run, as kfp.Client does."""
    if action not in RECURRING_ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    client, endpoint = connection.client, connection.endpoint
    try:
        getattr(client, f"{action}_recurring_run")(recurring_run_id)
    except network_errors() as error:
        raise api_error(f"{action} recurring run {recurring_run_id}", endpoint, error) from error
    progress_log.info("recurring run %s: %sd", recurring_run_id, action)
