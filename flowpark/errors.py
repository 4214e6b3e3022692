"""flowpark's one error tree, with its one list of error codes (:class:`ErrorCode`, kept in
:mod:`flowpark.error_codes` and exported here).

Every error carries a stable ``code``, a member of :class:`ErrorCode` (a string users and
scripts may match on), and structured fields. The engine and the authoring API raise these;
only ``flowpark.api`` maps codes to HTTP statuses (``flowpark.api.problems.STATUS``,
RFC 9457 problem bodies): a code with no status there - an engine invariant such as
``journal_conflict``, or a definition error - answers 500 ``internal_error`` and is logged.

Naming: an error code is one ``snake_case`` phrase, ``<subject>_<what happened>``
(``instance_not_found``, ``idempotency_key_reused``). Dotted ``area.reason`` names are kept
for the two kinds of code that are data, not errors: the *failure codes* recorded on a
failed instance (``flow.step_failed``, ``document.not_read_in_time``) and the *rule codes*
of a definition finding (``poll.requires_durable``).

::

    FlowparkError                  .code: ErrorCode, .message, .fields
    ├── ActionInProgress           action_in_progress
    ├── RepeatedRefusal            the first request's code (a repeat of its key)
    ├── DefinitionError            definition_invalid; .findings (rule codes)
    ├── FlowsUnloadable            flows_unloadable; .fields["target"]
    ├── FlowNotFound               flow_not_found
    ├── ProviderNotFound           provider_not_found
    ├── InstanceNotFound           instance_not_found
    ├── InstanceEnded              instance_ended
    ├── InstanceBusy               instance_busy
    ├── NoBudget                   no_budget
    ├── VersionNotServed           version_not_served
    ├── WaitsForSignal             waits_for_signal
    ├── SignalNotDeclared          signal_not_declared
    ├── SignalDeliveryReplayed     signal_delivery_replayed
    ├── SignalPayloadInvalid       signal_payload_invalid
    ├── StreamNotDeclared          stream_not_declared
    ├── IdempotencyKeyReused       idempotency_key_reused
    ├── InstanceKeyInUse           instance_key_in_use
    ├── InputInvalid               input_invalid; .errors (loc, msg, type)
    ├── StaleFencingToken          stale_fencing_token
    ├── JournalConflict            journal_conflict
    ├── JournalMismatch            journal_mismatch; .fields["node"], ["row"]
    ├── SchemaBehindHead           schema_behind_head
    ├── StoreUnavailable           store_unavailable
    ├── DeliveryNotFound           delivery_not_found
    ├── DeliveryNotFailed          delivery_not_failed
    ├── CompensationNotFailed      compensation_not_failed
    ├── CorrelationKeyInUse        correlation_key_in_use
    ├── CorrelationKeyUnknown      correlation_key_unknown
    ├── CorrelationKeyAmbiguous    correlation_key_ambiguous
    ├── DeliveryIdReused           delivery_id_reused
    ├── ReviewNotFound             review_not_found
    ├── ReviewClosed               review_closed; .fields["state"], ["closed_by"]
    ├── ReviewClaimed              review_claimed; .fields["claimed_by"]
    ├── NotReady                   not_ready; .checks (what /readyz found)
    ├── EmbeddingInvalid           embedding_invalid (a host application's wiring)
    ├── TransactionNotShared       transaction_not_shared
    └── RequestRefused             an HTTP request refused before any flow is involved
        ├── Unauthorized           unauthorized
        ├── Forbidden              forbidden; missing_scope
        ├── SignatureInvalid       signature_invalid
        ├── MetricsForbidden       metrics_forbidden
        ├── IdempotencyKeyMissing  idempotency_key_missing
        ├── IdempotencyKeyInvalid  idempotency_key_invalid
        ├── BulkFilterMissing      bulk_filter_missing
        ├── UnsupportedMediaType   unsupported_media_type
        ├── BodyTooLarge           body_too_large
        ├── HeadersTooLarge        headers_too_large (answered by the HTTP protocol)
        ├── RequestMalformed       request_malformed (answered by the HTTP protocol)
        ├── RouteNotFound          not_found
        └── MethodNotAllowed       method_not_allowed

``internal_error`` is the code of every answer to an unexpected error (it has no class).

Flow failures are not exceptions: they are :class:`FlowFailure` values recorded on the
instance (``flow.step_failed``, ``flow.poll_not_satisfied``, ``flow.deadline_exceeded``, or a
business code such as ``document.not_read_in_time``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from flowpark.error_codes import CLI_EXIT, ErrorCode

__all__ = [
    "ActionInProgress",
    "BodyTooLarge",
    "BulkFilterMissing",
    "CLI_EXIT",
    "CompensationNotFailed",
    "CorrelationKeyAmbiguous",
    "CorrelationKeyInUse",
    "CorrelationKeyUnknown",
    "DefinitionError",
    "DeliveryIdReused",
    "DeliveryNotFailed",
    "DeliveryNotFound",
    "EmbeddingInvalid",
    "ErrorCode",
    "FlowFailure",
    "FlowNotFound",
    "FlowparkError",
    "FlowsUnloadable",
    "Forbidden",
    "HeadersTooLarge",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyMissing",
    "IdempotencyKeyReused",
    "InputInvalid",
    "InstanceBusy",
    "InstanceEnded",
    "InstanceKeyInUse",
    "InstanceNotFound",
    "JournalConflict",
    "JournalMismatch",
    "MethodNotAllowed",
    "MetricsForbidden",
    "NoBudget",
    "NotReady",
    "ProviderNotFound",
    "RepeatedRefusal",
    "RequestMalformed",
    "RequestRefused",
    "ReviewClaimed",
    "ReviewClosed",
    "ReviewNotFound",
    "RouteNotFound",
    "SHOWN_CHARS",
    "SchemaBehindHead",
    "SignalDeliveryReplayed",
    "SignalNotDeclared",
    "SignalPayloadInvalid",
    "SignatureInvalid",
    "StaleFencingToken",
    "StoreUnavailable",
    "StreamNotDeclared",
    "TransactionNotShared",
    "Unauthorized",
    "UnsupportedMediaType",
    "VersionNotServed",
    "WaitsForSignal",
    "shown",
]


#: Most characters of a value an error echoes (a name, an id, a path a request sent) before
#: it is cut with an ellipsis (:func:`shown`).
SHOWN_CHARS = 100


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``value`` as an error message or field echoes it: its text, cut to its first
    ``limit`` characters and an ellipsis (``…``) when longer, so a huge name sent in a
    request is never answered (or logged) whole.

    Args:
        value: what the request sent (a signal or flow name, a path, a header's value).
        limit: most characters kept (default :data:`SHOWN_CHARS`, 100).

    Returns:
        The text, at most ``limit`` + 1 characters.
    """
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit] + "…"


class FlowparkError(Exception):
    """Base of every error flowpark raises on purpose.

    Args:
        message: human-readable sentence.
        **fields: structured context (``instance_id``, ``flow``, ``step`` ...); an API
            answer carries each as a camelCase member of the problem body.

    Attributes:
        code: the stable :class:`ErrorCode` of the class.
        message: human-readable sentence.
        fields: structured context.
    """

    code: ClassVar[ErrorCode] = ErrorCode.INTERNAL_ERROR

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields


class ActionInProgress(FlowparkError):
    """A repeat of an operator action's idempotency key arrived while the first request
    with that key is still acting (its record says pending); try again."""

    code = ErrorCode.ACTION_IN_PROGRESS


class RepeatedRefusal(FlowparkError):
    """A repeat of an operator action's idempotency key whose first request was refused:
    the first refusal again, with its code, message, fields and errors as they were
    answered (so the answer is the same problem).

    Args:
        code: the first refusal's code.
        message: its message (the problem's ``detail``).
        errors: its ``errors`` list, if any (``loc``, ``msg``, ``type``).
        **fields: its other members, as answered (camelCase names).

    Attributes:
        errors: as given (empty for none).
    """

    def __init__(
        self, code: ErrorCode, message: str, errors: list[Any] | None = None, **fields: Any
    ) -> None:
        super().__init__(message, **fields)
        # the code of the refusal repeated, not one of its own class
        self.code = code  # type: ignore[misc]
        self.errors = errors or []


class DefinitionError(FlowparkError):
    """A flow definition broke one or more rules; raised by registration.

    Attributes:
        findings: every finding (errors and warnings) with its rule code.
    """

    code = ErrorCode.DEFINITION_INVALID

    def __init__(self, message: str, findings: list[Any], **fields: Any) -> None:
        super().__init__(message, **fields)
        self.findings = findings


class FlowsUnloadable(FlowparkError):
    """A flows target (``--flows``, ``FLOWPARK_FLOWS``) cannot be loaded: it does not import,
    building its flows raised, or it defines no flow. The message says why in one line."""

    code = ErrorCode.FLOWS_UNLOADABLE


class FlowNotFound(FlowparkError):
    """No flow of that name (and version) is registered."""

    code = ErrorCode.FLOW_NOT_FOUND


class ProviderNotFound(FlowparkError):
    """No provider of that name is declared (in the store's shared limits)."""

    code = ErrorCode.PROVIDER_NOT_FOUND


class InstanceNotFound(FlowparkError):
    """No instance has that id (or the id cannot name one)."""

    code = ErrorCode.INSTANCE_NOT_FOUND


class InstanceEnded(FlowparkError):
    """The instance is completed, failed or cancelled; nothing was stored."""

    code = ErrorCode.INSTANCE_ENDED


class InstanceBusy(FlowparkError):
    """An operator action needs the instance parked, and a node runs it now; try again."""

    code = ErrorCode.INSTANCE_BUSY


class NoBudget(FlowparkError):
    """An extension asked of an instance that does not wait in a poll with a budget."""

    code = ErrorCode.NO_BUDGET


class VersionNotServed(FlowparkError):
    """An operator's wake of an instance whose flow version this node does not serve:
    nothing can advance it here, and nothing was done."""

    code = ErrorCode.VERSION_NOT_SERVED


class WaitsForSignal(FlowparkError):
    """A wake of an instance that waits for a signal: a wake does not end a signal wait (a
    bulk wake skips it with this code)."""

    code = ErrorCode.WAITS_FOR_SIGNAL


class SignalNotDeclared(FlowparkError):
    """The instance's flow declares no signal of that name."""

    code = ErrorCode.SIGNAL_NOT_DECLARED


class SignalPayloadInvalid(FlowparkError):
    """A provider's delivery could not be read as the signal: the flow's ``adapt`` (or its
    ``instance_key``) raised on it. The message is generic and stable; what was raised is
    logged, never answered."""

    code = ErrorCode.SIGNAL_PAYLOAD_INVALID


class StreamNotDeclared(FlowparkError):
    """The instance's flow declares no stream of that name (``Flow(streams=...)``)."""

    code = ErrorCode.STREAM_NOT_DECLARED


class IdempotencyKeyReused(FlowparkError):
    """The idempotency key was used before with a different request body."""

    code = ErrorCode.IDEMPOTENCY_KEY_REUSED


class InstanceKeyInUse(FlowparkError):
    """A running instance of the flow already holds this instance key."""

    code = ErrorCode.INSTANCE_KEY_IN_USE


class InputInvalid(FlowparkError):
    """An input or payload did not validate against its model.

    Attributes:
        errors: pydantic's error list (``loc``, ``msg``, ``type``).
    """

    code = ErrorCode.INPUT_INVALID

    def __init__(self, message: str, errors: list[Any] | None = None, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.errors = errors or []


class StaleFencingToken(FlowparkError):
    """A write carried a fencing token older than the instance's; it was refused."""

    code = ErrorCode.STALE_FENCING_TOKEN


class JournalConflict(FlowparkError):
    """A write contradicts the journal: a duplicate execution row, a signal already taken,
    a heartbeat with no try in flight, or a duplicate id. Nothing was written.

    It signals an engine bug (or a lost race the fencing token did not catch), never a user
    error: an API answer is 500 ``internal_error``.
    """

    code = ErrorCode.JOURNAL_CONFLICT


class JournalMismatch(FlowparkError):
    """A stored journal row does not fit the plan its instance runs: its node is gone, or
    the node there now is another kind or calls another capability (the plan changed under
    a registered flow version). Raised by the decider; the engine fails the instance with
    ``flow.journal_mismatch`` and runs no compensation (the journal cannot be read against
    this plan). Fields: ``instance_id``, ``flow``, ``node``, ``row``.
    """

    code = ErrorCode.JOURNAL_MISMATCH


class SchemaBehindHead(FlowparkError):
    """The database schema is older than the code's migrations (run ``flowpark db upgrade``)."""

    code = ErrorCode.SCHEMA_BEHIND_HEAD


class StoreUnavailable(FlowparkError):
    """The database cannot be reached (or the URL names no database flowpark can use)."""

    code = ErrorCode.STORE_UNAVAILABLE


class DeliveryNotFound(FlowparkError):
    """No event delivery with that id."""

    code = ErrorCode.DELIVERY_NOT_FOUND


class CompensationNotFailed(FlowparkError):
    """A retry of compensations asked of an instance with none that failed for good."""

    code = ErrorCode.COMPENSATION_NOT_FAILED


class CorrelationKeyInUse(FlowparkError):
    """A commit records a correlation key another live instance of the flow holds for that
    provider; nothing was written. The engine turns it into the step's final failure
    (error type ``correlation_key_in_use``)."""

    code = ErrorCode.CORRELATION_KEY_IN_USE


class CorrelationKeyUnknown(FlowparkError):
    """A provider signal's delivery names a correlation key no live instance holds."""

    code = ErrorCode.CORRELATION_KEY_UNKNOWN


class CorrelationKeyAmbiguous(FlowparkError):
    """A provider signal's delivery names a correlation key live instances of more than one
    flow hold."""

    code = ErrorCode.CORRELATION_KEY_AMBIGUOUS


class DeliveryIdReused(FlowparkError):
    """A provider signal's delivery id was seen before, for another instance than the live
    one holding the correlation key this delivery names (a provider reusing its ids)."""

    code = ErrorCode.DELIVERY_ID_REUSED


class ReviewNotFound(FlowparkError):
    """No review with that id."""

    code = ErrorCode.REVIEW_NOT_FOUND


class ReviewClosed(FlowparkError):
    """An action on a review that is resolved or dismissed already."""

    code = ErrorCode.REVIEW_CLOSED


class ReviewClaimed(FlowparkError):
    """A resolve, dismiss or claim of a review that another person has claimed."""

    code = ErrorCode.REVIEW_CLAIMED


class DeliveryNotFailed(FlowparkError):
    """A retry of an event delivery that is not failed (pending or delivered)."""

    code = ErrorCode.DELIVERY_NOT_FAILED


class RequestRefused(FlowparkError):
    """An HTTP request refused before it reached a flow (its header, body or route)."""


class Unauthorized(RequestRefused):
    """The request carries no bearer token, or one that is not accepted."""

    code = ErrorCode.UNAUTHORIZED


class Forbidden(RequestRefused):
    """The bearer token is known but lacks the scope the route needs (``missing_scope``)."""

    code = ErrorCode.FORBIDDEN


class SignalDeliveryReplayed(FlowparkError):
    """A signed delivery's id was delivered to another instance first."""

    code = ErrorCode.SIGNAL_DELIVERY_REPLAYED


class SignatureInvalid(RequestRefused):
    """A signed signal's delivery has a missing, stale or wrong signature (its verifier:
    Standard Webhooks, GitHub, Stripe or an HMAC header)."""

    code = ErrorCode.SIGNATURE_INVALID


class MetricsForbidden(RequestRefused):
    """``/metrics`` was asked from a client off loopback (``FLOWPARK_METRICS_ACCESS``)."""

    code = ErrorCode.METRICS_FORBIDDEN


class NotReady(FlowparkError):
    """The node is not ready to serve (``/readyz``); field ``checks`` says what failed."""

    code = ErrorCode.NOT_READY


class EmbeddingInvalid(FlowparkError):
    """flowpark cannot be embedded so in a host application: included twice in one
    application, or under a prefix that is not a path (raised while the application is
    built, never answered)."""

    code = ErrorCode.EMBEDDING_INVALID


class TransactionNotShared(FlowparkError):
    """A start in the caller's transaction that cannot be: the caller's session or
    connection is on another database than flowpark's (field ``database``: the caller's
    database, without credentials), or the flow is ephemeral (it writes no row)."""

    code = ErrorCode.TRANSACTION_NOT_SHARED


class IdempotencyKeyMissing(RequestRefused):
    """The route requires an ``Idempotency-Key`` header and none was sent."""

    code = ErrorCode.IDEMPOTENCY_KEY_MISSING


class IdempotencyKeyInvalid(RequestRefused):
    """The ``Idempotency-Key`` header is too long."""

    code = ErrorCode.IDEMPOTENCY_KEY_INVALID


class BulkFilterMissing(RequestRefused):
    """A bulk action gives an empty filter without ``"all": true``: it would act on every
    instance, so it must say so."""

    code = ErrorCode.BULK_FILTER_MISSING


class UnsupportedMediaType(RequestRefused):
    """A body sent with a ``Content-Type`` that is not JSON."""

    code = ErrorCode.UNSUPPORTED_MEDIA_TYPE


class BodyTooLarge(RequestRefused):
    """The request body is larger than the node accepts (``FLOWPARK_MAX_BODY_BYTES``)."""

    code = ErrorCode.BODY_TOO_LARGE


class HeadersTooLarge(RequestRefused):
    """The request head is past ``FLOWPARK_MAX_HEADER_BYTES`` or ``FLOWPARK_MAX_HEADERS``:
    answered (431) by the node's HTTP protocol before any route, which closes the
    connection (:mod:`flowpark.runtime.protocol`)."""

    code = ErrorCode.HEADERS_TOO_LARGE


class RequestMalformed(RequestRefused):
    """The request could not be parsed as HTTP/1.1: answered (400) by the node's HTTP
    protocol before any route, which closes the connection (:mod:`flowpark.runtime.protocol`)."""

    code = ErrorCode.REQUEST_MALFORMED


class RouteNotFound(RequestRefused):
    """No route answers that path."""

    code = ErrorCode.NOT_FOUND


class MethodNotAllowed(RequestRefused):
    """The route does not answer that method."""

    code = ErrorCode.METHOD_NOT_ALLOWED


@dataclass(frozen=True)
class FlowFailure:
    """Why an instance failed: a value, recorded on the instance, never raised.

    Attributes:
        code: stable code, e.g. ``flow.step_failed`` or ``document.not_read_in_time``.
        message: human-readable sentence.
        details: structured context (capability id, error type, detail, step).
    """

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
