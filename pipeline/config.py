"""The one typed, frozen configuration of a pipeline run.

Runners (local, Kubeflow) build a PipelineConfig in one place and hand it to create_pipeline();
nothing below them reads flags or the environment. validate() runs before any component starts
and names the offending field.
"""

from __future__ import annotations

import dataclasses
import os

from components import ConfigError
from components.training.settings import IMAGE_LEARNING_RATE, TrainingConfig
from pipeline.tuning import TuneConfig
from pipeline.user_code import UserCode

BEAM_MODES = ("in_memory", "multi_processing")
BEAM_RUNNERS = ("direct", "portable", "flink", "spark", "dataflow")
# How long a Flink or Spark job keeps an idle SDK worker for its next stage (Beam's
# --environment_cache_millis; Beam's default 0 boots one per stage: 28 SDK workers for one
# penguins ExampleGen job on Spark, 10-15 s each here).
ENVIRONMENT_CACHE_MILLIS = 60_000
# The Flink versions Beam 2.59's FlinkRunner has job servers for (--flink_version).
FLINK_VERSIONS = ("1.15", "1.16", "1.17", "1.18")
PORTABLE_ENVIRONMENTS = ("DOCKER", "EXTERNAL", "PROCESS", "LOOPBACK")
# --job_endpoint of Beam's PortableRunner that starts its job service in this process.
EMBEDDED_JOB_ENDPOINT = "embed"
# What Beam's stager accepts as --extra_package (apache_beam/runners/portability/stager.py).
STAGED_PACKAGE_SUFFIXES = (".whl", ".tar.gz", ".tar", ".zip")
DATASET_KINDS = ("csv", "images")
# What the model predicts: class names, or a number in the label's units. "auto" (a flag value)
# is resolved by the pre-flight check from the label's values before a config is built.
TASKS = ("classification", "regression")
# MobileNetV2 needs at least 32x32 inputs.
MIN_IMAGE_SIZE = 32
# Transform's output for images: 0 shards, streamed one file per Beam bundle (components'
# transform executor STREAMING_SHARDS), so memory stays flat however many pixels there are.
IMAGE_TRANSFORM_SHARDS = 0


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """Where the raw CSV data lives and what to predict."""

    name: str
    data_root: str
    label_key: str
    # Files read under data_root (glob, relative to it).
    file_pattern: str = "*.csv"
    # Curated schema (schemas/<name>/schema.pbtxt). None: infer with SchemaGen (first use of a
    # user's dataset); the inferred schema is written out for review.
    schema_path: str | None = None
    # Inferred schemas only (no schema_path): SchemaGen's infer_feature_shape, TFX's default. A
    # feature present once in every row of every split is then fixed-shape (a dense tensor in
    # Transform), any other variable-length (a SparseTensor); False makes every feature
    # variable-length (--no_infer_feature_shape).
    infer_feature_shape: bool = True
    # Content digest of the curated schema (pipeline.fingerprints.file_digest), part of
    # ImportSchemaGen's cache key. Empty: taken from schema_path when the pipeline is built;
    # set by runners whose schema_path is not readable here (Kubeflow: a path in the image).
    schema_digest: str = ""
    # Cell values read as missing, as R and pandas write them ("NA" in palmerpenguins).
    null_values: tuple[str, ...] = ("", "NA", "NaN", "nan", "null", "NULL")
    # Column types taken from the curated schema ('int', 'float', 'string'); empty: inferred.
    column_types: tuple[tuple[str, str], ...] = ()
    # "csv": CSV files under data_root; "images": one sub-folder of JPEG/PNG files per class.
    kind: str = "csv"
    # Images: side of the square the transform graph resizes every image to.
    image_size: int = 32
    task: str = "classification"
    # CSV field separator (the pre-flight check sniffs it unless --delimiter forces one).
    delimiter: str = ","
    # Columns that are not features: never written by ExampleGen (--exclude_columns, likely
    # identifiers of an inferred schema, columns a curated schema marks DISABLED).
    excluded_columns: tuple[str, ...] = ()
    # Text columns read as timestamps (the pre-flight check finds them in an inferred schema):
    # the project's preprocessing_fn turns each into numbers (components.ml.timestamps).
    timestamp_columns: tuple[str, ...] = ()

    @property
    def is_images(self) -> bool:
        return self.kind == "images"


@dataclasses.dataclass(frozen=True)
class BeamConfig:
    """How the Beam-based components (ExampleGen, StatisticsGen, Transform, Evaluator) run.

    runner: direct (this machine: in_memory or multi_processing), portable (Beam's
    PortableRunner against a job server, or its embedded one: job_endpoint "embed"), flink or
    spark (portable runners: a job server runs the pipeline on the cluster, the SDK harness in a
    container of the project's image), dataflow (Google Cloud Dataflow, workers in the project's
    image).
    """

    runner: str = "direct"
    mode: str = "in_memory"
    num_workers: int = 1
    extra_args: tuple[str, ...] = ()
    # Flink / Spark: the cluster's master (host:port; Spark: spark://host:port), or the
    # endpoint of an already running Beam job server (then the master is the job server's).
    # Portable: the job server's host:port, or "embed" (Beam's job service in this process).
    flink_master: str = ""
    spark_master_url: str = ""
    job_endpoint: str = ""
    # Where the portable runner starts the Python SDK harness: DOCKER (environment_config or
    # sdk_container_image is the image), EXTERNAL (environment_config is a worker pool's
    # host:port, e.g. a sidecar of the task manager, or `python -m pipeline.beam.boot
    # worker_pool`), PROCESS (environment_config: {"command": ...}; not with "embed"), LOOPBACK
    # (the harness in this process: tests).
    environment_type: str = "DOCKER"
    environment_config: str = ""
    # Flink only (Spark takes spark.default.parallelism from the cluster); 0: the cluster's.
    parallelism: int = 0
    # Flink / Spark with a master: the Beam job server jar Beam starts (`java -jar`); empty:
    # Beam downloads its own from Maven Central. flink_version: the Flink minor version of
    # that job server (Beam's --flink_version; empty: Beam's default), checked against the
    # cluster's before a run.
    job_server_jar: str = ""
    flink_version: str = ""
    # Dataflow.
    project: str = ""
    region: str = ""
    temp_location: str = ""
    max_num_workers: int = 0
    # The project's image (pinned stack + this project installed): Dataflow's workers, and the
    # DOCKER environment of Flink / Spark when environment_config is empty.
    sdk_container_image: str = ""
    # Packages (wheels, sdists) Beam stages for the SDK workers to install (--extra_package),
    # e.g. this project's wheel: its code then reaches workers whose image is older. Any of them
    # also makes TFX skip staging its own sdist (tfx/utils/dependency_utils.py).
    extra_packages: tuple[str, ...] = ()

    def pipeline_args(self) -> list[str]:
        if self.runner == "portable":
            args = ["--runner=PortableRunner"] + self._portable_args()
        elif self.runner == "flink":
            args = ["--runner=FlinkRunner"]
            if self.flink_master:
                args.append(f"--flink_master={self.flink_master}")
            if self.parallelism:
                args.append(f"--parallelism={self.parallelism}")
            if self.flink_version:
                args.append(f"--flink_version={self.flink_version}")
            if self.job_server_jar:
                args.append(f"--flink_job_server_jar={self.job_server_jar}")
            # One SDK worker for all of a job's stages rather than one per stage (where the
            # runner's classes are on the TaskManager's class path: pipeline/beam/engines.py).
            args.append(f"--environment_cache_millis={ENVIRONMENT_CACHE_MILLIS}")
            args += self._portable_args()
        elif self.runner == "spark":
            args = ["--runner=SparkRunner"]
            if self.spark_master_url:
                args.append(f"--spark_master_url={self.spark_master_url}")
            if self.job_server_jar:
                args.append(f"--spark_job_server_jar={self.job_server_jar}")
            # Beam's Spark runner never releases a stage's context synchronously
            # (SparkExecutableStageContextFactory), so this alone keeps one worker per job.
            args.append(f"--environment_cache_millis={ENVIRONMENT_CACHE_MILLIS}")
            args += self._portable_args()
        elif self.runner == "dataflow":
            args = [
                "--runner=DataflowRunner",
                f"--project={self.project}",
                f"--region={self.region}",
                f"--temp_location={self.temp_location}",
                f"--sdk_container_image={self.sdk_container_image}",
            ]
            if self.max_num_workers:
                args.append(f"--max_num_workers={self.max_num_workers}")
        elif self.mode == "multi_processing":
            args = [
                "--runner=DirectRunner",
                "--direct_running_mode=multi_processing",
                f"--direct_num_workers={self.num_workers}",
            ]
        else:
            args = [
                "--runner=DirectRunner",
                "--direct_running_mode=in_memory",
                "--direct_num_workers=1",
            ]
        if self.runner != "direct":
            args += [f"--extra_package={package}" for package in self.extra_packages]
        return args + list(self.extra_args)

    def _portable_args(self) -> list[str]:
        args = []
        if self.job_endpoint:
            args.append(f"--job_endpoint={self.job_endpoint}")
        args.append(f"--environment_type={self.environment_type}")
        environment_config = self.environment_config
        if not environment_config and self.environment_type == "DOCKER":
            environment_config = self.sdk_container_image
        if environment_config:
            args.append(f"--environment_config={environment_config}")
        return args

    def describe(self) -> str:
        if self.runner == "direct":
            return f"{self.mode} ({self.num_workers} worker(s))"
        where = {
            "portable": f"{self.job_endpoint} ({self.environment_type}"
            + (f" {self.environment_config})" if self.environment_config else ")"),
            "flink": self.job_endpoint or self.flink_master,
            "spark": self.job_endpoint or self.spark_master_url,
            "dataflow": f"{self.project}/{self.region}",
        }[self.runner]
        return f"{self.runner} runner at {where}"

    def validate(self) -> None:
        _require(
            self.runner in BEAM_RUNNERS,
            "beam.runner",
            f"must be one of {BEAM_RUNNERS}, got {self.runner!r}",
        )
        _require(
            self.mode in BEAM_MODES,
            "beam.mode",
            f"must be one of {BEAM_MODES}, got {self.mode!r}",
        )
        _require(self.num_workers >= 1, "beam.num_workers", "must be >= 1")
        _require(self.parallelism >= 0, "beam.parallelism", f"must be >= 0, got {self.parallelism}")
        _require(
            self.max_num_workers >= 0,
            "beam.max_num_workers",
            f"must be >= 0, got {self.max_num_workers}",
        )
        if self.runner == "portable":
            _require(
                self.job_endpoint == EMBEDDED_JOB_ENDPOINT or _is_host_port(self.job_endpoint),
                "beam.job_endpoint",
                f"must be {EMBEDDED_JOB_ENDPOINT!r} (Beam's job service in this process) or a "
                f"job server's HOST:PORT for the portable runner, got {self.job_endpoint!r}",
            )
            _require(
                self.parallelism == 0,
                "beam.parallelism",
                "is a Flink option; use --beam_runner flink for it",
            )
        if self.runner in ("flink", "spark"):
            master = "flink_master" if self.runner == "flink" else "spark_master_url"
            _require(
                bool(getattr(self, master) or self.job_endpoint),
                f"beam.{master}",
                f"or beam.job_endpoint must be set for the {self.runner} runner",
            )
        if self.job_server_jar:
            _require(
                self.runner in ("flink", "spark") and not self.job_endpoint,
                "beam.job_server_jar",
                "is the job server Beam starts for --flink_master or --spark_master_url; a "
                "--beam_job_endpoint is a job server already running",
            )
            _require(
                self.job_server_jar.endswith(".jar"),
                "beam.job_server_jar",
                f"must be a .jar file, got {self.job_server_jar!r}",
            )
        if self.flink_version:
            _require(
                self.runner == "flink",
                "beam.flink_version",
                "is a Flink option; use --beam_runner flink for it",
            )
            _require(
                self.flink_version in FLINK_VERSIONS,
                "beam.flink_version",
                f"must be one of {FLINK_VERSIONS} (Beam 2.59's Flink job servers), got "
                f"{self.flink_version!r}",
            )
        if self.runner in ("portable", "flink", "spark"):
            _require(
                self.environment_type in PORTABLE_ENVIRONMENTS,
                "beam.environment_type",
                f"must be one of {PORTABLE_ENVIRONMENTS}, got {self.environment_type!r}",
            )
            if self.environment_type == "DOCKER":
                _require(
                    bool(self.environment_config or self.sdk_container_image),
                    "beam.sdk_container_image",
                    "(or beam.environment_config) must name the project's image for the DOCKER "
                    "environment: the SDK harness imports this project's code",
                )
            if self.environment_type == "EXTERNAL":
                _require(
                    bool(self.environment_config),
                    "beam.environment_config",
                    "must be the worker pool's host:port for the EXTERNAL environment (start one "
                    "with: python -m pipeline.beam.boot worker_pool --service_port 50000)",
                )
            if self.environment_type == "PROCESS":
                _require(
                    self.environment_config.lstrip().startswith("{")
                    and '"command"' in self.environment_config,
                    "beam.environment_config",
                    "must be a JSON object naming the boot executable for the PROCESS "
                    'environment, e.g. \'{"command": "/opt/beam-boot"}\' (a script running '
                    '`python -m pipeline.beam.boot "$@"`)',
                )
                _require(
                    self.job_endpoint != EMBEDDED_JOB_ENDPOINT,
                    "beam.environment_type",
                    "PROCESS does not run with beam.job_endpoint 'embed': Beam 2.59's embedded "
                    "job service has no PROCESS environment; use EXTERNAL with a worker pool "
                    "(python -m pipeline.beam.boot worker_pool --service_port 50000), or a Flink "
                    "or Spark job server",
                )
        for package in self.extra_packages:
            _require(
                self.runner != "direct",
                "beam.extra_packages",
                "are staged for the workers of portable, flink, spark and dataflow runs; the "
                "DirectRunner's workers use this environment (drop --beam_extra_package)",
            )
            _require(
                package.endswith(STAGED_PACKAGE_SUFFIXES),
                "beam.extra_packages",
                f"must be files ending with {' '.join(STAGED_PACKAGE_SUFFIXES)} (what Beam stages)"
                f", got {package!r}",
            )
        if self.runner == "spark":
            _require(
                self.parallelism == 0,
                "beam.parallelism",
                "is a Flink option; Spark takes spark.default.parallelism from the cluster",
            )
        if self.runner == "dataflow":
            for name in ("project", "region", "temp_location"):
                _require(bool(getattr(self, name)), f"beam.{name}", "must be set for dataflow")
            _require(
                self.temp_location.startswith("gs://"),
                "beam.temp_location",
                f"must be a gs:// URI for dataflow, got {self.temp_location!r}",
            )
            _require(
                bool(self.sdk_container_image),
                "beam.sdk_container_image",
                "must be set for dataflow: the workers import this project's code from its image",
            )


@dataclasses.dataclass(frozen=True)
class MySQLConfig:
    """MLMD on MySQL (as Kubeflow uses) instead of the local SQLite file. The user and password
    come from the environment (MLMD_MYSQL_USER, MLMD_MYSQL_PASSWORD) via the runner."""

    host: str
    port: int = 3306
    database: str = "metadb"
    user: str = "root"
    password: str = dataclasses.field(default="", repr=False)

    def describe(self) -> str:
        return f"mysql://{self.host}:{self.port}/{self.database}"


@dataclasses.dataclass(frozen=True)
class InferenceConfig:
    """Where the rows to predict are and how the ExampleGen reads them."""

    data_root: str
    file_pattern: str = "*.csv"
    delimiter: str = ","
    # (column, int|float|string) of every column of the files, in file order.
    column_types: tuple[tuple[str, str], ...] = ()
    # Columns a row must have a value in (the model's fixed-shape features).
    required_columns: tuple[str, ...] = ()
    # The training label, when the files have it (kept in the output, not read by the model).
    label_present: bool = False

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.column_types)


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    pipeline_name: str
    pipeline_root: str
    metadata_path: str
    serving_model_dir: str
    dataset: DatasetConfig
    training: TrainingConfig = TrainingConfig()
    beam: BeamConfig = BeamConfig()
    # Fraction of rows that go to the train split (hash buckets out of 100).
    train_fraction: float = 0.75
    example_shards: int = 4
    # 0: no fixed count; Transform streams each bundle to its own file without grouping (flat
    # memory with large examples: the default for images).
    transform_shards: int = 4
    # ExampleGen fails when more than this fraction of rows is rejected (0: any reject fails).
    max_rejected_fraction: float = 0.0
    # Classification: the model is blessed when its accuracy skill over the majority-class guess
    # (the training split's most frequent class), (accuracy - guess) / (1 - guess), is at least
    # this on the eval split (components.ml.metrics.AccuracySkill).
    min_classification_skill: float = 0.1
    # Classification: an extra bound on the eval accuracy itself (None: none). A user's run_fn,
    # whose label encoding is the user's, is held to this (0.9 when not given) instead.
    accuracy_threshold: float | None = None
    # Regression: the model is blessed when its eval mean squared error is at most (1 - this)
    # times that of predicting the training mean (skill = 1 - MSE / MSE_mean >= this).
    min_regression_skill: float = 0.1
    enable_cache: bool = True
    # Transform writes transformed examples for the Trainer (TFX's default). False
    # (--no_transform_materialize): Transform writes the transform graph only and the Trainer gets
    # ExampleGen's raw examples, which a user's run_fn transforms itself (TFX's materialize=False).
    transform_materialize: bool = True
    # None: SQLite at metadata_path.
    mysql: MySQLConfig | None = None
    # The user's preprocessing_fn, run_fn, model hook, custom_config and EvalConfig (empty: the
    # project's own), checked by pipeline.user_code before the config is built.
    user_code: UserCode = UserCode()
    # --infer_data: rows without labels that BulkInferrer predicts when the model is blessed
    # (pipeline.inference checks them against the training columns); None: no BulkInferrer.
    inference: InferenceConfig | None = None
    # --tune: TFX's Tuner before the Trainer (pipeline.tuning).
    tuning: TuneConfig = TuneConfig()

    def metadata_connection_config(self):
        """ml-metadata ConnectionConfig of this pipeline's store."""
        from ml_metadata.proto import metadata_store_pb2

        connection = metadata_store_pb2.ConnectionConfig()
        if self.mysql:
            connection.mysql.host = self.mysql.host
            connection.mysql.port = self.mysql.port
            connection.mysql.database = self.mysql.database
            connection.mysql.user = self.mysql.user
            connection.mysql.password = self.mysql.password
        else:
            connection.sqlite.filename_uri = self.metadata_path
            connection.sqlite.connection_mode = (
                metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
            )
        return connection

    @property
    def metadata_location(self) -> str:
        return self.mysql.describe() if self.mysql else self.metadata_path

    @property
    def split_buckets(self) -> tuple[int, int]:
        train = round(self.train_fraction * 100)
        return train, 100 - train

    def validate(self) -> PipelineConfig:
        _require(bool(self.pipeline_name.strip()), "pipeline_name", "must not be empty")
        _require(
            0.0 < self.train_fraction < 1.0 and 0 < self.split_buckets[0] < 100,
            "train_fraction",
            f"must be between 0.01 and 0.99, got {self.train_fraction}",
        )
        _require(
            self.example_shards >= 1, "example_shards", f"must be >= 1, got {self.example_shards}"
        )
        _require(
            self.transform_shards >= 0,
            "transform_shards",
            f"must be >= 0 (0: streaming, the runner decides the files), got "
            f"{self.transform_shards}",
        )
        _require(
            0.0 <= self.max_rejected_fraction < 1.0,
            "max_rejected_fraction",
            f"must be in [0, 1), got {self.max_rejected_fraction}",
        )
        _require(
            self.accuracy_threshold is None or 0.0 <= self.accuracy_threshold <= 1.0,
            "accuracy_threshold",
            f"must be in [0, 1], got {self.accuracy_threshold}",
        )
        _require(
            self.min_classification_skill < 1.0,
            "min_classification_skill",
            f"must be below 1 (1: a perfect model; 0: the majority-class guess; a negative "
            f"bound also blesses models worse than the guess), got "
            f"{self.min_classification_skill}",
        )
        _require(
            0.0 <= self.min_regression_skill < 1.0,
            "min_regression_skill",
            f"must be in [0, 1), got {self.min_regression_skill}",
        )
        self.beam.validate()
        training = self.training.validate()
        if training.shard_policy == "file":
            _require(
                0 < training.workers <= self.transform_shards,
                "training.shard_policy",
                f"'file' needs at least as many Transform shards as workers: "
                f"{self.transform_shards} shard(s) for {training.workers} worker(s)",
            )
        if training.class_weight != "none":
            _require(
                self.dataset.task == "classification"
                and not self.dataset.is_images
                and not self.user_code.preprocessing_fn
                and not self.user_code.run_fn,
                "training.class_weight (--class_weight)",
                "weighs classes by the label counts the project's tabular preprocessing "
                "computes: for CSV classification without your own preprocessing_fn or run_fn",
            )
        _require(bool(self.dataset.label_key), "dataset.label_key", "must not be empty")
        _require(
            self.dataset.kind in DATASET_KINDS,
            "dataset.kind",
            f"must be one of {DATASET_KINDS}, got {self.dataset.kind!r}",
        )
        _require(
            self.dataset.task in TASKS,
            "dataset.task",
            f"must be one of {TASKS}, got {self.dataset.task!r}",
        )
        _require(
            self.dataset.task == "classification" or not self.dataset.is_images,
            "dataset.task",
            "must be classification for image folders",
        )
        _require(
            len(self.dataset.delimiter) == 1,
            "dataset.delimiter",
            f"must be one character, got {self.dataset.delimiter!r}",
        )
        _require(
            self.dataset.label_key not in self.dataset.excluded_columns,
            "dataset.excluded_columns",
            f"must not hold the label column {self.dataset.label_key!r}",
        )
        _require(
            self.dataset.infer_feature_shape or not self.dataset.schema_path,
            "dataset.infer_feature_shape (--no_infer_feature_shape)",
            f"is for a schema SchemaGen infers; the curated schema {self.dataset.schema_path} "
            "is imported as it is (its features' shapes are its own): drop the flag, or edit "
            "the schema",
        )
        _require(
            self.dataset.image_size >= MIN_IMAGE_SIZE,
            "dataset.image_size",
            f"must be >= {MIN_IMAGE_SIZE}, got {self.dataset.image_size}",
        )
        return self


def learning_rate_for(dataset: DatasetConfig, requested: float | None) -> float:
    """--learning_rate, else the default of the dataset's kind (image models or tabular MLP)."""
    return requested or (IMAGE_LEARNING_RATE if dataset.is_images else TrainingConfig.learning_rate)


def transform_shards_for(dataset: DatasetConfig, requested: int | None, tabular: int) -> int:
    """--transform_shards, else streamed output for images and `tabular` shards otherwise."""
    if requested is not None:
        return requested
    return IMAGE_TRANSFORM_SHARDS if dataset.is_images else tabular


def _is_host_port(value: str) -> bool:
    host, _, port = value.rpartition(":")
    return bool(host) and port.isdigit()


def _require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"invalid configuration: {field} {message}")


def default_output_root() -> str:
    """Where the local runner writes when no --output_root is given."""
    return os.path.join(os.getcwd(), "tfx_output")


def local_config(
    *,
    dataset: DatasetConfig,
    output_root: str,
    pipeline_name: str | None = None,
    **overrides,
) -> PipelineConfig:
    """The local layout: <root>/<pipeline>/{pipeline_root, metadata.sqlite, serving_model}."""
    name = pipeline_name or f"{dataset.name}-pipeline"
    base = os.path.join(os.path.abspath(output_root), name)
    return PipelineConfig(
        pipeline_name=name,
        pipeline_root=os.path.join(base, "pipeline_root"),
        metadata_path=os.path.join(base, "metadata.sqlite"),
        serving_model_dir=os.path.join(base, "serving_model"),
        dataset=dataset,
        **overrides,
    ).validate()
