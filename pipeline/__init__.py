"""Pipeline layer: configuration, create_pipeline(), runners, Beam arguments, MLMD read-outs.

Importing it imports `components` first, which selects Keras 2 before anything imports
TensorFlow (see components/__init__.py).
"""

import components  # noqa: F401
