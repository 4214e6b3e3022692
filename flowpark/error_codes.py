"""flowpark's one list of error codes: :class:`ErrorCode` (each a stable string with its
meaning, the docs' error table) and :data:`CLI_EXIT` (the codes only the CLI prints).

The error tree that carries them is :mod:`flowpark.errors`, which exports both names too; import
them from there.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["CLI_EXIT", "ErrorCode"]


class ErrorCode(StrEnum):
    """Every error code flowpark raises or answers with. A member is its string value
    (``ErrorCode.INPUT_INVALID == "input_invalid"``); values never change between
    releases.

    Attributes:
        meaning: when the code is raised or answered (the docs' error table).
    """

    meaning: str

    def __new__(cls, value: str, meaning: str) -> ErrorCode:
        """A member with its code ``value`` and a one-line ``meaning``."""
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    ACTION_IN_PROGRESS = (
        "action_in_progress",
        "an operator action's `Idempotency-Key` whose first request is still acting: try "
        "again after `Retry-After` (past a bound, the repeat runs the action itself)",
    )
    BODY_TOO_LARGE = (
        "body_too_large",
        "the request body is larger than `FLOWPARK_MAX_BODY_BYTES`",
    )
    BULK_FILTER_MISSING = (
        "bulk_filter_missing",
        'a bulk action gives no filter: name at least one, or send `"all": true` to act on '
        "every instance",
    )
    COMPENSATION_NOT_FAILED = (
        "compensation_not_failed",
        "the instance has no compensation that failed for good to retry (it has not ended, "
        "or every compensation succeeded), or this node does not serve its flow version",
    )
    CORRELATION_KEY_AMBIGUOUS = (
        "correlation_key_ambiguous",
        "a provider signal's delivery names a correlation key that live instances of more "
        "than one flow hold: it cannot go to one instance (nothing stored)",
    )
    CORRELATION_KEY_IN_USE = (
        "correlation_key_in_use",
        "a step recorded a correlation key (`ctx.correlate`) that another live instance of "
        "the flow holds for that provider: the step fails for good with this error type "
        "(the key is not recorded); never an API answer",
    )
    CORRELATION_KEY_UNKNOWN = (
        "correlation_key_unknown",
        "a provider signal's delivery names a correlation key that no live instance holds "
        "(never recorded, or released when its instance ended): nothing stored",
    )
    DELIVERY_ID_REUSED = (
        "delivery_id_reused",
        "a provider signal's delivery id was seen before, but the correlation key this "
        "delivery names is held now by another live instance than the one the id reached "
        "first (a provider reusing its delivery ids, e.g. after a restart): refused and "
        "logged, nothing stored; the provider must send it with a new delivery id",
    )
    DELIVERY_NOT_FAILED = (
        "delivery_not_failed",
        "only a failed event delivery can be retried (it is pending or delivered)",
    )
    DELIVERY_NOT_FOUND = ("delivery_not_found", "no such event delivery")
    DEFINITION_INVALID = (
        "definition_invalid",
        "a flow definition broke a rule (raised at registration; never an API answer)",
    )
    FLOW_NOT_FOUND = ("flow_not_found", "no such flow or version")
    FLOWS_UNLOADABLE = (
        "flows_unloadable",
        "a flows target (`--flows`, `FLOWPARK_FLOWS`) cannot be loaded: it does not import, "
        "building its flows raised, or it defines no flow (the node refuses to start; never "
        "an API answer)",
    )
    FORBIDDEN = (
        "forbidden",
        "the bearer token is known but lacks the route's scope (`missingScope` names it)",
    )
    IDEMPOTENCY_KEY_INVALID = (
        "idempotency_key_invalid",
        "the `Idempotency-Key` header is longer than 200 characters or not visible ASCII",
    )
    IDEMPOTENCY_KEY_MISSING = (
        "idempotency_key_missing",
        "the route requires an `Idempotency-Key` header",
    )
    IDEMPOTENCY_KEY_REUSED = (
        "idempotency_key_reused",
        "the `Idempotency-Key` was used before with a different body",
    )
    HEADERS_TOO_LARGE = (
        "headers_too_large",
        "the request head (request line and headers) is larger than "
        "`FLOWPARK_MAX_HEADER_BYTES` or has more than `FLOWPARK_MAX_HEADERS` headers (the "
        "connection is closed)",
    )
    INPUT_INVALID = (
        "input_invalid",
        "malformed JSON, or a body, payload, parameter or header that does not validate "
        "(an unknown field close to a known one is named: `did you mean jobId?`)",
    )
    INSTANCE_BUSY = (
        "instance_busy",
        "a node runs the instance now (the action needs it parked); try again",
    )
    INSTANCE_ENDED = (
        "instance_ended",
        "the instance is completed, failed or cancelled (nothing was stored)",
    )
    INSTANCE_KEY_IN_USE = (
        "instance_key_in_use",
        "a running instance of the flow already holds that `instanceKey`",
    )
    INSTANCE_NOT_FOUND = (
        "instance_not_found",
        "no such instance (also any id that is not a canonical, lowercase, dashed UUID)",
    )
    INTERNAL_ERROR = ("internal_error", "an unexpected error (a bug; it was logged)")
    JOURNAL_CONFLICT = (
        "journal_conflict",
        "a write contradicts the journal (an engine invariant; never an API answer)",
    )
    JOURNAL_MISMATCH = (
        "journal_mismatch",
        "an instance's journal does not fit the plan of its flow version: the plan changed "
        "under a registered version (the instance fails with flow.journal_mismatch; never an "
        "API answer)",
    )
    METHOD_NOT_ALLOWED = ("method_not_allowed", "the route does not answer that method")
    NO_BUDGET = (
        "no_budget",
        "the instance does not wait in a poll with a budget (nothing to extend), or this "
        "node does not serve its flow version",
    )
    METRICS_FORBIDDEN = (
        "metrics_forbidden",
        "`/metrics` asked from off loopback while `FLOWPARK_METRICS_ACCESS=loopback`",
    )
    EMBEDDING_INVALID = (
        "embedding_invalid",
        "a host application: flowpark included twice in one application, or under a prefix "
        "that is not a path (raised while the application is built; no node answers it)",
    )
    NOT_FOUND = ("not_found", "no route at that path")
    NOT_READY = (
        "not_ready",
        "`/readyz`: the database, its schema or the sweep is not as a serving node needs",
    )
    SETTINGS_INVALID = (
        "settings_invalid",
        "the CLI: a `FLOWPARK_*` variable does not validate (no node answers it)",
    )
    PROVIDER_NOT_FOUND = ("provider_not_found", "no provider of that name is declared")
    REQUEST_MALFORMED = (
        "request_malformed",
        "the request is not valid HTTP/1.1 (a control byte in the request line or a header, "
        "a malformed request line or header): refused by the HTTP server before any route, "
        "the connection closed",
    )
    REVIEW_CLAIMED = (
        "review_claimed",
        "the review is claimed by another person (`claimedBy` names them): only they can "
        "resolve or dismiss it",
    )
    REVIEW_CLOSED = (
        "review_closed",
        "the review is resolved or dismissed already (`state`, `closedBy` say how and by "
        "whom): nothing was changed",
    )
    REVIEW_NOT_FOUND = ("review_not_found", "no such review")
    SCHEMA_BEHIND_HEAD = (
        "schema_behind_head",
        "the database is not migrated to head (run `flowpark db upgrade`)",
    )
    SIGNATURE_INVALID = (
        "signature_invalid",
        "a signed signal's delivery (Standard Webhooks, GitHub, Stripe or an HMAC header) "
        "has a missing, malformed or stale signature header, or one that does not verify "
        "with the signal's secret",
    )
    SIGNAL_DELIVERY_REPLAYED = (
        "signal_delivery_replayed",
        "a signed signal's delivery id reached another instance first: a delivery is one "
        "event for one instance, so its replay to this one is refused and stores nothing",
    )
    SIGNAL_NOT_DECLARED = (
        "signal_not_declared",
        "the instance's flow declares no signal of that name, or this node does not serve "
        "its flow version",
    )
    SIGNAL_PAYLOAD_INVALID = (
        "signal_payload_invalid",
        "a signed signal's delivery cannot be read as the signal: the flow's `adapt` or "
        "`instance_key` refused it (the node logs why; nothing was stored)",
    )
    STALE_FENCING_TOKEN = (
        "stale_fencing_token",
        "a write carried a stale fencing token and was refused (never an API answer)",
    )
    STORE_UNAVAILABLE = ("store_unavailable", "the database cannot be reached")
    STREAM_NOT_DECLARED = (
        "stream_not_declared",
        "the instance's flow declares no stream of that name",
    )
    TRANSACTION_NOT_SHARED = (
        "transaction_not_shared",
        "an in-process start in the caller's transaction that cannot be: the caller's "
        "session or connection is on another database than flowpark's, or the flow is "
        "ephemeral (it writes no row)",
    )
    UNAUTHORIZED = ("unauthorized", "missing or unknown bearer token")
    UNREACHABLE = (
        "unreachable",
        "the CLI: the `--url` node does not answer (no node answers it)",
    )
    UNSUPPORTED_MEDIA_TYPE = (
        "unsupported_media_type",
        "a body that is not JSON by its `Content-Type`",
    )
    USAGE = (
        "usage",
        "the CLI: a bad option or argument (no node answers it)",
    )
    WAITS_FOR_SIGNAL = (
        "waits_for_signal",
        "a bulk wake skipped an instance that waits for a signal (a wake does not end a "
        "signal wait: send the signal)",
    )
    VERSION_NOT_SERVED = (
        "version_not_served",
        "an operator's wake of an instance whose flow version this node does not serve "
        "(nothing was done: wake it on a node that serves that version)",
    )


#: The codes only the CLI prints (a node never answers them), with the CLI's exit code.
CLI_EXIT: dict[ErrorCode, int] = {
    ErrorCode.SETTINGS_INVALID: 2,
    ErrorCode.UNREACHABLE: 3,
    ErrorCode.USAGE: 2,
}
