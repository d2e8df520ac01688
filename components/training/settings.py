"""The Trainer contract: every training setting as one typed, frozen object, defaults here only.

create_pipeline() writes a TrainingConfig into the Trainer's custom_config (to_custom_config);
the Trainer's run_fn reads it back (from_custom_config), and the TrainTask JSON a cluster task
process reads embeds the same object: one codec (to_dict / from_dict) for both, strict about
unknown keys so that a stale or misspelled setting fails instead of falling back to a default.

The settings of the launcher that runs multi-worker clusters (local processes, a Kubernetes
TFJob) are part of it, so Kubeflow's compiler sets them through the config, never by patching
the compiled pipeline. A field's `flag` metadata makes it a command-line flag of both runners
(pipeline/flags.py builds them from here): adding a training flag is a field here and its use in
the training code.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from typing import Any, ClassVar, Union

from components import ConfigError
from components.ml import features

SINGLE_WORKER = ("auto", "one_device", "mirrored")
MULTI_WORKER = ("multi_worker_mirrored", "parameter_server")
STRATEGIES = SINGLE_WORKER + MULTI_WORKER
SHARD_POLICIES = ("auto", "file", "data")
MIXED_PRECISION = ("mixed_float16", "mixed_bfloat16")
# none: every training row counts alike; balanced: each class weighs rows / (classes x its rows)
# over the training split (scikit-learn's "balanced"), from Transform's label counts.
CLASS_WEIGHTS = ("none", "balanced")
# Adam's usual rate for the convolutional models; the tabular MLP trains faster at 0.01.
IMAGE_LEARNING_RATE = 0.001

GPU_RESOURCE = "nvidia.com/gpu"
RESTART_POLICIES = ("OnFailure", "Never", "Always", "ExitCode")
CLEAN_POD_POLICIES = ("Running", "All", "None")
DELETE_POLICIES = ("never", "on_success", "always")
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute", "")
GANG_SCHEDULERS = ("none", "coscheduling", "volcano")
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
# A day: long enough for the project's models, short enough that a stuck job frees its GPUs.
DEFAULT_DEADLINE_SECONDS = 24 * 3600
# The Trainer's custom_config keys besides the settings: the user's --custom_config (for the model
# hook; a user's run_fn gets it as fn_args.custom_config) and the staged user module (set by the
# Trainer's executor from its exec property, components.user_code).
USER_CONFIG_KEY = "user_custom_config"
USER_MODULE_CONFIG_KEY = "user_module"
# The project's model hook (components.ml.model.ModelInputs says what a hook gets).
DEFAULT_MODEL_FN = "components.ml.model.build_model"
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def needs_cluster(strategy: str) -> bool:
    """Strategies whose tasks run as separate processes with a TF_CONFIG."""
    return strategy in MULTI_WORKER


def _require(condition: bool, field: str, message: str, what: str = "configuration") -> None:
    if not condition:
        raise ConfigError(f"invalid {what}: {field} {message}")


def _kubernetes_require(condition: bool, field: str, message: str) -> None:
    _require(condition, field, message, what="Kubeflow configuration")


def flag(default: Any, help: str, name: str | None = None, **argparse_options: Any) -> Any:
    """A field that both runners offer as --NAME (default: --<field name>)."""
    metadata = {"flag": name, "help": help, "argparse": argparse_options}
    return dataclasses.field(default=default, metadata=metadata)


# --- Kubernetes pieces of a launcher --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Resources:
    """A container's CPU (cores) and memory (GB) limits and requests, and GPUs. 0: unset."""

    cpu: float = 0
    memory_gb: float = 0
    gpus: int = 0

    def validate(self, field: str) -> None:
        _kubernetes_require(self.cpu >= 0, f"{field}.cpu", f"must be >= 0, got {self.cpu}")
        _kubernetes_require(
            self.memory_gb >= 0, f"{field}.memory_gb", f"must be >= 0, got {self.memory_gb}"
        )
        _kubernetes_require(self.gpus >= 0, f"{field}.gpus", f"must be >= 0, got {self.gpus}")

    def kubernetes(self) -> dict[str, dict[str, str]]:
        """Pod resources (requests = limits: the scheduler reserves what training uses)."""
        quantities = {}
        if self.cpu:
            quantities["cpu"] = f"{self.cpu:g}"
        if self.memory_gb:
            quantities["memory"] = f"{self.memory_gb:g}G"
        limits = dict(quantities)
        if self.gpus:
            limits[GPU_RESOURCE] = str(self.gpus)
        return {"requests": quantities, "limits": limits}


@dataclasses.dataclass(frozen=True)
class Toleration:
    key: str
    operator: str = "Exists"
    value: str = ""
    effect: str = "NoSchedule"

    @classmethod
    def parse(cls, text: str) -> Toleration:
        """KEY[=VALUE][:EFFECT], as kubectl taint writes it (without VALUE: operator Exists)."""
        key_value, _, effect = text.partition(":")
        key, sep, value = key_value.partition("=")
        return cls(key=key, operator="Equal" if sep else "Exists", value=value, effect=effect)

    def kubernetes(self) -> dict[str, str]:
        toleration = {"key": self.key, "operator": self.operator}
        if self.value:
            toleration["value"] = self.value
        if self.effect:
            toleration["effect"] = self.effect
        return toleration


@dataclasses.dataclass(frozen=True)
class GpuPool:
    """Where GPU pods go: node labels to select and the taints to tolerate."""

    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = (Toleration(key=GPU_RESOURCE),)

    def validate(self) -> None:
        for toleration in self.tolerations:
            _kubernetes_require(bool(toleration.key), "gpu_pool.tolerations", "need a key")
            _kubernetes_require(
                toleration.operator in TOLERATION_OPERATORS,
                "gpu_pool.tolerations",
                f"operator must be one of {TOLERATION_OPERATORS}, got {toleration.operator!r}",
            )
            _kubernetes_require(
                toleration.effect in TOLERATION_EFFECTS,
                "gpu_pool.tolerations",
                f"effect must be one of {TOLERATION_EFFECTS[:-1]}, got {toleration.effect!r}",
            )
            _kubernetes_require(
                toleration.operator == "Equal" or not toleration.value,
                "gpu_pool.tolerations",
                f"{toleration.key}: a value needs operator Equal",
            )


# --- Launchers: where a multi-worker cluster's tasks run ------------------------------------


@dataclasses.dataclass(frozen=True)
class LocalLauncherConfig:
    """One process per task on this machine (or in the Trainer's pod); restarts come from
    TrainingConfig.max_restarts."""

    KIND: ClassVar[str] = "local"

    def validate(self) -> None:
        pass


def is_dns1123_label(name: str) -> bool:
    """A name Kubernetes accepts for a namespace (RFC 1123 label: <= 63, a-z 0-9 -)."""
    return len(name) <= 63 and bool(_DNS1123_LABEL.match(name))


def is_dns1123_subdomain(name: str) -> bool:
    """A name Kubernetes accepts for a service account (RFC 1123 subdomain: <= 253)."""
    return len(name) <= 253 and all(_DNS1123_LABEL.match(part) for part in name.split("."))


def launcher_field(default: Any, flag: str = "") -> Any:
    """A Kubernetes launcher setting; `flag` is the run_kubeflow.py flag that sets it, named in
    validation errors."""
    return dataclasses.field(default=default, metadata={"launcher_flag": flag})


@dataclasses.dataclass(frozen=True)
class KubernetesJobConfig:
    """What both Kubernetes launchers (TFJob, TrainJob) share: where the pods run, as whom, on
    which nodes, with what resources, for how long, and what happens to the job afterwards.

    Empty namespace and service account mean "the Trainer pod's own", resolved when the job is
    launched: the namespace from the pod's service-account namespace file, the service account
    from the pod object (the account KFP runs pipeline pods as holds the pipeline root's storage
    credentials)."""

    KIND: ClassVar[str] = ""

    image: str = launcher_field("", "--gpu_image")
    namespace: str = launcher_field("", "--job_namespace")
    service_account: str = launcher_field("", "--job_service_account")
    worker: Resources = launcher_field(
        Resources(cpu=4, memory_gb=16, gpus=1), "--worker_cpu/--worker_memory_gb/--gpus"
    )
    # parameter_server's coordinator (TF task type chief) only dispatches steps: no GPU.
    chief: Resources = Resources(cpu=2, memory_gb=8)
    ps: Resources = Resources(cpu=2, memory_gb=8)
    # Where pods that request GPUs go.
    gpu_pool: GpuPool = GpuPool()
    # Shared storage for the transformed shards and the model directory when the pipeline root
    # is a mounted volume (a PVC); with gs:// or s3:// pipeline roots leave it empty.
    pvc_name: str = launcher_field("", "--pvc_name")
    mount_path: str = launcher_field("", "--mount_path")
    # The job fails (and its pods are stopped) after this long: a stuck or half-scheduled job
    # does not hold GPUs forever. The launcher stops waiting a little later.
    active_deadline_seconds: int = launcher_field(
        DEFAULT_DEADLINE_SECONDS, "--job_deadline_seconds"
    )
    # All pods scheduled at once or none (a PodGroup): no half-started cluster holding GPUs.
    gang_scheduling: str = launcher_field("none", "--gang_scheduling")
    gang_schedule_timeout_seconds: int = launcher_field(600, "--gang_schedule_timeout_seconds")
    # The job object itself: deleted after success, always, or kept for inspection. A cancelled
    # Trainer (SIGTERM) always deletes it.
    delete_policy: str = launcher_field("on_success", "--job_delete")
    poll_seconds: float = 10.0
    # Where the Trainer finds the cluster when it runs outside one (a workstation, run_local.py);
    # "": in-cluster (the Trainer's pod), else $KUBECONFIG or ~/.kube/config.
    kubeconfig: str = launcher_field("", "--kubeconfig")
    # The user the job's pods run as (securityContext runAsUser/runAsGroup; -1: the image's,
    # uid 1000). A hostPath or NFS volume is not made writable for the pods' user: the pods must
    # run as the user that owns the output root (the local cluster says which).
    run_as_user: int = launcher_field(-1, "--job_run_as_user")

    def _field(self, name: str) -> str:
        flag_name = _launcher_flag(type(self), name.split(".")[0])
        return f"{self.KIND}.{name}" + (f" ({flag_name})" if flag_name else "")

    def validate(self) -> None:
        def require(condition: bool, name: str, message: str) -> None:
            _kubernetes_require(condition, self._field(name), message)

        require(bool(self.image), "image", "must name the (GPU) training image")
        require(
            not self.namespace or is_dns1123_label(self.namespace),
            "namespace",
            f"must be a Kubernetes namespace name (lower-case letters, digits and '-', at most "
            f"63, starting and ending alphanumeric), got {self.namespace!r}",
        )
        require(
            not self.service_account or is_dns1123_subdomain(self.service_account),
            "service_account",
            "must be a Kubernetes service account name (DNS-1123 subdomain: lower-case "
            f"letters, digits, '-' and '.', at most 253), got {self.service_account!r}",
        )
        for name in ("worker", "chief", "ps"):
            getattr(self, name).validate(self._field(name))
        require(self.chief.gpus == 0, "chief.gpus", "must be 0: the coordinator runs no steps")
        require(self.ps.gpus == 0, "ps.gpus", "must be 0: parameter servers hold variables")
        self.gpu_pool.validate()
        require(
            bool(self.pvc_name) == bool(self.mount_path),
            "pvc_name",
            f"and {self._field('mount_path')} go together (the volume holding the pipeline root)",
        )
        require(
            self.active_deadline_seconds >= 1,
            "active_deadline_seconds",
            f"must be >= 1, got {self.active_deadline_seconds}",
        )
        require(
            self.gang_scheduling in GANG_SCHEDULERS,
            "gang_scheduling",
            f"must be one of {GANG_SCHEDULERS}, got {self.gang_scheduling!r}",
        )
        require(
            self.gang_schedule_timeout_seconds >= 1,
            "gang_schedule_timeout_seconds",
            f"must be >= 1, got {self.gang_schedule_timeout_seconds}",
        )
        require(
            self.delete_policy in DELETE_POLICIES,
            "delete_policy",
            f"must be one of {DELETE_POLICIES}, got {self.delete_policy!r}",
        )
        require(self.poll_seconds > 0, "poll_seconds", "must be > 0")
        require(
            self.run_as_user >= -1, "run_as_user", f"must be a uid >= 0, got {self.run_as_user}"
        )

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Any:
        return from_dict(cls, values)


def _launcher_flag(cls: type, name: str) -> str:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return fields[name].metadata.get("launcher_flag", "") if name in fields else ""


@dataclasses.dataclass(frozen=True)
class TFJobConfig(KubernetesJobConfig):
    """A Kubeflow Training Operator v1 TFJob (kubeflow.org/v1, the operator's 1.9 branch): each
    pod runs the local launcher's command; TF_CONFIG comes from the operator."""

    KIND: ClassVar[str] = "tfjob"

    # ExitCode: exit codes 1-127 (a code error) fail the job at once; 128-255 (killed: preempted,
    # evicted, OOM) restart the pod. OnFailure would restart a code error in place forever.
    restart_policy: str = "ExitCode"
    # Pod restarts before the TFJob fails (runPolicy.backoffLimit).
    backoff_limit: int = 3
    # Pods deleted when the job ends (parameter servers never exit by themselves).
    clean_pod_policy: str = "Running"

    def validate(self) -> None:
        super().validate()
        require = _kubernetes_require
        require(
            self.restart_policy in RESTART_POLICIES,
            self._field("restart_policy"),
            f"must be one of {RESTART_POLICIES}, got {self.restart_policy!r}",
        )
        require(self.backoff_limit >= 0, self._field("backoff_limit"), "must be >= 0")
        require(
            self.clean_pod_policy in CLEAN_POD_POLICIES,
            self._field("clean_pod_policy"),
            f"must be one of {CLEAN_POD_POLICIES}, got {self.clean_pod_policy!r}",
        )


@dataclasses.dataclass(frozen=True)
class TrainJobConfig(KubernetesJobConfig):
    """A Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1) on a TensorFlow runtime this
    project ships (kubeflow/trainjob-runtimes.yaml, or `run_kubeflow.py manifests`): the pods
    run as a JobSet and compute their TF_CONFIG from the JobSet's indexes and host names."""

    KIND: ClassVar[str] = "trainjob"

    # Empty: the project's runtime for the strategy (components.training.trainjob.runtime_name).
    runtime_name: str = launcher_field("", "--trainjob_runtime")
    runtime_kind: str = launcher_field("TrainingRuntime", "--trainjob_runtime_kind")
    # JobSet restarts (all pods recreated) after a retryable failure (failurePolicy.maxRestarts);
    # run_kubeflow.py sets it from TrainingConfig.max_restarts, whose default this is.
    max_restarts: int = 2

    def validate(self) -> None:
        super().validate()
        require = _kubernetes_require
        require(
            not self.runtime_name or is_dns1123_subdomain(self.runtime_name),
            self._field("runtime_name"),
            f"must be a Kubernetes object name, got {self.runtime_name!r}",
        )
        require(
            self.runtime_kind in RUNTIME_KINDS,
            self._field("runtime_kind"),
            f"must be one of {RUNTIME_KINDS}, got {self.runtime_kind!r}",
        )
        require(self.max_restarts >= 0, self._field("max_restarts"), "must be >= 0")


LauncherConfig = Union[LocalLauncherConfig, TFJobConfig, TrainJobConfig]  # noqa: UP007 (a runtime union)
LAUNCHER_CONFIGS: dict[str, type] = {cls.KIND: cls for cls in typing.get_args(LauncherConfig)}


# --- The training settings ------------------------------------------------------------------

# The batch size chosen from the data (no --batch_size): small tables keep the batch of 32 per
# replica; larger ones get the power of two that makes about AUTO_BATCH_STEPS steps an epoch, so
# that the fixed cost of a step (a few ms of dispatch on CPU) does not dominate an epoch of a
# large table (issue 30: 7,700 steps of 32 rows an epoch on 250k rows).
MIN_AUTO_BATCH = 32
MAX_AUTO_BATCH = 2048
AUTO_BATCH_STEPS = 200


def auto_batch_size(train_rows: int, replicas: int = 1) -> int:
    """Per-replica batch for train_rows: the smallest power of two from MIN_AUTO_BATCH to
    MAX_AUTO_BATCH whose global batch (x replicas) gives at most AUTO_BATCH_STEPS steps an
    epoch."""
    batch = MIN_AUTO_BATCH
    while batch < MAX_AUTO_BATCH and train_rows > AUTO_BATCH_STEPS * batch * max(1, replicas):
        batch *= 2
    return batch


# Steps per call of the compiled train (and eval) function when not set: a call's fixed cost
# (the function's inputs matched against its traced signature, one entry per feature, and the
# dispatch) is paid once for this many steps; at most the steps of an epoch.
MAX_AUTO_STEPS_PER_EXECUTION = 50


def auto_steps_per_execution(steps_per_epoch: int) -> int:
    return max(1, min(steps_per_epoch, MAX_AUTO_STEPS_PER_EXECUTION))


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """How the Trainer trains: strategy and cluster shape, model and optimizer, input, launcher."""

    strategy: str = flag("mirrored", "tf.distribute strategy", choices=STRATEGIES)
    epochs: int = flag(
        20, "the most passes over the training data (early stopping may stop sooner)"
    )
    train_steps: int | None = flag(None, "train exactly this many steps instead of --epochs")
    eval_steps: int | None = flag(None, "evaluation steps (default: the whole eval split)")
    # None: chosen from the training rows (auto_batch_size).
    per_replica_batch_size: int | None = flag(
        None,
        "per-replica batch size (global = this x replicas; default: chosen from the training "
        f"rows, {MIN_AUTO_BATCH} to {MAX_AUTO_BATCH} per replica)",
        name="batch_size",
    )
    early_stopping_patience: int = flag(
        3,
        "stop after N epochs without a lower eval loss and keep the best epoch's weights "
        "(0: train every --epochs)",
    )
    steps_per_execution: int | None = flag(
        None,
        "training and evaluation steps per call of the compiled step function, for the built-in "
        "model and hooks that compile with settings.steps_per_execution (default: the steps of "
        f"an epoch, at most {MAX_AUTO_STEPS_PER_EXECUTION}; 1 with multi_worker_mirrored)",
    )
    learning_rate: float = flag(
        0.01, f"Adam's learning rate (images: {IMAGE_LEARNING_RATE} unless set)"
    )
    hidden_units: tuple[int, ...] = (32, 16)
    # Dropout after each hidden layer of the MLP (and before the CNN's softmax); None: the
    # model's own (none for the MLP, 0.2 for the small CNN). The Tuner's searches set it.
    dropout: float | None = None
    seed: int = 42
    shuffle: bool = True
    class_weight: str = flag(
        "none",
        "classification: balanced weighs each class's training rows by rows / (classes x that "
        "class's rows), from the label counts Transform computed over the training split",
        choices=CLASS_WEIGHTS,
    )
    workers: int = flag(1, "worker processes (multi_worker_mirrored, parameter_server)")
    ps: int = flag(0, "parameter servers (parameter_server)")
    shard_policy: str = flag(
        "auto",
        "per-worker input sharding (auto: FILE when there are as many files as workers)",
        choices=SHARD_POLICIES,
    )
    checkpoint_every_steps: int = flag(0, "BackupAndRestore every N steps (0: every epoch)")
    max_restarts: int = flag(2, "restarts of a failed training cluster before the Trainer fails")
    mixed_precision: str | None = flag(
        None, "Keras mixed-precision policy", choices=MIXED_PRECISION
    )
    xla: bool = flag(False, "XLA-compile the train step")
    cpu_devices: int = flag(
        0, "split the CPU into N logical devices (mirrored without GPUs; in a fresh process)"
    )
    image_model: str = flag(
        "small_cnn",
        "image classifier: small_cnn (fast on CPU) or mobilenet_v2 (weights=None)",
        choices=features.IMAGE_MODELS,
    )
    # Where a multi-worker cluster runs; single-worker strategies train in the Trainer.
    launcher: LauncherConfig = LocalLauncherConfig()
    # The model hook the project's run_fn calls inside strategy.scope() (--model_fn or
    # --module_file's build_model; pipeline.user_code).
    model_fn: str = DEFAULT_MODEL_FN

    @property
    def needs_cluster(self) -> bool:
        return needs_cluster(self.strategy)

    def batch_size_for(self, train_rows: int | None, replicas: int = 1) -> int:
        """The per-replica batch: --batch_size when given, else auto_batch_size of the rows
        (MIN_AUTO_BATCH when they are not counted)."""
        if self.per_replica_batch_size is not None:
            return self.per_replica_batch_size
        return auto_batch_size(train_rows, replicas) if train_rows else MIN_AUTO_BATCH

    def steps_per_execution_for(self, steps_per_epoch: int) -> int:
        """--steps_per_execution when given, else auto_steps_per_execution."""
        if self.steps_per_execution is not None:
            return self.steps_per_execution
        return auto_steps_per_execution(steps_per_epoch)

    def validate(self) -> TrainingConfig:
        _require(
            self.strategy in STRATEGIES,
            _training_field("strategy"),
            f"must be one of {STRATEGIES}, got {self.strategy!r}",
        )
        _require(self.epochs >= 1, _training_field("epochs"), f"must be >= 1, got {self.epochs}")
        for name in ("train_steps", "eval_steps"):
            value = getattr(self, name)
            _require(
                value is None or value >= 1, _training_field(name), f"must be >= 1, got {value}"
            )
        _require(
            self.per_replica_batch_size is None or self.per_replica_batch_size >= 1,
            _training_field("per_replica_batch_size"),
            f"must be >= 1, got {self.per_replica_batch_size}",
        )
        _require(
            self.steps_per_execution is None or self.steps_per_execution >= 1,
            _training_field("steps_per_execution"),
            f"must be >= 1, got {self.steps_per_execution}",
        )
        _require(
            self.early_stopping_patience >= 0,
            _training_field("early_stopping_patience"),
            f"must be >= 0, got {self.early_stopping_patience}",
        )
        _require(self.learning_rate > 0, _training_field("learning_rate"), "must be > 0")
        _require(
            bool(self.hidden_units) and all(u >= 1 for u in self.hidden_units),
            _training_field("hidden_units"),
            f"must be positive layer widths, got {self.hidden_units}",
        )
        _require(
            self.dropout is None or 0 <= self.dropout < 1,
            _training_field("dropout"),
            f"must be in [0, 1), got {self.dropout}",
        )
        _require(
            self.class_weight in CLASS_WEIGHTS,
            _training_field("class_weight"),
            f"must be one of {CLASS_WEIGHTS}, got {self.class_weight!r}",
        )
        _require(self.workers >= 1, _training_field("workers"), f"must be >= 1, got {self.workers}")
        _require(self.ps >= 0, _training_field("ps"), f"must be >= 0, got {self.ps}")
        if self.strategy == "parameter_server":
            _require(
                self.ps >= 1,
                _training_field("ps"),
                "must be >= 1 for strategy parameter_server (parameter servers)",
            )
        else:
            _require(
                self.ps == 0,
                _training_field("ps"),
                f"is only valid with strategy parameter_server, got ps={self.ps} with "
                f"{self.strategy}",
            )
        if not self.needs_cluster:
            _require(
                self.workers == 1,
                _training_field("workers"),
                f"must be 1 for the single-worker strategy {self.strategy}",
            )
        _require(
            self.shard_policy in SHARD_POLICIES,
            _training_field("shard_policy"),
            f"must be one of {SHARD_POLICIES}, got {self.shard_policy!r}",
        )
        _require(
            self.mixed_precision in (None, *MIXED_PRECISION),
            _training_field("mixed_precision"),
            f"must be one of {MIXED_PRECISION} or unset, got {self.mixed_precision!r}",
        )
        _require(
            self.checkpoint_every_steps >= 0,
            _training_field("checkpoint_every_steps"),
            "must be >= 0",
        )
        _require(self.max_restarts >= 0, _training_field("max_restarts"), "must be >= 0")
        _require(self.cpu_devices >= 0, _training_field("cpu_devices"), "must be >= 0")
        _require(
            self.image_model in features.IMAGE_MODELS,
            _training_field("image_model"),
            f"must be one of {features.IMAGE_MODELS}, got {self.image_model!r}",
        )
        self.launcher.validate()
        return self

    def to_custom_config(self, label_key: str) -> dict[str, Any]:
        """The Trainer's custom_config: the label column and every setting."""
        return {features.LABEL_KEY_CONFIG: label_key, **to_dict(self)}

    @classmethod
    def from_custom_config(cls, custom_config: dict[str, Any]) -> tuple[str, TrainingConfig]:
        """(label_key, settings) from what to_custom_config wrote (the user's keys aside)."""
        values = {
            k: v
            for k, v in custom_config.items()
            if k not in (USER_CONFIG_KEY, USER_MODULE_CONFIG_KEY)
        }
        try:
            label_key = values.pop(features.LABEL_KEY_CONFIG)
        except KeyError:
            raise ConfigError(
                f"invalid Trainer custom_config: no {features.LABEL_KEY_CONFIG!r}"
            ) from None
        return label_key, from_dict(cls, values)


def _training_field(name: str) -> str:
    """training.NAME, with the runners' flag when the field has one (errors name the flag)."""
    field = TrainingConfig.__dataclass_fields__[name]
    if "flag" not in field.metadata:
        return f"training.{name}"
    return f"training.{name} (--{field.metadata['flag'] or name})"


# --- The codec: frozen dataclasses <-> JSON types -------------------------------------------

_KIND_KEY = "kind"


def to_dict(value: Any) -> Any:
    """JSON types for a dataclass tree; a launcher config carries its kind."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: to_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
        kind = getattr(type(value), "KIND", None)
        return {_KIND_KEY: kind, **out} if kind else out
    if isinstance(value, (tuple, list)):
        return [to_dict(item) for item in value]
    return value


def from_dict(cls: type, values: Any) -> Any:
    """The dataclass `cls` from to_dict's output; unknown keys and wrong types are errors."""
    return _decode(cls, values, cls.__name__)


def dumps(value: Any) -> str:
    return json.dumps(to_dict(value), sort_keys=True)


def _decode(annotation: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        dataclass_options = [
            o for o in options if isinstance(o, type) and dataclasses.is_dataclass(o)
        ]
        if dataclass_options:
            return _decode_launcher(dataclass_options, value, where)
        (option,) = [o for o in options if o is not type(None)]
        return _decode(option, value, where)
    if origin is list:
        (item_type,) = typing.get_args(annotation)
        _expect(isinstance(value, list), where, "a list", value)
        return [_decode(item_type, item, f"{where}[]") for item in value]
    if origin is tuple:
        args = typing.get_args(annotation)
        _expect(isinstance(value, (list, tuple)), where, "a list", value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], item, f"{where}[]") for item in value)
        _expect(len(value) == len(args), where, f"{len(args)} items", value)
        return tuple(_decode(a, item, f"{where}[]") for a, item in zip(args, value, strict=True))
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        _expect(isinstance(value, dict), where, "an object", value)
        values = dict(value)
        kind = getattr(annotation, "KIND", None)
        if kind is not None and values.pop(_KIND_KEY, kind) != kind:
            raise ConfigError(f"invalid {where}: kind must be {kind!r}")
        hints = typing.get_type_hints(annotation)
        names = {f.name for f in dataclasses.fields(annotation)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"invalid {where}: unknown setting(s) {unknown}")
        return annotation(
            **{name: _decode(hints[name], item, f"{where}.{name}") for name, item in values.items()}
        )
    if annotation is float:
        _expect(
            isinstance(value, (int, float)) and not isinstance(value, bool),
            where,
            "a number",
            value,
        )
        return float(value)
    if annotation in (int, str, bool):
        ok = isinstance(value, annotation) and (annotation is bool or not isinstance(value, bool))
        _expect(ok, where, annotation.__name__, value)
        return value
    raise TypeError(f"{where}: no decoding for {annotation!r}")


def _decode_launcher(options: list[type], value: Any, where: str) -> Any:
    _expect(isinstance(value, dict), where, "an object", value)
    kinds = {getattr(option, "KIND", None): option for option in options}
    kind = value.get(_KIND_KEY)
    if kind not in kinds:
        # key=str: a kind is a str (the KIND ClassVar); getattr's None default types it Optional.
        kinds_text = sorted(kinds, key=str)
        raise ConfigError(f"invalid {where}: kind must be one of {kinds_text}, got {kind!r}")
    return _decode(kinds[kind], value, where)


def _expect(condition: bool, where: str, expected: str, value: Any) -> None:
    if not condition:
        raise ConfigError(f"invalid {where}: expected {expected}, got {value!r}")
