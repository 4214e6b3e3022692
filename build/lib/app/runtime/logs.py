"""Logging for flowpark's processes: every line names the node that wrote it.

``flowpark serve``, ``worker`` and ``fakes`` configure logging with :func:`log_config` (also
handed to uvicorn, so each of its worker processes applies it and uvicorn's own lines carry
the node too). Lines look like::

    2026-01-01 12:00:00,123 INFO [node-b] flowpark.sweep: sweep on node-b: claimed 12, ...

The node id is the one :func:`set_node_id` was given (``create_app`` and the worker pass
``Settings.node_id``); before that, ``FLOWPARK_NODE_ID`` or ``<hostname>-<pid>``, the same
default :class:`app.settings.Settings` uses.
"""

from __future__ import annotations

import logging
import logging.config
import os
import socket
from typing import Any

from app.redaction import RedactingFormatter

__all__ = ["LOG_FORMAT", "NodeFilter", "configure_logging", "log_config", "node_id", "set_node_id"]

#: The format of every log line (``%(node)s`` is filled in by :class:`NodeFilter`).
LOG_FORMAT = "%(asctime)s %(levelname)s [%(node)s] %(name)s: %(message)s"

_node_id: str | None = None


def set_node_id(value: str) -> None:
    """Name this process's node in its log lines from now on."""
    global _node_id
    _node_id = value


def node_id() -> str:
    """The node id log lines carry (see the module docstring)."""
    return (
        _node_id or os.environ.get("FLOWPARK_NODE_ID") or (f"{socket.gethostname()}-{os.getpid()}")
    )


class NodeFilter(logging.Filter):
    """Adds ``record.node`` (the node id) to every record a handler emits."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = node_id()
        return True


def _at_least(floor: int, level: str) -> str:
    """The name of ``level`` or of ``floor``, whichever is higher; ``level`` itself when it
    is DEBUG (everything is wanted then)."""
    number = logging.getLevelName(level)
    return level if number <= logging.DEBUG else str(logging.getLevelName(max(floor, number)))


def log_config(level: str = "info") -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` dict: one stderr handler on the root logger with
    :data:`LOG_FORMAT`; uvicorn's loggers propagate to it; Alembic's set-up lines and
    httpx's per-request lines are kept at warning, APScheduler's per-run lines and
    skipped-tick warnings at error.

    Args:
        level: the root level name (``debug``, ``info``, ``warning`` ...; default info).
    """
    root_level = level.upper()
    quiet = _at_least(logging.WARNING, root_level)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"node": {"()": NodeFilter}},
        # every line is redacted: URL passwords and the registered secrets become ***
        "formatters": {"node": {"()": RedactingFormatter, "format": LOG_FORMAT}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "node",
                "filters": ["node"],
                "stream": "ext://sys.stderr",
            },
        },
        "root": {"level": root_level, "handlers": ["stderr"]},
        "loggers": {
            **{
                name: {"level": root_level, "handlers": [], "propagate": True}
                for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
            },
            # one line per sweep run, and a warning for each tick skipped while the sweep
            # still works through due instances: flowpark logs what a sweep did instead
            "apscheduler": {"level": _at_least(logging.ERROR, root_level)},
            # the schema check at start-up would log Alembic's plugin set-up
            "alembic": {"level": quiet},
            # one line per outbound request
            "httpx": {"level": quiet},
        },
    }


def configure_logging(level: str = "info") -> None:
    """Apply :func:`log_config` to this process."""
    logging.config.dictConfig(log_config(level))
