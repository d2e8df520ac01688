"""Kubeflow settings: images, per-component resources and the GPU node pool. Frozen, built once
by kubeflow/run_kubeflow.py; the pipeline itself (create_pipeline) knows nothing of them. How
multi-worker training is launched (a Training Operator v1 TFJob or a Kubeflow Trainer v2
TrainJob) is a training setting (components.training.settings.TFJobConfig, TrainJobConfig),
carried by the pipeline config.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TypeVar

from components import ConfigError
from components.training.settings import LAUNCHER_CONFIGS, GpuPool, KubernetesJobConfig, Resources

LAUNCHERS = tuple(LAUNCHER_CONFIGS)
JobConfig = TypeVar("JobConfig", bound=KubernetesJobConfig)
# Where the images put the project (WORKDIR) and its virtual environment: the compiled pipeline
# refers to files inside the image by these paths (curated schemas, the embedded penguins CSV).
IMAGE_PROJECT_DIR = "/app"
# The embedded digits dataset (scikit-learn's handwritten digits as JPEG class folders), written
# into the project's image when it is built (kubeflow/Dockerfile), as the penguins CSV ships in
# its package.
IMAGE_DIGITS_DIR = f"{IMAGE_PROJECT_DIR}/data/digits"
IMAGE_VENV = "/opt/venv"
IMAGE_SITE_PACKAGES = f"{IMAGE_VENV}/lib/python3.10/site-packages"


# An image reference pinned by content: NAME@sha256:<64 hex digits> (a tag may precede the @).
_PINNED_IMAGE = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


def has_tag_or_digest(image: str) -> bool:
    """NAME:TAG or NAME@DIGEST (a registry's host:port is not a tag)."""
    name = image.split("@", 1)[0]
    return "@" in image or ":" in name.rsplit("/", 1)[-1]


def is_pinned(image: str) -> bool:
    """Whether an image reference names one image by digest, not a tag that can move."""
    return bool(_PINNED_IMAGE.match(image))


def _require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"invalid Kubeflow configuration: {field} {message}")


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
    # Other components (schema import, validator, baseline, pusher, ExampleGen driver).
    default_resources: Resources = Resources(cpu=1, memory_gb=4)
    # The Trainer's pod: GPUs when it trains itself (single-worker strategies).
    trainer_resources: Resources = Resources(cpu=8, memory_gb=32, gpus=1)
    # The Trainer's pod when a launcher's pods (TFJob, TrainJob) train: it only submits the job
    # and follows it, so a small CPU-only request.
    watcher_resources: Resources = Resources(cpu=1, memory_gb=2)
    gpu_pool: GpuPool = GpuPool()
    # KFP's cache key holds each task's image reference, not the image's content: a tag rebuilt
    # with new code would be a cache hit for results of the old image. Images must be pinned by
    # digest unless this is set.
    allow_unpinned_images: bool = False
    # A PersistentVolumeClaim mounted in every pipeline pod (data, served models), and where.
    pvc_name: str = ""
    mount_path: str = ""

    def validate(self) -> KubeflowConfig:
        _require(bool(self.image), "image", "must not be empty")
        _require(bool(self.gpu_image), "gpu_image", "must not be empty")
        for field in ("image", "gpu_image"):
            image = getattr(self, field)
            _require(
                has_tag_or_digest(image),
                f"--{field}",
                f"{image!r} names no tag or digest (NAME:TAG or NAME@sha256:...): the cluster "
                "would pull whatever :latest is when the pod starts",
            )
        _require(
            bool(self.pvc_name) or not self.mount_path,
            "--mount_path",
            "needs --pvc_name (the PersistentVolumeClaim to mount there)",
        )
        _require(
            not self.pvc_name or self.mount_path.startswith("/"),
            "--pvc_name",
            f"{self.pvc_name!r} needs --mount_path, an absolute path where the pods mount it",
        )
        if not self.allow_unpinned_images:
            for field in ("image", "gpu_image"):
                image = getattr(self, field)
                _require(
                    is_pinned(image),
                    field,
                    f"must be pinned by digest (NAME@sha256:...), got {image!r}: Kubeflow "
                    "Pipelines caches by image reference, so a rebuilt image under the same tag "
                    "would reuse results of the old one. kubeflow/build_images.sh --push prints "
                    "the pinned references; --allow_unpinned_images accepts a tag anyway",
                )
        for name in ("beam_resources", "default_resources", "trainer_resources"):
            getattr(self, name).validate(name)
        self.watcher_resources.validate("watcher_resources")
        _require(self.watcher_resources.gpus == 0, "watcher_resources.gpus", "must be 0")
        self.gpu_pool.validate()
        return self

    def kubernetes_job(self, job: JobConfig) -> JobConfig:
        """A training job (TFJob, TrainJob) on this cluster: the GPU image and pool unless the
        job sets its own image."""
        return dataclasses.replace(job, image=job.image or self.gpu_image, gpu_pool=self.gpu_pool)
