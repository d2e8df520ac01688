"""BaselineModel: a container component (no resolver), the same on LocalDagRunner and Kubeflow."""

from __future__ import annotations

from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import channel, standard_artifacts

from components.tfx_components.baseline_model import executor, spec


class BaselineModel(base_component.BaseComponent):
    SPEC_CLASS = spec.BaselineModelSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, *, candidate: channel.BaseChannel, serving_model_dir: str):
        super().__init__(
            spec=spec.BaselineModelSpec(
                candidate=candidate,
                serving_model_dir=serving_model_dir,
                baseline_model=channel.Channel(type=standard_artifacts.Model),
            )
        )
