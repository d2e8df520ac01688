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
# Adam's usual rate for the convolutional models; the tabular MLP trains faster at 0.01.
IMAGE_LEARNING_RATE = 0.001

GPU_RESOURCE = "nvidia.com/gpu"
RESTART_POLICIES = ("OnFailure", "Never", "Always", "ExitCode")
CLEAN_POD_POLICIES = ("Running", "All", "None")
DELETE_POLICIES = ("never", "on_success", "always")
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute", "")


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


@dataclasses.dataclass(frozen=True)
class TFJobConfig:
    """A Kubeflow Training Operator TFJob (kubeflow.org/v1) for multi-worker strategies: each pod
    runs the local launcher's command; TF_CONFIG comes from the operator."""

    KIND: ClassVar[str] = "tfjob"

    image: str = ""
    namespace: str = "kubeflow"
    worker: Resources = Resources(cpu=4, memory_gb=16, gpus=1)
    chief: Resources = Resources(cpu=4, memory_gb=16, gpus=1)
    ps: Resources = Resources(cpu=2, memory_gb=8)
    restart_policy: str = "OnFailure"
    # Pod restarts before the TFJob fails (runPolicy.backoffLimit).
    backoff_limit: int = 3
    # Pods deleted when the job ends (parameter servers never exit by themselves).
    clean_pod_policy: str = "Running"
    # The TFJob object itself: deleted after success, always, or kept for inspection.
    delete_policy: str = "on_success"
    service_account: str = ""
    # Where pods that request GPUs go.
    gpu_pool: GpuPool = GpuPool()
    # Shared storage for the transformed shards and the model directory when the pipeline root
    # is a mounted volume (a PVC); with gs:// or s3:// pipeline roots leave it empty.
    pvc_name: str = ""
    mount_path: str = ""
    poll_seconds: float = 10.0
    # 0: wait as long as it takes.
    timeout_seconds: float = 0.0

    def validate(self) -> None:
        require = _kubernetes_require
        require(bool(self.image), "tfjob.image", "must name the (GPU) training image")
        require(bool(self.namespace), "tfjob.namespace", "must not be empty")
        for name in ("worker", "chief", "ps"):
            getattr(self, name).validate(f"tfjob.{name}")
        self.gpu_pool.validate()
        require(
            self.restart_policy in RESTART_POLICIES,
            "tfjob.restart_policy",
            f"must be one of {RESTART_POLICIES}, got {self.restart_policy!r}",
        )
        require(self.backoff_limit >= 0, "tfjob.backoff_limit", "must be >= 0")
        require(
            self.clean_pod_policy in CLEAN_POD_POLICIES,
            "tfjob.clean_pod_policy",
            f"must be one of {CLEAN_POD_POLICIES}, got {self.clean_pod_policy!r}",
        )
        require(
            self.delete_policy in DELETE_POLICIES,
            "tfjob.delete_policy",
            f"must be one of {DELETE_POLICIES}, got {self.delete_policy!r}",
        )
        require(
            bool(self.pvc_name) == bool(self.mount_path),
            "tfjob.pvc_name",
            "and tfjob.mount_path go together (the volume holding the pipeline root)",
        )
        require(self.poll_seconds > 0, "tfjob.poll_seconds", "must be > 0")
        require(self.timeout_seconds >= 0, "tfjob.timeout_seconds", "must be >= 0")

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TFJobConfig:
        return from_dict(cls, values)


LauncherConfig = Union[LocalLauncherConfig, TFJobConfig]  # noqa: UP007 (a runtime union)
LAUNCHER_CONFIGS: dict[str, type] = {cls.KIND: cls for cls in typing.get_args(LauncherConfig)}


# --- The training settings ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """How the Trainer trains: strategy and cluster shape, model and optimizer, input, launcher."""

    strategy: str = flag("mirrored", "tf.distribute strategy", choices=STRATEGIES)
    epochs: int = flag(20, "passes over the training data")
    train_steps: int | None = flag(None, "train exactly this many steps instead of --epochs")
    eval_steps: int | None = flag(None, "evaluation steps (default: the whole eval split)")
    per_replica_batch_size: int = flag(
        32, "per-replica batch size (global = this x replicas)", name="batch_size"
    )
    learning_rate: float = flag(
        0.01, f"Adam's learning rate (images: {IMAGE_LEARNING_RATE} unless set)"
    )
    hidden_units: tuple[int, ...] = (32, 16)
    seed: int = 42
    shuffle: bool = True
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

    @property
    def needs_cluster(self) -> bool:
        return needs_cluster(self.strategy)

    def validate(self) -> TrainingConfig:
        _require(
            self.strategy in STRATEGIES,
            "training.strategy",
            f"must be one of {STRATEGIES}, got {self.strategy!r}",
        )
        _require(self.epochs >= 1, "training.epochs", f"must be >= 1, got {self.epochs}")
        for name in ("train_steps", "eval_steps"):
            value = getattr(self, name)
            _require(value is None or value >= 1, f"training.{name}", f"must be >= 1, got {value}")
        _require(
            self.per_replica_batch_size >= 1, "training.per_replica_batch_size", "must be >= 1"
        )
        _require(self.learning_rate > 0, "training.learning_rate", "must be > 0")
        _require(
            bool(self.hidden_units) and all(u >= 1 for u in self.hidden_units),
            "training.hidden_units",
            f"must be positive layer widths, got {self.hidden_units}",
        )
        _require(self.workers >= 1, "training.workers", f"must be >= 1, got {self.workers}")
        if self.strategy == "parameter_server":
            _require(
                self.ps >= 1,
                "training.ps",
                "must be >= 1 for strategy parameter_server (parameter servers)",
            )
        else:
            _require(
                self.ps == 0,
                "training.ps",
                f"is only valid with strategy parameter_server, got ps={self.ps} with "
                f"{self.strategy}",
            )
        if not self.needs_cluster:
            _require(
                self.workers == 1,
                "training.workers",
                f"must be 1 for the single-worker strategy {self.strategy}",
            )
        _require(
            self.shard_policy in SHARD_POLICIES,
            "training.shard_policy",
            f"must be one of {SHARD_POLICIES}, got {self.shard_policy!r}",
        )
        _require(
            self.mixed_precision in (None, *MIXED_PRECISION),
            "training.mixed_precision",
            f"must be one of {MIXED_PRECISION} or unset, got {self.mixed_precision!r}",
        )
        _require(
            self.checkpoint_every_steps >= 0, "training.checkpoint_every_steps", "must be >= 0"
        )
        _require(self.max_restarts >= 0, "training.max_restarts", "must be >= 0")
        _require(self.cpu_devices >= 0, "training.cpu_devices", "must be >= 0")
        _require(
            self.image_model in features.IMAGE_MODELS,
            "training.image_model",
            f"must be one of {features.IMAGE_MODELS}, got {self.image_model!r}",
        )
        self.launcher.validate()
        return self

    def to_custom_config(self, label_key: str) -> dict[str, Any]:
        """The Trainer's custom_config: the label column and every setting."""
        return {features.LABEL_KEY_CONFIG: label_key, **to_dict(self)}

    @classmethod
    def from_custom_config(cls, custom_config: dict[str, Any]) -> tuple[str, TrainingConfig]:
        """(label_key, settings) from what to_custom_config wrote."""
        values = dict(custom_config)
        try:
            label_key = values.pop(features.LABEL_KEY_CONFIG)
        except KeyError:
            raise ConfigError(
                f"invalid Trainer custom_config: no {features.LABEL_KEY_CONFIG!r}"
            ) from None
        return label_key, from_dict(cls, values)


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
