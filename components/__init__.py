"""User code and custom TFX components: features, preprocessing_fn, model, run_fn, strategies,
the sharded CSV ExampleGen executor, the sharded Transform executor and the failing validator.

TFX loads this code by module path inside component executors (and Beam workers), sometimes
before the pipeline package is imported, so Keras 2 is selected here too (see pipeline/__init__).
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

# Logger whose records the local runner prints as progress lines (pipeline/progress.py);
# training tasks in other processes prefix them with this name so the launcher can relay them.
PROGRESS_LOGGER = "tfx_scaleout.progress"
