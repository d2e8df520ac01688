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
