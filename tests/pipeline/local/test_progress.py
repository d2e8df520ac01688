from __future__ import annotations

import io
import logging

from pipeline.local import progress


def emit(handler, msg, *args):
    handler.handle(logging.LogRecord("absl", logging.INFO, __file__, 1, msg, args, None))


def test_lines_for_executed_cached_resolved_and_failed_components():
    out = io.StringIO()
    handler = progress.ComponentProgress(4, out)
    emit(handler, "Component %s is running.", "CsvExampleGen")
    emit(handler, "Going to run a new execution %d", 1)
    emit(handler, "Going to run a new execution: %s", "ExecutionInfo(...)")  # other template
    emit(handler, "Component %s is finished.", "CsvExampleGen")
    emit(handler, "Component %s is running.", "Transform")
    emit(handler, "A cached execution %d is used.", 7)
    emit(handler, "Component %s is finished.", "Transform")
    emit(handler, "Component %s is running.", "resolver")
    emit(handler, "Component %s is finished.", "resolver")
    emit(handler, "Component %s is running.", "Trainer")
    emit(handler, "Going to run a new execution %d", 9)
    emit(handler, "Execution %d failed.", 9)

    lines = out.getvalue().splitlines()
    assert [line.split("] ", 1)[1].rsplit(" in ", 1)[0] for line in lines] == [
        "(1/4) CsvExampleGen started",
        "(1/4) CsvExampleGen executed",
        "(2/4) Transform started",
        "(2/4) Transform cached",
        "(3/4) resolver started",
        "(3/4) resolver resolved",
        "(4/4) Trainer started",
        "(4/4) Trainer FAILED",
    ]
    assert [(r["component"], r["status"], r["execution_id"]) for r in handler.records] == [
        ("CsvExampleGen", "executed", 1),
        ("Transform", "cached", 7),
        ("resolver", "resolved", None),
        ("Trainer", "FAILED", 9),
    ]
    assert handler.last_component == "Trainer"


def test_attach_listens_to_absl_logger():
    out = io.StringIO()
    handler = progress.attach(1, out)
    try:
        logging.getLogger("absl").info("Component %s is running.", "Pusher")
    finally:
        progress.detach(handler)
    logging.getLogger("absl").info("Component %s is running.", "Ignored")
    assert "Pusher started" in out.getvalue()
    assert "Ignored" not in out.getvalue()
