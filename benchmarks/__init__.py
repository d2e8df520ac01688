"""Side-by-side measurements against the references named in each issue (not timed tests).

Importing it imports `components` first, which selects Keras 2 before TensorFlow loads.
"""

import components  # noqa: F401
