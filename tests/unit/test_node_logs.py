"""Every log line of a node names the node (``[node-id]``), uvicorn's lines included."""

from __future__ import annotations

import io
import logging
import logging.config
from collections.abc import Iterator

import pytest

from flowpark.runtime import logs


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Apply ``log_config`` with its handler writing to a buffer; restore logging after."""
    names = ["", "uvicorn", "uvicorn.error", "uvicorn.access", "apscheduler", "alembic"]
    saved = {
        name: (
            logging.getLogger(name).handlers[:],
            logging.getLogger(name).level,
            logging.getLogger(name).propagate,
        )
        for name in names
    }
    previous = logs._node_id
    stream = io.StringIO()
    config = logs.log_config("info")
    config["handlers"]["stderr"]["stream"] = stream
    logging.config.dictConfig(config)
    try:
        yield stream
    finally:
        for name, (handlers, level, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate
        logs._node_id = previous


def test_every_line_carries_the_node_id(captured: io.StringIO) -> None:
    logs.set_node_id("node-b")
    logging.getLogger("flowpark.sweep").info("sweep on %s", "node-b")
    logging.getLogger("uvicorn.access").info("GET /healthz 200")
    logging.getLogger("apscheduler.scheduler").info("Running job")  # kept at warning
    lines = captured.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert all(" [node-b] " in line for line in lines)
    assert lines[0].endswith("INFO [node-b] flowpark.sweep: sweep on node-b")


def test_the_default_node_id_is_the_settings_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from flowpark.settings import Settings

    monkeypatch.setattr(logs, "_node_id", None)
    monkeypatch.delenv("FLOWPARK_NODE_ID", raising=False)
    assert logs.node_id() == Settings().node_id
    monkeypatch.setenv("FLOWPARK_NODE_ID", "worker-7")
    assert logs.node_id() == Settings().node_id == "worker-7"


def test_apschedulers_skipped_tick_warning_is_dropped_below_debug(captured: io.StringIO) -> None:
    # a sweep that outlasts the scan interval is normal under load: APScheduler would warn
    # about the skipped tick once an interval
    logging.getLogger("apscheduler.executors.default").warning(
        'Execution of job "sweep" skipped: maximum number of running instances reached (1)'
    )
    logging.getLogger("apscheduler.executors.default").error("Job raised an exception")
    lines = captured.getvalue().splitlines()
    assert len(lines) == 1 and "Job raised" in lines[0], lines
    assert logs.log_config("debug")["loggers"]["apscheduler"]["level"] == "DEBUG"
