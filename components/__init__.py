"""The project's lower layer, by job: `ml` (user ML code: features, preprocessing_fn, the Keras
model, its input pipeline and serving export), `training` (the distributed-training runtime),
`records` (tf.Example and TFRecord I/O), `tfx_components` (the custom TFX components), and
`compat` (every patch of TFX or Beam internals).

Importing this package selects Keras 2 (tf-keras) for TensorFlow, which TFX 1.16's Transform and
Trainer need. TensorFlow 2.16 picks its Keras when it is first imported, from TF_USE_LEGACY_KERAS,
so every entry point imports this package (directly, or through `pipeline`) before TensorFlow,
and processes it starts inherit the variable (KERAS_ENV for those started with a clean
environment). This is the one place that sets it.
"""

import os

KERAS_ENV = {"TF_USE_LEGACY_KERAS": "1"}
for _name, _value in KERAS_ENV.items():
    os.environ.setdefault(_name, _value)

# Logger whose records the local runner prints as progress lines (pipeline/local/progress.py);
# training tasks in other processes prefix them with this name so the launcher can relay them.
PROGRESS_LOGGER = "tfx_scaleout.progress"


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field (or flag)."""


def _keras_tuner_on_tf_keras() -> None:
    """KerasTuner picks its Keras when keras_tuner.src.backend.config is imported: Keras 3 when
    `import keras` gives Keras 3 (installed beside tf-keras), and then its Tuner refuses the
    tf-keras models TFX 1.16's modules build (isinstance(model, keras.Model) of Keras 3). Under
    TF_USE_LEGACY_KERAS=1 that one module is loaded with `keras` naming tf-keras, so that
    KerasTuner runs on tensorflow.keras (its single-backend mode), as TFX's Tuner expects. Only
    a finder on sys.meta_path until keras_tuner is imported: no process pays for it otherwise."""
    import importlib.abc
    import importlib.machinery
    import sys

    target = "keras_tuner.src.backend.config"

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target_module=None):
            if name != target or os.environ.get("TF_USE_LEGACY_KERAS") != "1":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return None
            stock = spec.loader.exec_module

            def exec_module(module):
                import tf_keras

                saved = sys.modules.get("keras")
                sys.modules["keras"] = tf_keras
                try:
                    stock(module)
                finally:
                    if saved is None:
                        sys.modules.pop("keras", None)
                    else:
                        sys.modules["keras"] = saved

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec

    if not any(type(finder).__name__ == "_Finder" for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


_keras_tuner_on_tf_keras()
