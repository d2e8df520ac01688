"""Kubeflow settings: images, per-component resources, the GPU node pool, and how the Trainer
launches multi-worker training (a Training Operator TFJob). Frozen, built once by
kubeflow/run_kubeflow.py; the pipeline itself (create_pipeline) knows nothing of them.
"""

from __future__ import annotations

import dataclasses

from pipeline.config import ConfigError

LAUNCHERS = ("local", "tfjob")
RESTART_POLICIES = ("OnFailure", "Never", "Always", "ExitCode")
CLEAN_POD_POLICIES = ("Running", "All", "None")
DELETE_POLICIES = ("never", "on_success", "always")
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute", "")
GPU_RESOURCE = "nvidia.com/gpu"
# Where the images put the project (WORKDIR) and its virtual environment: the compiled pipeline
# refers to files inside the image by these paths (curated schemas, the embedded penguins CSV).
IMAGE_PROJECT_DIR = "/app"
# The embedded digits dataset (scikit-learn's handwritten digits as JPEG class folders), written
# into the project's image when it is built (kubeflow/Dockerfile), as the penguins CSV ships in
# its package.
IMAGE_DIGITS_DIR = f"{IMAGE_PROJECT_DIR}/data/digits"
IMAGE_VENV = "/opt/venv"
IMAGE_SITE_PACKAGES = f"{IMAGE_VENV}/lib/python3.10/site-packages"


def _require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"invalid Kubeflow configuration: {field} {message}")


@dataclasses.dataclass(frozen=True)
class Resources:
    """A container's CPU (cores) and memory (GB) limits and requests, and GPUs. 0: unset."""

    cpu: float = 0
    memory_gb: float = 0
    gpus: int = 0

    def validate(self, field: str) -> None:
        _require(self.cpu >= 0, f"{field}.cpu", f"must be >= 0, got {self.cpu}")
        _require(self.memory_gb >= 0, f"{field}.memory_gb", f"must be >= 0, got {self.memory_gb}")
        _require(self.gpus >= 0, f"{field}.gpus", f"must be >= 0, got {self.gpus}")

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
            _require(bool(toleration.key), "gpu_pool.tolerations", "need a key")
            _require(
                toleration.operator in TOLERATION_OPERATORS,
                "gpu_pool.tolerations",
                f"operator must be one of {TOLERATION_OPERATORS}, got {toleration.operator!r}",
            )
            _require(
                toleration.effect in TOLERATION_EFFECTS,
                "gpu_pool.tolerations",
                f"effect must be one of {TOLERATION_EFFECTS[:-1]}, got {toleration.effect!r}",
            )
            _require(
                toleration.operator == "Equal" or not toleration.value,
                "gpu_pool.tolerations",
                f"{toleration.key}: a value needs operator Equal",
            )


@dataclasses.dataclass(frozen=True)
class TFJobConfig:
    """A Kubeflow Training Operator TFJob (kubeflow.org/v1) for multi-worker strategies: each pod
    runs the local launcher's command; TF_CONFIG comes from the operator."""

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
    # Where pods that request GPUs go (copied from KubeflowConfig.gpu_pool at compile time).
    gpu_pool: GpuPool = GpuPool()
    # Shared storage for the transformed shards and the model directory when the pipeline root
    # is a mounted volume (a PVC); with gs:// or s3:// pipeline roots leave it empty.
    pvc_name: str = ""
    mount_path: str = ""
    poll_seconds: float = 10.0
    # 0: wait as long as it takes.
    timeout_seconds: float = 0.0

    def validate(self) -> None:
        _require(bool(self.image), "tfjob.image", "must name the (GPU) training image")
        _require(bool(self.namespace), "tfjob.namespace", "must not be empty")
        for name in ("worker", "chief", "ps"):
            getattr(self, name).validate(f"tfjob.{name}")
        self.gpu_pool.validate()
        _require(
            self.restart_policy in RESTART_POLICIES,
            "tfjob.restart_policy",
            f"must be one of {RESTART_POLICIES}, got {self.restart_policy!r}",
        )
        _require(self.backoff_limit >= 0, "tfjob.backoff_limit", "must be >= 0")
        _require(
            self.clean_pod_policy in CLEAN_POD_POLICIES,
            "tfjob.clean_pod_policy",
            f"must be one of {CLEAN_POD_POLICIES}, got {self.clean_pod_policy!r}",
        )
        _require(
            self.delete_policy in DELETE_POLICIES,
            "tfjob.delete_policy",
            f"must be one of {DELETE_POLICIES}, got {self.delete_policy!r}",
        )
        _require(
            bool(self.pvc_name) == bool(self.mount_path),
            "tfjob.pvc_name",
            "and tfjob.mount_path go together (the volume holding the pipeline root)",
        )
        _require(self.poll_seconds > 0, "tfjob.poll_seconds", "must be > 0")
        _require(self.timeout_seconds >= 0, "tfjob.timeout_seconds", "must be >= 0")

    def to_dict(self) -> dict:
        """JSON-serializable (the Trainer's custom_config carries it to the Trainer's pod)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TFJobConfig:
        values = dict(values)
        for name in ("worker", "chief", "ps"):
            if name in values:
                values[name] = Resources(**values[name])
        if "gpu_pool" in values:
            pool = values["gpu_pool"]
            values["gpu_pool"] = GpuPool(
                node_selector=tuple(tuple(pair) for pair in pool.get("node_selector", ())),
                tolerations=tuple(Toleration(**t) for t in pool.get("tolerations", ())),
            )
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class KubeflowConfig:
    """How the pipeline runs on Kubeflow Pipelines."""

    # The project's image (pinned stack + project) for every component but the Trainer, and the
    # GPU variant (CUDA base, TensorFlow's GPU build) for the Trainer and TFJob pods.
    image: str
    gpu_image: str
    # Beam components (ExampleGen, StatisticsGen, Transform, Evaluator): pods running
    # DirectRunner need the CPU and memory; with a remote runner they only submit the job.
    beam_resources: Resources = Resources(cpu=4, memory_gb=16)
    # Other components (schema import, validator, resolver, pusher).
    default_resources: Resources = Resources(cpu=1, memory_gb=4)
    # The Trainer's pod: GPUs when it trains itself (single-worker strategies).
    trainer_resources: Resources = Resources(cpu=8, memory_gb=32, gpus=1)
    gpu_pool: GpuPool = GpuPool()
    # Multi-worker strategies: "tfjob" (a TFJob on the cluster) or "local" (task processes in
    # the Trainer's pod).
    launcher: str = "tfjob"
    tfjob: TFJobConfig = TFJobConfig()

    def validate(self) -> KubeflowConfig:
        _require(bool(self.image), "image", "must not be empty")
        _require(bool(self.gpu_image), "gpu_image", "must not be empty")
        for name in ("beam_resources", "default_resources", "trainer_resources"):
            getattr(self, name).validate(name)
        self.gpu_pool.validate()
        _require(
            self.launcher in LAUNCHERS,
            "launcher",
            f"must be one of {LAUNCHERS}, got {self.launcher!r}",
        )
        if self.launcher == "tfjob":
            self.tfjob_settings().validate()
        return self

    def tfjob_settings(self) -> TFJobConfig:
        """The TFJob settings the Trainer gets: the GPU image and pool unless set apart."""
        return dataclasses.replace(
            self.tfjob, image=self.tfjob.image or self.gpu_image, gpu_pool=self.gpu_pool
        )
