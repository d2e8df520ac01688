"""What the local runner's console shows: the log records sent to a log file instead of the
console (progress lines and errors stay on it). The stderr filter and the exit without teardown
that every entry point uses are in pipeline/entrypoint.py."""

from __future__ import annotations

import datetime
import logging
import os
import warnings


def configure_logging(log_dir: str) -> str:
    """Everything to a log file; the console gets progress lines and errors only."""
    os.makedirs(log_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    log_path = os.path.join(log_dir, f"run-{stamp}.log")
    file_handler = logging.FileHandler(log_path)
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [file_handler]
    root.setLevel(logging.INFO)
    # TensorFlow's logger writes to stderr by itself when it is imported before this point.
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.handlers.clear()
    tf_logger.propagate = True
    logging.captureWarnings(True)
    warnings.simplefilter("default")

    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.INFO)
    # absl would otherwise also write its records to stderr.
    absl_logging.get_absl_handler().setLevel(logging.CRITICAL + 1)
    return log_path
