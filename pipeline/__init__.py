"""Pipeline layer: configuration, create_pipeline(), runners, Beam arguments, MLMD read-outs.

TFX 1.16's Transform and Trainer need Keras 2 (tf-keras). TensorFlow 2.16 picks the Keras
implementation when it is first imported, from TF_USE_LEGACY_KERAS, so the variable must be set
before anything imports TensorFlow, in this process and in every process it starts (Beam's
multi-processing workers inherit the environment). Entry points import this package first.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
