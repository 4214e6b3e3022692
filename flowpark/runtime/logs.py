"""Logging for flowpark's processes: every line names the node that wrote it.

``flowpark serve``, ``worker`` and ``fakes`` configure logging with :func:`log_config` (also
handed to uvicorn, so each of its worker processes applies it and uvicorn's own lines carry
the node too). Lines look like::

    2026-01-01 12:00:00,123 INFO [node-b] flowpark.sweep: sweep on node-b: claimed 12, ...

With ``FLOWPARK_LOG_FORMAT=json`` each line is one JSON object instead (python-json-logger)::

    {"timestamp": "2026-01-01T12:00:00.123000+00:00", "level": "INFO", "node": "node-b",
     "logger": "flowpark.engine", "message": "...", "instance_id": "...", "flow": "...",
     "step": 2, "scope": 3, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}

``instance_id``, ``flow``, ``step`` and ``scope`` come with lines written while the engine
works on an instance (:data:`flowpark.engine.observe.LOG_CONTEXT`), ``trace_id`` with lines
written inside a traced span; absent otherwise.

The node id is the one :func:`set_node_id` was given (``create_app`` and the worker pass
``Settings.node_id``); before that, ``FLOWPARK_NODE_ID`` or ``<hostname>-<pid>``, the same
default :class:`flowpark.settings.Settings` uses.
"""

from __future__ import annotations

import logging
import logging.config
import os
import socket
import sys
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from flowpark.engine.observe import log_context
from flowpark.redaction import RedactingFormatter, redact

__all__ = [
    "JSON_FIELDS",
    "LOG_FORMAT",
    "ContextFilter",
    "NodeFilter",
    "RedactingJsonFormatter",
    "configure_logging",
    "log_config",
    "node_id",
    "set_node_id",
]

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
        """Stamp the record with this node's id; always keeps it."""
        record.node = node_id()
        return True


#: The fields of every JSON line, in order (renamed from the record's attributes).
JSON_FIELDS = "%(levelname)s %(node)s %(name)s %(message)s"
_RENAMED = {"levelname": "level", "name": "logger"}


class RedactingJsonFormatter(JsonFormatter):
    """python-json-logger's formatter whose every line went through
    :func:`flowpark.redaction.redact` (URL passwords and registered secrets become ``***``)."""

    def format(self, record: logging.LogRecord) -> str:
        """Format ``record`` as one line."""
        return redact(super().format(record))


class ContextFilter(NodeFilter):
    """:class:`NodeFilter`, plus the engine's log context (instance id, flow, step, scope)
    and the current trace id as record attributes, where known (the JSON lines carry
    them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether to keep ``record``."""
        super().filter(record)
        for key, value in log_context().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        trace_id = _trace_id()
        if trace_id is not None:
            record.trace_id = trace_id
        return True


def _trace_id() -> str | None:
    """The current span's trace id (32 hex digits), or None (none, or no OpenTelemetry)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def _at_least(floor: int, level: str) -> str:
    """The name of ``level`` or of ``floor``, whichever is higher; ``level`` itself when it
    is DEBUG (everything is wanted then)."""
    number = logging.getLevelName(level)
    return level if number <= logging.DEBUG else str(logging.getLevelName(max(floor, number)))


def log_config(level: str = "info", log_format: str | None = None) -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` dict: one stderr handler on the root logger with
    :data:`LOG_FORMAT` (or JSON lines); uvicorn's loggers propagate to it; Alembic's
    set-up lines and httpx's per-request lines are kept at warning, APScheduler's per-run lines and
    skipped-tick warnings at error.

    Args:
        level: the root level name (``debug``, ``info``, ``warning`` ...; default info).
        log_format: ``text`` or ``json`` (default: ``FLOWPARK_LOG_FORMAT``, else text).

    Raises:
        ValueError: ``log_format`` is neither ``text`` nor ``json``.
    """
    chosen = (log_format or os.environ.get("FLOWPARK_LOG_FORMAT") or "text").strip().lower()
    if chosen not in ("text", "json"):
        raise ValueError(f"FLOWPARK_LOG_FORMAT must be text or json, not {chosen!r}")
    formatter: dict[str, Any] = {"()": RedactingFormatter, "format": LOG_FORMAT}
    if chosen == "json":
        formatter = {
            "()": RedactingJsonFormatter,
            "fmt": JSON_FIELDS,
            "rename_fields": _RENAMED,
            "timestamp": True,
            # uvicorn's copy of each message with terminal colour codes
            "reserved_attrs": [*RESERVED_ATTRS, "color_message"],
        }
    root_level = level.upper()
    quiet = _at_least(logging.WARNING, root_level)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"node": {"()": ContextFilter}},
        # every line is redacted: URL passwords and the registered secrets become ***
        "formatters": {"node": formatter},
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


def configure_logging(level: str = "info", log_format: str | None = None) -> None:
    """Apply :func:`log_config` to this process."""
    logging.config.dictConfig(log_config(level, log_format))
