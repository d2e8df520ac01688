"""Kubeflow Pipelines entry: compile the pipeline the local runner runs, upload it, run it.

    python kubeflow/run_kubeflow.py compile --pipeline_root gs://BUCKET/tfx \
        --image REGISTRY/tfx-scaleout:TAG --gpu_image REGISTRY/tfx-scaleout-gpu:TAG
    python kubeflow/run_kubeflow.py manifests <compile's flags> --strategy multi_worker_mirrored \
        --workers 2 --launcher trainjob | kubectl apply -n NAMESPACE -f -   # or review them
    python kubeflow/run_kubeflow.py deploy --endpoint http://localhost:8080 --run --wait
    python kubeflow/run_kubeflow.py deploy --endpoint URL --recurring '0 0 2 * * *'
    python kubeflow/run_kubeflow.py recurring --endpoint URL --disable RECURRING_RUN_ID

compile: create_pipeline(config) (the same function run_local.py uses) compiled with TFX's
KubeflowV2DagRunner into a KFP IR YAML file, with per-component resources, the GPU image and
pool for the Trainer, the Beam runner's arguments, and (multi-worker strategies) the launcher:
a Training Operator v1 TFJob or a Kubeflow Trainer v2 TrainJob (--launcher); manifests: the
Kubernetes objects that launcher would create, as YAML. Tabular (penguins in the image, or
--data_root/--label) or images (--dataset digits in the image, or --images with a curated
schema). Your own code (--module_file, --preprocessing_fn, --run_fn, --model_fn,
--custom_config, --eval_config) is checked as run_local.py checks it and the module staged under
<pipeline_root>/_user_code/<digest>/ (or --user_code_root), where the pods import it from; an
edit is a recompile, not an image rebuild (docs/kubeflow.md). deploy: upload (a new version
when the pipeline exists), optionally start a run and follow it, or create a recurring run
(KFP's 6-field cron, seconds first); recurring: disable, enable or delete one. Credentials only
from the environment (KF_PIPELINES_TOKEN, kubeconfig).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
warnings.filterwarnings("ignore", category=FutureWarning)

from components.training.settings import (  # noqa: E402
    GpuPool,
    Resources,
    TFJobConfig,
    Toleration,
    TrainJobConfig,
)
from kubeflow import config as kf_config  # noqa: E402
from pipeline import config as config_lib  # noqa: E402
from pipeline import (  # noqa: E402
    entrypoint,  # noqa: E402
    flags,
    launcher_flags,
    preflight,
    tuning,
    user_code,
)
from pipeline.beam import runners as beam_runners  # noqa: E402

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
DEFAULT_PACKAGE = "pipeline.yaml"
# TFRecord shards per split on a cluster (Transform: >= TFJob workers for FILE sharding).
EXAMPLE_SHARDS = 8
TRANSFORM_SHARDS = 8


def _add_compile_flags(parser: argparse.ArgumentParser) -> None:
    kubeflow = kf_config.KubeflowConfig(image="-", gpu_image="-")
    parser.add_argument("--output", default=DEFAULT_PACKAGE, help="the KFP pipeline file")
    parser.add_argument(
        "--pipeline_root",
        required=True,
        help="artifacts: gs://BUCKET[/PATH] (TensorFlow writes it), or minio://BUCKET[/PATH] / "
        "s3://BUCKET[/PATH], the KFP installation's object store (KFP's launcher downloads "
        "inputs and uploads outputs; the executors work on its local copies in the pod)",
    )
    parser.add_argument(
        "--serving_model_dir", default=None, help="default: <pipeline_root>/serving_model"
    )
    flags.add_common_flags(
        parser,
        data_flag="--data_root",
        where="a location the pods read (gs://, a path in the image or on --pvc_name; the "
        "default of the compiled pipeline's data_root parameter)",
        example_shards=EXAMPLE_SHARDS,
        transform_shards=TRANSFORM_SHARDS,
        local=False,
    )
    parser.add_argument(
        "--image",
        required=True,
        help="the project's image (every component), pinned by digest: NAME@sha256:...",
    )
    parser.add_argument(
        "--gpu_image",
        required=True,
        help="the GPU image (Trainer, TFJob pods), pinned by digest: NAME@sha256:...",
    )
    parser.add_argument(
        "--allow_unpinned_images",
        action="store_true",
        help="accept image tags (KFP then reuses cached results across rebuilds of a tag)",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        default=kubeflow.trainer_resources.gpus,
        help="GPUs of the Trainer's pod (single-worker strategies) and of each TFJob worker",
    )
    parser.add_argument("--trainer_cpu", type=float, default=kubeflow.trainer_resources.cpu)
    parser.add_argument(
        "--trainer_memory_gb", type=float, default=kubeflow.trainer_resources.memory_gb
    )
    parser.add_argument("--beam_cpu", type=float, default=kubeflow.beam_resources.cpu)
    parser.add_argument("--beam_memory_gb", type=float, default=kubeflow.beam_resources.memory_gb)
    parser.add_argument(
        "--default_cpu",
        type=float,
        default=kubeflow.default_resources.cpu,
        help="CPU of the other components' pods (schema import, validator, baseline, pusher, "
        "ExampleGen driver); 0 for this and every --*_cpu / --*_memory_gb requests nothing "
        "(a small cluster, e.g. the local cluster's 2-CPU node: docs/kubeflow.md)",
    )
    parser.add_argument(
        "--default_memory_gb", type=float, default=kubeflow.default_resources.memory_gb
    )
    parser.add_argument(
        "--node_selector",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label of the GPU node pool, repeatable",
    )
    parser.add_argument(
        "--toleration",
        action="append",
        default=None,
        metavar="KEY[=VALUE][:EFFECT]",
        help="taint of the GPU pool to tolerate, repeatable (default: nvidia.com/gpu)",
    )
    launcher_flags.add_launcher_flags(parser, default=TFJobConfig.KIND)
    parser.add_argument(
        "--pvc_name",
        default="",
        help="PVC mounted in every pod at --mount_path (data, served models, TFJob pods)",
    )
    parser.add_argument("--mount_path", default="", help="where the PVC is mounted in the pods")
    parser.add_argument(
        "--user_code_root",
        default=None,
        help="where compile stages --module_file for the pods (default: "
        "<pipeline_root>/_user_code; or a path under --mount_path, mounted here at the same path)",
    )
    parser.add_argument(
        "--beam_mode",
        choices=config_lib.BEAM_MODES,
        default="in_memory",
        help="DirectRunner inside the component's pod",
    )
    parser.add_argument("--beam_workers", type=int, default=1)


def _add_deploy_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--package", default=DEFAULT_PACKAGE, help="the compiled pipeline file")
    parser.add_argument(
        "--endpoint", default=None, help="Kubeflow Pipelines API (default: $KF_PIPELINES_ENDPOINT)"
    )
    parser.add_argument("--namespace", default=None, help="profile namespace (multi-user)")
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="with --wait: read failed tasks' pod logs from Kubernetes when the API server cannot "
        "(KFP 2.x single-user reads them at cluster scope); default $KUBECONFIG",
    )
    parser.add_argument("--pipeline_name", default=None, help="default: the name in the package")
    parser.add_argument("--version_name", default=None, help="default: v<UTC timestamp>")
    parser.add_argument("--run", action="store_true", help="start a run after the upload")
    parser.add_argument("--experiment", default="tfx-scaleout")
    parser.add_argument("--run_name", default=None, help="default: <pipeline>-<version>")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="pipeline parameter (e.g. data_root=gs://bucket/csv), repeatable",
    )
    parser.add_argument("--run_pipeline_root", default=None, help="override for this run")
    parser.add_argument(
        "--no_cache",
        action="store_true",
        help="with --run: every task runs, none is served from KFP's cache (the run carries the "
        "file's spec with caching off, as kfp.Client's enable_caching=False does, so KFP links it "
        "to no pipeline version)",
    )
    parser.add_argument("--wait", action="store_true", help="follow the run to its end")
    parser.add_argument("--timeout", type=float, default=0, help="seconds (0: no limit)")
    parser.add_argument("--poll", type=float, default=15, help="seconds between run checks")
    parser.add_argument(
        "--recurring",
        default=None,
        metavar="CRON",
        help="instead of --run: a recurring run on KFP's cron, which has 6 fields, seconds first "
        "(SECOND MINUTE HOUR DAY MONTH WEEKDAY: '0 0 2 * * *' daily at 02:00 UTC), or @hourly, "
        "@daily, @every 1h30m; stop it with `recurring --disable ID` or `--delete ID`",
    )
    parser.add_argument(
        "--max_concurrency",
        type=int,
        default=1,
        help="with --recurring: runs of it at a time (1-10); a time that comes while that many "
        "run starts no run",
    )
    parser.add_argument(
        "--no_catchup",
        action="store_true",
        help="with --recurring: after a pause (disabled, or max_concurrency reached) start only "
        "the latest missed run, not every one",
    )


def _add_recurring_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint", default=None, help="Kubeflow Pipelines API (default: $KF_PIPELINES_ENDPOINT)"
    )
    parser.add_argument("--namespace", default=None, help="profile namespace (multi-user)")
    actions = parser.add_mutually_exclusive_group(required=True)
    for action, what in (
        ("disable", "no more runs until --enable (its runs so far stay)"),
        ("enable", "runs again"),
        ("delete", "removes it (its runs so far stay)"),
    ):
        actions.add_argument(f"--{action}", metavar="RECURRING_RUN_ID", help=what)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="run_kubeflow.py", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    _add_compile_flags(commands.add_parser("compile", help="compile the pipeline to a KFP file"))
    _add_compile_flags(
        commands.add_parser(
            "manifests",
            help="print, as YAML, every Kubernetes object the launcher would create (compile's "
            "flags)",
        )
    )
    _add_deploy_flags(commands.add_parser("deploy", help="upload, run, follow"))
    _add_recurring_flags(
        commands.add_parser("recurring", help="disable, enable or delete a recurring run")
    )
    return parser.parse_args(argv)


def _pairs(values: list[str], flag: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise config_lib.ConfigError(f"invalid {flag} {value!r}: expected NAME=VALUE")
        pairs.append((key, rest))
    return tuple(pairs)


def _check_counts(args: argparse.Namespace) -> None:
    """Counts and sizes a Kubernetes object would reject, named by their flag."""
    for flag_name in (
        "gpus",
        "trainer_cpu",
        "trainer_memory_gb",
        "beam_cpu",
        "beam_memory_gb",
        "default_cpu",
        "default_memory_gb",
        "worker_cpu",
        "worker_memory_gb",
        "gang_schedule_timeout_seconds",
    ):
        value = getattr(args, flag_name)
        if value < 0:
            raise config_lib.ConfigError(f"invalid --{flag_name} {value}: must be >= 0")
    if args.job_deadline_seconds < 1:
        raise config_lib.ConfigError(
            f"invalid --job_deadline_seconds {args.job_deadline_seconds}: must be >= 1"
        )


def build_configs(
    args: argparse.Namespace,
) -> tuple[config_lib.PipelineConfig, kf_config.KubeflowConfig]:
    from kubeflow import compile as compiler

    _check_counts(args)
    dataset = compiler.kubeflow_dataset(flags.dataset_choice(args))
    name = args.pipeline_name or f"{dataset.name}-pipeline"
    root = args.pipeline_root.rstrip("/")
    tolerations = (
        tuple(Toleration.parse(t) for t in args.toleration)
        if args.toleration is not None
        else GpuPool().tolerations
    )
    kubeflow = kf_config.KubeflowConfig(
        image=args.image,
        gpu_image=args.gpu_image,
        beam_resources=Resources(cpu=args.beam_cpu, memory_gb=args.beam_memory_gb),
        default_resources=Resources(cpu=args.default_cpu, memory_gb=args.default_memory_gb),
        trainer_resources=Resources(
            cpu=args.trainer_cpu, memory_gb=args.trainer_memory_gb, gpus=args.gpus
        ),
        gpu_pool=GpuPool(
            node_selector=_pairs(args.node_selector, "--node_selector"), tolerations=tolerations
        ),
        allow_unpinned_images=args.allow_unpinned_images,
        pvc_name=args.pvc_name,
        mount_path=args.mount_path,
    ).validate()
    training = flags.training_config(args, dataset)
    if args.launcher in (TFJobConfig.KIND, TrainJobConfig.KIND) and (
        training.needs_cluster or tuning.parallel(args)
    ):
        training = dataclasses.replace(
            training,
            launcher=kubeflow.kubernetes_job(
                launcher_flags.kubernetes_job(args, training, image=args.gpu_image)
            ),
        )
    direct = config_lib.BeamConfig(
        mode=args.beam_mode, num_workers=args.beam_workers, extra_args=tuple(args.beam_arg)
    )
    config = config_lib.PipelineConfig(
        pipeline_name=name,
        pipeline_root=root,
        # Kubeflow Pipelines records everything in its own MLMD; no local store.
        metadata_path="",
        serving_model_dir=args.serving_model_dir or f"{root}/serving_model",
        dataset=dataset,
        training=training,
        beam=beam_runners.beam_config(args, direct),
        train_fraction=args.train_fraction,
        example_shards=args.example_shards,
        transform_shards=config_lib.transform_shards_for(
            dataset, args.transform_shards, TRANSFORM_SHARDS
        ),
        max_rejected_fraction=args.max_rejected_fraction,
        accuracy_threshold=args.accuracy_threshold,
        min_classification_skill=args.min_classification_skill,
        min_regression_skill=args.min_regression_skill,
        transform_materialize=not args.no_transform_materialize,
    ).validate()
    if args.infer_data is not None:
        from pipeline import inference

        if dataset.is_images or not dataset.schema_path:
            raise config_lib.ConfigError(
                "--infer_data predicts CSV rows: it is for CSV data (--data_root/--label or "
                "--dataset penguins), not image folders"
            )
        rows = inference.cluster_inference(
            args.infer_data, dataset, compiler.local_path(dataset.schema_path)
        )
        config = dataclasses.replace(config, inference=rows).validate()
    if user_code.choice_from_args(args).given or args.tune:
        # The same checks as a local run, on this machine's copy of the schema; a user's run_fn
        # on users' data (rows not known here) needs --train_steps and --eval_steps. --tune's
        # settings are decided there too (without it a --tune with the built-in model compiled
        # no Tuner).
        choice = flags.dataset_choice(args)
        config = flags.with_user_code(
            config,
            args,
            rows=compiler.known_rows(choice),
            cache_dir=None,
            schema_path=compiler.local_path(dataset.schema_path) if dataset.schema_path else None,
        )
    else:
        flags.check_materialize(config.transform_materialize, None)
    return config, kubeflow


def run_compile(args: argparse.Namespace, out) -> int:
    from absl import logging as absl_logging

    from kubeflow import compile as compiler

    config, kubeflow = build_configs(args)
    # TFX 1.16 warns about a missing default image when the default image map has one (an
    # inverted check in its pipeline builder); nothing else it logs here is for the user.
    absl_logging.set_verbosity(absl_logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compiler.compile_pipeline(
            config, kubeflow, args.output, user_code_root=args.user_code_root
        )
    out.write(
        f"compiled {config.pipeline_name} -> {args.output}\n"
        f"  Beam: {config.beam.describe()}; strategy {config.training.strategy}"
        + (f" via {type(config.training.launcher).KIND}" if config.training.needs_cluster else "")
        + f"; pipeline root {config.pipeline_root}\n"
    )
    staged = compiled["user_code"]
    if staged is not None:
        for line in user_code.describe(staged):
            out.write(f"  {line}\n")
        for role, module in staged.modules:
            out.write(f"  staged {staged.module_file} for the pods ({role}): {module.uri}\n")
    return 0


def run_manifests(args: argparse.Namespace, out) -> int:
    """Every Kubernetes object the chosen launcher would create, as multi-document YAML (review
    them, or apply them through GitOps): the job, and for a TrainJob its runtime."""
    import yaml

    from components.training import launchers

    config, _ = build_configs(args)
    training = config.training
    if not training.needs_cluster or not isinstance(
        training.launcher, (TFJobConfig, TrainJobConfig)
    ):
        raise config_lib.ConfigError(
            f"invalid --launcher {args.launcher} / --strategy {training.strategy}: only the tfjob "
            "and trainjob launchers of a multi-worker strategy create Kubernetes objects"
        )
    # The model run directory (the job's name and task file) is per Trainer execution.
    model_run_dir = f"{config.pipeline_root}/{config.pipeline_name}/RUN/Trainer/model_run"
    documents = launchers.dry_run_manifests(training, model_run_dir)
    out.write(
        f"# {type(training.launcher).KIND} objects for {config.pipeline_name} "
        f"({training.strategy}, workers={training.workers}, ps={training.ps}).\n"
        "# Per run: the job's name and task file (shown for a run's Trainer under RUN); at run\n"
        "# time an empty namespace or service account is the Trainer pod's own and the job is\n"
        "# owned by that pod.\n"
    )

    class PlainDumper(yaml.SafeDumper):
        """No anchors/aliases for objects that repeat (the exit-code lists): plain YAML."""

        def ignore_aliases(self, data) -> bool:
            return True

    yaml.dump_all(documents, out, Dumper=PlainDumper, sort_keys=False, explicit_start=True)
    return 0


def run_deploy(args: argparse.Namespace, out) -> int:
    from kubeflow import deploy, recurring

    if args.recurring is not None:
        _check_recurring_flags(args)
    if args.no_cache and not args.run:
        raise config_lib.ConfigError(
            "--no_cache applies to the run that --run starts: add --run (a recurring run's "
            "tasks keep the file's cache settings)"
        )
    if not os.path.isfile(args.package):
        raise config_lib.ConfigError(
            f"invalid --package {args.package}: no such file (run `compile` first)"
        )
    package = deploy.check_package(args.package, args.pipeline_name)
    name = package.name
    if args.run_pipeline_root:
        from kubeflow import compile as compiler

        compiler.check_pipeline_root(args.run_pipeline_root, "--run_pipeline_root")
    version = args.version_name or deploy.default_version_name()
    connection = deploy.connect(args.endpoint, args.namespace, kubeconfig=args.kubeconfig)
    deployment = deploy.upload(connection, args.package, name, version)
    out.write(f"pipeline {name}: id {deployment.pipeline_id}, version {deployment.version_id}\n")
    if args.recurring is not None:
        recurring_id = recurring.create_recurring_run(
            connection,
            deployment,
            experiment=args.experiment,
            name=args.run_name or f"{name}-{version}",
            cron=args.recurring,
            max_concurrency=args.max_concurrency,
            no_catchup=args.no_catchup,
            parameters=dict(_pairs(args.param, "--param")),
            pipeline_root=args.run_pipeline_root or package.pipeline_root,
        )
        out.write(f"recurring run {recurring_id} created\n")
        return 0
    if not args.run:
        return 0
    deployment = deploy.start_run(
        connection,
        deployment,
        experiment=args.experiment,
        run_name=args.run_name or f"{name}-{version}",
        parameters=dict(_pairs(args.param, "--param")),
        pipeline_root=args.run_pipeline_root or package.pipeline_root,
        uncached_package=args.package if args.no_cache else None,
    )
    out.write(f"run {deployment.run_id} started\n")
    if args.wait:
        if deployment.run_id is None:
            raise deploy.DeployError("the run started, but the API returned no run id to follow")
        state = deploy.wait(
            connection, deployment.run_id, timeout_seconds=args.timeout, poll_seconds=args.poll
        )
        out.write(f"run {deployment.run_id} {state}\n")
    return 0


def _check_recurring_flags(args: argparse.Namespace) -> None:
    """--recurring's cron and companions, before anything is uploaded (ConfigError, one line)."""
    from kubeflow import recurring

    if args.run or args.wait:
        raise config_lib.ConfigError(
            "--recurring creates a recurring run; its runs are started by Kubeflow Pipelines: "
            "leave out --run and --wait"
        )
    args.recurring = recurring.check_cron(args.recurring)
    recurring.check_max_concurrency(args.max_concurrency)


def run_recurring(args: argparse.Namespace, out) -> int:
    from kubeflow import deploy, recurring

    action = next(a for a in recurring.RECURRING_ACTIONS if getattr(args, a))
    connection = deploy.connect(args.endpoint, args.namespace)
    recurring.recurring_run_action(connection, getattr(args, action), action)
    out.write(f"recurring run {getattr(args, action)} {action}d\n")
    return 0


def _configure_logging() -> None:
    from components import PROGRESS_LOGGER

    progress = logging.getLogger(PROGRESS_LOGGER)
    progress.handlers[:] = [h for h in progress.handlers if h.get_name() != "run_kubeflow"]
    # The current stdout (not the one at import time): progress lines go where output goes.
    handler = logging.StreamHandler(sys.stdout)
    handler.set_name("run_kubeflow")
    handler.setFormatter(logging.Formatter("%(message)s"))
    progress.addHandler(handler)
    progress.setLevel(logging.INFO)
    # Not again through the root logger: kfp.Client's upload logs through the logging module's
    # functions, which give the root logger a stderr handler (every progress line twice).
    progress.propagate = False


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's CUDA wheels log plugin-registration "errors" on import on CPU-only machines.
    with entrypoint.filtered_stderr():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)
    _configure_logging()
    from kubeflow import deploy

    try:
        if args.command == "compile":
            return run_compile(args, sys.stdout)
        if args.command == "manifests":
            return run_manifests(args, sys.stdout)
        if args.command == "recurring":
            return run_recurring(args, sys.stdout)
        return run_deploy(args, sys.stdout)
    except (config_lib.ConfigError, preflight.InputError, user_code.UserCodeError) as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_BAD_INPUT
    except deploy.DeployError as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
