"""Upload a compiled pipeline to Kubeflow Pipelines (a new version when it exists), start a run,
follow it to the end. kfp.Client (KFP REST API v2beta1) does the talking.

Credentials come from the environment, never from pipeline parameters (those are stored in
MLMD): KF_PIPELINES_TOKEN (a bearer token, e.g. `kubectl create token` or an OIDC token), else
what kfp.Client finds itself (the in-cluster service account token, KF_PIPELINES_* variables).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging as std_logging
import os
import time
from typing import Any

from components import PROGRESS_LOGGER, ConfigError

log = std_logging.getLogger("tfx_scaleout.deploy")
progress_log = std_logging.getLogger(PROGRESS_LOGGER)

TOKEN_ENV = "KF_PIPELINES_TOKEN"
ENDPOINT_ENV = "KF_PIPELINES_ENDPOINT"
FINAL_STATES = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED", "CANCELING")


class DeployError(RuntimeError):
    """The endpoint is unreachable, rejected a request, or the run did not succeed."""


@dataclasses.dataclass(frozen=True)
class Connection:
    client: Any  # kfp.Client (kfp is read as untyped)
    endpoint: str


@dataclasses.dataclass(frozen=True)
class Deployment:
    pipeline_id: str
    version_id: str
    run_id: str | None = None
    state: str | None = None


@dataclasses.dataclass(frozen=True)
class Package:
    name: str  # the pipeline name to upload under
    # The file's defaultPipelineRoot. KFP's backend never reads it (kubeflow/pipelines 2.14.3:
    # the run's root is its runtime_config.pipeline_root, apiserver/template/template.go:169,
    # else the kfp-launcher ConfigMap's defaultPipelineRoot, else minio://mlpipeline/v2/artifacts,
    # driver/root_dag.go:93-100), so every run this tool starts sends it.
    pipeline_root: str | None


def check_package(package_path: str, pipeline_name: str | None) -> Package:
    """The pipeline name to upload under and the root the file was compiled for, once the file
    is known to be a compiled pipeline the open-source backend runs and, with --pipeline_name,
    one compiled for that pipeline (a version of another pipeline would mix two pipelines' runs
    and KFP cache, which is scoped by pipeline name). Raises ConfigError naming the flag;
    nothing is uploaded then."""
    import yaml

    try:
        with open(package_path) as handle:
            documents = list(yaml.safe_load_all(handle))
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"invalid --package {package_path}: {error}") from None
    spec = documents[0] if documents and isinstance(documents[0], dict) else {}
    compiled_name = (spec.get("pipelineInfo") or {}).get("name")
    if not compiled_name or "deploymentSpec" not in spec or "root" not in spec:
        raise ConfigError(
            f"invalid --package {package_path}: not a compiled KFP pipeline file (no "
            "pipelineInfo.name, root and deploymentSpec); run `compile` first"
        )
    executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
    unsupported = sorted(
        label
        for label, executor in executors.items()
        if "container" not in executor and "importer" not in executor
    )
    if unsupported:
        raise ConfigError(
            f"invalid --package {package_path}: executor(s) {unsupported} are neither containers "
            "nor importers (resolvers, say), which open-source Kubeflow Pipelines refuses; "
            "recompile it with this version of `compile`"
        )
    if pipeline_name and pipeline_name != compiled_name:
        raise ConfigError(
            f"invalid --pipeline_name {pipeline_name!r}: --package {package_path} was compiled "
            f"for pipeline {compiled_name!r}; compile it with --pipeline_name {pipeline_name} "
            "or leave --pipeline_name out"
        )
    return Package(compiled_name, spec.get("defaultPipelineRoot"))


def _api_error(action: str, endpoint: str, error: Exception) -> DeployError:
    """One line: what failed, where, and the server's own message."""
    import kfp_server_api

    if isinstance(error, kfp_server_api.ApiException):
        body = (error.body or "").strip() if isinstance(error.body, str) else error.body
        return DeployError(
            f"{action} at {endpoint} was rejected: HTTP {error.status} {error.reason}"
            + (f": {body}" if body else "")
        )
    return DeployError(
        f"{action}: Kubeflow Pipelines endpoint {endpoint} is unreachable "
        f"({type(error).__name__}: {error}); check --endpoint / {ENDPOINT_ENV} "
        "(e.g. kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80)"
    )


def _network_errors() -> tuple[type[Exception], ...]:
    import kfp_server_api
    import urllib3

    return (kfp_server_api.ApiException, urllib3.exceptions.HTTPError, OSError)


def connect(endpoint: str | None, namespace: str | None = None, environ=os.environ) -> Connection:
    """A kfp.Client for the endpoint, with the token from the environment when there is one."""
    import kfp

    endpoint = endpoint or environ.get(ENDPOINT_ENV)
    if not endpoint:
        raise DeployError(f"no Kubeflow Pipelines endpoint: pass --endpoint or set {ENDPOINT_ENV}")
    token = environ.get(TOKEN_ENV) or None
    try:
        client = kfp.Client(host=endpoint, existing_token=token, namespace=namespace or "kubeflow")
        client.get_kfp_healthz(sleep_duration=1)
    except _network_errors() as error:
        raise _api_error("connecting", endpoint, error) from error
    except TimeoutError as error:
        raise DeployError(
            f"Kubeflow Pipelines endpoint {endpoint} is not healthy: {error}"
        ) from error
    return Connection(client=client, endpoint=endpoint)


def upload(
    connection: Connection, package_path: str, pipeline_name: str, version_name: str
) -> Deployment:
    """Uploads the pipeline, or a new version of it when a pipeline of that name exists."""
    client, endpoint = connection.client, connection.endpoint
    try:
        pipeline_id = client.get_pipeline_id(pipeline_name)
        if pipeline_id is None:
            pipeline = client.upload_pipeline(package_path, pipeline_name=pipeline_name)
            pipeline_id = pipeline.pipeline_id
            versions = client.list_pipeline_versions(
                pipeline_id, page_size=1, sort_by="created_at desc"
            )
            version_id = versions.pipeline_versions[0].pipeline_version_id
            progress_log.info("uploaded pipeline %s (%s)", pipeline_name, pipeline_id)
        else:
            version = client.upload_pipeline_version(
                package_path, pipeline_version_name=version_name, pipeline_id=pipeline_id
            )
            version_id = version.pipeline_version_id
            progress_log.info(
                "uploaded version %s of pipeline %s (%s)", version_name, pipeline_name, version_id
            )
    except _network_errors() as error:
        raise _api_error(f"uploading {package_path}", endpoint, error) from error
    return Deployment(pipeline_id=pipeline_id, version_id=version_id)


def start_run(
    connection: Connection,
    deployment: Deployment,
    experiment: str,
    run_name: str,
    parameters: dict | None = None,
    pipeline_root: str | None = None,
) -> Deployment:
    client, endpoint = connection.client, connection.endpoint
    try:
        experiment_id = client.create_experiment(experiment).experiment_id
        run = client.run_pipeline(
            experiment_id=experiment_id,
            job_name=run_name,
            pipeline_id=deployment.pipeline_id,
            version_id=deployment.version_id,
            params=parameters or {},
            pipeline_root=pipeline_root,
        )
    except _network_errors() as error:
        raise _api_error(f"starting run {run_name}", endpoint, error) from error
    progress_log.info("run %s started (%s) in experiment %s", run_name, run.run_id, experiment)
    return dataclasses.replace(deployment, run_id=run.run_id)


def wait(
    connection: Connection,
    run_id: str,
    timeout_seconds: float = 0,
    poll_seconds: float = 15,
    sleep=time.sleep,
    clock=time.monotonic,
) -> str:
    """Follows a run to its end, one progress line per change (run state, each task's state);
    returns SUCCEEDED or raises DeployError naming the failed tasks."""
    client, endpoint = connection.client, connection.endpoint
    started = clock()
    reported: dict[str, str] = {}
    while True:
        try:
            run = client.get_run(run_id)
        except _network_errors() as error:
            raise _api_error(f"following run {run_id}", endpoint, error) from error
        state = (run.state or "PENDING").upper()
        if reported.get("") != state:
            progress_log.info("run %s: %s", run_id, state)
            reported[""] = state
        tasks = (run.run_details.task_details if run.run_details else None) or []
        for task in tasks:
            name, task_state = task.display_name or task.task_id, (task.state or "").upper()
            if name and task_state and reported.get(name) != task_state:
                progress_log.info("  %s: %s", name, task_state)
                reported[name] = task_state
        if state in FINAL_STATES:
            if state == "SUCCEEDED":
                return state
            failed = [
                f"{task.display_name}: {task.error.message}" if task.error else task.display_name
                for task in tasks
                if (task.state or "").upper() == "FAILED"
            ]
            detail = f"; failed: {'; '.join(failed)}" if failed else ""
            message = f" ({run.error.message})" if run.error and run.error.message else ""
            raise DeployError(f"run {run_id} ended {state}{message}{detail}")
        if timeout_seconds and clock() - started > timeout_seconds:
            raise DeployError(f"run {run_id} still {state} after {timeout_seconds:g}s")
        sleep(poll_seconds)


def default_version_name(now: datetime.datetime | None = None) -> str:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("v%Y%m%d-%H%M%S")


# --- recurring runs (KFP's ScheduledWorkflow controller) -----------------------------------------

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
    except _network_errors() as error:
        raise _api_error(f"creating recurring run {name}", endpoint, error) from error
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
    except _network_errors() as error:
        raise _api_error(f"{action} recurring run {recurring_run_id}", endpoint, error) from error
    progress_log.info("recurring run %s: %sd", recurring_run_id, action)
