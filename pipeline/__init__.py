"""Pipeline layer: configuration, create_pipeline(), runners, Beam arguments, MLMD read-outs.

Importing it imports `components` first, which selects Keras 2 before anything imports
TensorFlow (see components/__init__.py).
"""

import os

import components  # noqa: F401

# The checkout (or installed tree) holding pipeline/, components/ and schemas/.
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
