"""flowpark's one error tree.

Every error carries a stable ``code`` (a string users and scripts may match on) and
structured fields. The engine and the authoring API raise these; only ``app.api`` maps
codes to HTTP statuses (RFC 9457 problem bodies).

::

    FlowparkError
    ├── DefinitionError            code "flow.definition_invalid"; .findings (rule codes)
    ├── FlowNotFound               code "flow_not_found"
    ├── InstanceNotFound           code "instance_not_found"
    ├── InstanceEnded              code "instance_ended"
    ├── SignalNotDeclared          code "signal_not_declared"
    ├── StreamNotDeclared          code "stream_not_declared"
    ├── IdempotencyKeyReused       code "idempotency_key_reused"
    ├── InstanceKeyInUse           code "instance_key_in_use"
    ├── InputInvalid               code "input_invalid"
    ├── StaleFencingToken          code "lease.stale_token"
    ├── JournalConflict            code "store.journal_conflict"
    ├── SchemaBehindHead           code "store.schema_behind_head"
    └── StoreUnavailable           code "store.unavailable"

Flow failures are not exceptions: they are :class:`FlowFailure` values recorded on the
instance (``flow.step_failed``, ``flow.poll_not_satisfied``, ``flow.deadline_exceeded``, or a
business code such as ``document.not_read_in_time``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DefinitionError",
    "FlowFailure",
    "FlowNotFound",
    "FlowparkError",
    "IdempotencyKeyReused",
    "InputInvalid",
    "InstanceEnded",
    "InstanceKeyInUse",
    "InstanceNotFound",
    "JournalConflict",
    "SchemaBehindHead",
    "SignalNotDeclared",
    "StaleFencingToken",
    "StoreUnavailable",
    "StreamNotDeclared",
]


class FlowparkError(Exception):
    """Base of every error flowpark raises on purpose.

    Attributes:
        code: stable machine-readable code (never changes between releases).
        message: human-readable sentence.
        fields: structured context (``instance_id``, ``flow``, ``node`` ...).
    """

    code: str = "flowpark.error"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields


class DefinitionError(FlowparkError):
    """A flow definition broke one or more rules; raised by registration.

    Attributes:
        findings: every finding (errors and warnings) with its rule code.
    """

    code = "flow.definition_invalid"

    def __init__(self, message: str, findings: list[Any], **fields: Any) -> None:
        super().__init__(message, **fields)
        self.findings = findings


class FlowNotFound(FlowparkError):
    code = "flow_not_found"


class InstanceNotFound(FlowparkError):
    code = "instance_not_found"


class InstanceEnded(FlowparkError):
    """The instance is completed, failed or cancelled; nothing was stored."""

    code = "instance_ended"


class SignalNotDeclared(FlowparkError):
    code = "signal_not_declared"


class StreamNotDeclared(FlowparkError):
    """The instance's flow declares no stream of that name (``Flow(streams=...)``)."""

    code = "stream_not_declared"


class IdempotencyKeyReused(FlowparkError):
    """The idempotency key was used before with a different request body."""

    code = "idempotency_key_reused"


class InstanceKeyInUse(FlowparkError):
    """A running instance of the flow already holds this instance key."""

    code = "instance_key_in_use"


class InputInvalid(FlowparkError):
    """An input or payload did not validate against its model.

    Attributes:
        errors: pydantic's error list (``loc``, ``msg``, ``type``).
    """

    code = "input_invalid"

    def __init__(self, message: str, errors: list[Any] | None = None, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.errors = errors or []


class StaleFencingToken(FlowparkError):
    """A write carried a fencing token older than the instance's; it was refused."""

    code = "lease.stale_token"


class JournalConflict(FlowparkError):
    """A write contradicts the journal: a duplicate execution row, a signal already taken,
    a heartbeat with no attempt in flight, or a duplicate id. Nothing was written.

    It signals an engine bug (or a lost race the fencing token did not catch), never a user
    error.
    """

    code = "store.journal_conflict"


class SchemaBehindHead(FlowparkError):
    """The database schema is older than the code's migrations (run ``flowpark db upgrade``)."""

    code = "store.schema_behind_head"


class StoreUnavailable(FlowparkError):
    code = "store.unavailable"


@dataclass(frozen=True)
class FlowFailure:
    """Why an instance failed: a value, recorded on the instance, never raised.

    Attributes:
        code: stable code, e.g. ``flow.step_failed`` or ``document.not_read_in_time``.
        message: human-readable sentence.
        details: structured context (capability id, error type, detail, node).
    """

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
