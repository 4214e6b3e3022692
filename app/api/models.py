"""The API's answer shapes as pydantic models (camelCase JSON), separate from the store's
tables: they are the OpenAPI document's response schemas, each with an example.

The routes build their answers with :mod:`app.api.views`; a test validates real answers
against these models (unknown fields refused), so the document and the answers cannot
drift apart.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from app.engine.journal import InstanceState, Outcome, StepKind, WakeKind
from app.flows.plan import Profile

__all__ = [
    "ActionView",
    "ApiModel",
    "AttemptView",
    "Awaiting",
    "BulkAnswer",
    "BulkResult",
    "BudgetExtension",
    "BudgetView",
    "CancelAnswer",
    "CompensationFailure",
    "CountByState",
    "DeliveryView",
    "InstanceCounts",
    "InstanceList",
    "InstanceSummaryView",
    "EventView",
    "FlowError",
    "FlowView",
    "Health",
    "INSTANT_TEXT",
    "InstanceView",
    "JSON_INTEGER",
    "JournalRow",
    "LeaseView",
    "PlanView",
    "ReviewView",
    "SignalAnswer",
    "SignalView",
    "StartAnswer",
    "StreamMessageView",
    "TryError",
    "TryView",
    "WaitingView",
    "WakeAnswer",
]

_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _instant_text(value: Any) -> Any:
    """Only ISO-8601 text is an instant: pydantic would read a number (or a numeric
    string) as Unix seconds, which the documented ``date-time`` format does not allow."""
    if isinstance(value, bool | int | float) or (
        isinstance(value, str) and _NUMBER.fullmatch(value)
    ):
        raise ValueError("an instant is ISO-8601 text with a UTC offset or Z")
    return value


def _json_integer(value: Any) -> Any:
    """A JSON number (``90`` or ``90.0``), never a string or a boolean."""
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON number")
    return value


#: ``Annotated`` metadata: an instant is ISO-8601 text (``2026-01-31T12:00:00Z``), never a
#: number read as Unix seconds.
INSTANT_TEXT = BeforeValidator(_instant_text)
#: ``Annotated`` metadata: a number is a JSON number (not a string, not a boolean).
JSON_INTEGER = BeforeValidator(_json_integer)

_ID = "01936b2e-7a40-7c3e-9a51-5f1d2c3b4a59"
_AT = "2026-12-01T09:30:00.125000Z"
_LATER = "2026-12-01T09:30:04.500000Z"
_HREF = f"/api/v1/documents/{_ID}/signals/ocr.completed"


class ApiModel(BaseModel):
    """Base of the answer models: camelCase aliases, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def _examples(*values: dict[str, Any]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": list(values)})


class Awaiting(ApiModel):
    """A signal the instance waits for now, and where to deliver it."""

    model_config = _examples({"signal": "ocr.completed", "href": _HREF})

    signal: str = Field(description="the signal's name")
    href: str = Field(description="the path to POST it to")


class FlowError(ApiModel):
    """Why an instance failed: a failure code (dotted, e.g. ``flow.step_failed``)."""

    model_config = _examples(
        {
            "code": "document.not_read_in_time",
            "message": "the OCR did not finish within the budget",
            "details": {"node": 4},
        }
    )

    code: str
    message: str
    details: dict[str, Any] | None = None


class StartAnswer(ApiModel):
    """The answer to a start: the instance once it parked or ended (202), or, for an
    ephemeral flow, its outcome (200)."""

    model_config = _examples(
        {
            "instanceId": _ID,
            "status": "suspended",
            "awaiting": [{"signal": "ocr.completed", "href": _HREF}],
        },
        {"instanceId": _ID, "status": "completed", "result": {"documentId": "invoice-42"}},
    )

    instance_id: str = Field(description="the instance's id (a lowercase, dashed UUID)")
    status: InstanceState = Field(description="the instance's state when answered")
    result: Any = Field(None, description="the flow's result, once completed")
    awaiting: list[Awaiting] | None = Field(None, description="signals it waits for now")
    error: FlowError | None = Field(None, description="why it failed (ephemeral flows)")


class LeaseView(ApiModel):
    """The live lease of a running instance."""

    model_config = _examples({"owner": "node-a", "expiresAt": _LATER, "fencingToken": 3})

    owner: str
    expires_at: datetime | None
    fencing_token: int


class JournalRow(ApiModel):
    """One journal row: a capability execution, a signal taken, a compensation or an emit."""

    model_config = _examples(
        {
            "sequence": 12,
            "stepId": 2,
            "scope": 1,
            "kind": "step",
            "capabilityId": "ocr.status",
            "outcome": "success",
            "try": 1,
            "startedAt": _AT,
            "committedAt": _LATER,
        }
    )

    sequence: int
    step_id: int = Field(description="the plan node")
    scope: int = Field(description="the attempt number inside a poll, 0 elsewhere")
    kind: StepKind
    capability_id: str | None
    outcome: Outcome
    try_: int = Field(alias="try", description="the try under the retry policy (1-based)")
    started_at: datetime | None
    committed_at: datetime | None
    error_type: str | None = None
    error_detail: str | None = None
    final: bool | None = None
    next_try_at: datetime | None = None


class SignalView(ApiModel):
    """A signal as stored (``takenAt`` once the instance took it)."""

    model_config = _examples(
        {
            "signalId": "01936b2e-8c11-7d2a-b0a4-0e9f5c6d7e81",
            "sequence": 5,
            "name": "ocr.completed",
            "payload": {"jobId": "job-17"},
            "receivedAt": _AT,
            "takenAt": _LATER,
            "takenStepId": 2,
            "matched": True,
        }
    )

    signal_id: str
    sequence: int
    name: str
    payload: Any
    received_at: datetime | None
    taken_at: datetime | None
    taken_step_id: int | None
    matched: bool | None = Field(
        description="true: taken by a wait; false: refused by the wait's match (kept, ending "
        "nothing); null: waiting in the mailbox"
    )
    discarded_at: datetime | None = Field(
        default=None,
        description="when the instance ended while the signal waited untaken: it will never "
        "be taken",
    )
    discarded_reason: str | None = Field(
        default=None,
        description="why it was discarded: instance_completed, instance_failed or "
        "instance_cancelled",
    )


class SignalAnswer(SignalView):
    """The answer to a signal delivery: the signal as stored after the run it started."""

    model_config = _examples(
        {
            "signalId": "01936b2e-8c11-7d2a-b0a4-0e9f5c6d7e81",
            "sequence": 5,
            "name": "ocr.completed",
            "payload": {"jobId": "job-17"},
            "receivedAt": _AT,
            "takenAt": _LATER,
            "takenStepId": 2,
            "matched": True,
            "instanceId": _ID,
            "created": True,
            "state": "completed",
        }
    )

    instance_id: str
    created: bool = Field(description="false when the Idempotency-Key repeated a signal")
    state: InstanceState = Field(description="the instance's state after the delivery")


class BudgetView(ApiModel):
    """The bound of the wait an instance is in: its stored end instant."""

    model_config = _examples(
        {
            "kind": "poll.budget",
            "stepId": 2,
            "scope": 0,
            "startedAt": _AT,
            "endsAt": "2026-12-01T10:30:00.125000Z",
            "usedRatio": 0.0125,
            "extensions": 0,
        }
    )

    kind: str = Field(description="`poll.budget`, `signal.timeout` or `retry.total`")
    step_id: int
    scope: int
    started_at: datetime | None
    ends_at: datetime | None
    used_ratio: float | None = Field(description="the share spent now (engine clock)")
    extensions: int


class TryError(ApiModel):
    """Why a try failed."""

    model_config = _examples({"type": "HTTPStatusError", "detail": "503 from the provider"})

    type: str | None
    detail: str | None


class TryView(ApiModel):
    """One try of an attempt, under the capability's retry policy."""

    model_config = _examples(
        {
            "try": 1,
            "startedAt": _AT,
            "committedAt": _LATER,
            "outcome": "success",
            "error": None,
            "nextTryAt": None,
        }
    )

    try_: int = Field(alias="try")
    started_at: datetime | None
    committed_at: datetime | None
    outcome: Outcome
    error: TryError | None
    next_try_at: datetime | None


class AttemptView(ApiModel):
    """One attempt of a poll: when it was due, when it ran, and every try."""

    model_config = _examples(
        {
            "attempt": 0,
            "scheduledAt": _AT,
            "startedAt": _AT,
            "latenessSeconds": 0.0,
            "durationSeconds": 0.21,
            "outcome": "success",
            "tries": [],
        }
    )

    attempt: int = Field(description="the attempt number (scope)")
    scheduled_at: datetime | None
    started_at: datetime | None
    lateness_seconds: float | None
    duration_seconds: float | None
    outcome: str = Field(description="`success`, `failure`, `retrying` or `signal`")
    signal: str | None = Field(None, description="the signal that ended the wait")
    tries: list[TryView]


class ActionView(ApiModel):
    """One operator action on an instance (wake, extend budget, cancel)."""

    model_config = _examples(
        {
            "actionId": "01936b2e-b144-7a5d-83e7-31c28f9a0b14",
            "action": "wake",
            "actor": "ops-console",
            "actedAt": _AT,
            "details": {},
        }
    )

    action_id: str
    action: str
    actor: str
    acted_at: datetime | None
    details: Any


class CompensationFailure(ApiModel):
    """A compensation that failed for good (its retry policy exhausted)."""

    model_config = _examples(
        {
            "code": "compensation_failed",
            "capabilityId": "ocr.cancel",
            "stepId": 1,
            "scope": 0,
            "errorType": "HTTPStatusError",
            "errorDetail": "503 from the provider",
            "tries": 3,
            "failedAt": _LATER,
        }
    )

    code: str
    capability_id: str | None
    step_id: int
    scope: int
    error_type: str | None
    error_detail: str | None
    tries: int
    failed_at: datetime | None


class InstanceView(ApiModel):
    """One instance: state, wake, attempts, result or error, lease, journal and signals."""

    model_config = _examples(
        {
            "instanceId": _ID,
            "flow": "document.process",
            "version": "1.0.0",
            "state": "suspended",
            "createdAt": _AT,
            "updatedAt": _LATER,
            "deadlineAt": None,
            "wakeAt": "2026-12-01T09:30:09.500000Z",
            "wakeStepId": 2,
            "wakeScope": 1,
            "instanceKey": None,
            "cancelRequested": False,
            "lease": None,
            "input": {"documentId": "invoice-42", "contentType": "application/pdf", "pages": 3},
            "result": None,
            "error": None,
            "budget": None,
            "journal": [
                {
                    "sequence": 12,
                    "stepId": 2,
                    "scope": 1,
                    "kind": "step",
                    "capabilityId": "ocr.status",
                    "outcome": "success",
                    "try": 1,
                    "startedAt": _AT,
                    "committedAt": _LATER,
                }
            ],
            "signals": [],
            "waiting": {
                "kind": "poll",
                "stepId": 2,
                "capabilityId": "ocr.status",
                "attempt": 1,
                "wakeAt": "2026-12-01T09:30:09.500000Z",
            },
            "attempts": [
                {
                    "attempt": 0,
                    "scheduledAt": _AT,
                    "startedAt": _AT,
                    "latenessSeconds": 0.0,
                    "durationSeconds": 0.21,
                    "outcome": "success",
                    "tries": [
                        {
                            "try": 1,
                            "startedAt": _AT,
                            "committedAt": _LATER,
                            "outcome": "success",
                            "error": None,
                            "nextTryAt": None,
                        }
                    ],
                }
            ],
            "tries": 2,
            "actions": [],
            "compensationFailures": [],
        }
    )

    instance_id: str
    flow: str
    version: str
    state: InstanceState
    created_at: datetime | None
    updated_at: datetime | None
    deadline_at: datetime | None
    wake_at: datetime | None
    wake_step_id: int | None
    wake_scope: int | None
    instance_key: str | None
    cancel_requested: bool
    lease: LeaseView | None
    input: Any
    result: Any
    error: FlowError | None
    budget: BudgetView | None
    journal: list[JournalRow]
    signals: list[SignalView] | None = None
    awaiting: list[Awaiting] | None = None
    waiting: WaitingView | None = Field(description="what a suspended instance waits for")
    attempts: list[AttemptView] = Field(
        description="the poll it waits at (or last ran): one entry per attempt"
    )
    tries: int = Field(description="capability executions in the whole journal")
    actions: list[ActionView] = Field(description="the operator's history: who and when")
    compensation_failures: list[CompensationFailure] = Field(
        description="compensations that failed for good (empty when none did)"
    )


class CancelAnswer(ApiModel):
    """The answer to a cancel: ``cancelled`` (200), or ``running`` while another node
    finishes the unwind (202), with the recorded action. A repeat of an
    ``Idempotency-Key`` whose first request is still acting answers ``pending``."""

    model_config = _examples(
        {
            "instanceId": _ID,
            "state": "cancelled",
            "actionId": "01936b2e-b144-7a5d-83e7-31c28f9a0b14",
            "actor": "ops-console",
            "actedAt": _AT,
        }
    )

    instance_id: str
    state: InstanceState | None = None
    action_id: str | None = None
    actor: str | None = None
    acted_at: datetime | None = None
    pending: bool | None = None


class WakeAnswer(ApiModel):
    """The answer to a wake: ``woken`` and the state after, or why nothing was done."""

    model_config = _examples(
        {
            "instanceId": _ID,
            "woken": True,
            "state": "suspended",
            "wakeAt": _LATER,
            "actionId": "01936b2e-b144-7a5d-83e7-31c28f9a0b14",
            "actor": "ops-console",
            "actedAt": _AT,
        }
    )

    instance_id: str
    woken: bool | None = None
    state: InstanceState | None = None
    wake_at: datetime | None = None
    reason: str | None = Field(None, description="why nothing was done (`woken: false`)")
    action_id: str | None = None
    actor: str | None = None
    acted_at: datetime | None = None
    pending: bool | None = None


class BudgetExtension(ApiModel):
    """The answer to a budget extension: the poll's stored end before and after."""

    model_config = _examples(
        {
            "instanceId": _ID,
            "extended": True,
            "extendBy": 7200.0,
            "stepId": 2,
            "startedAt": _AT,
            "previousEndsAt": "2026-12-01T10:30:00.125000Z",
            "endsAt": "2026-12-01T12:30:00.125000Z",
            "cappedByDeadline": False,
            "actionId": "01936b2e-b144-7a5d-83e7-31c28f9a0b14",
            "actor": "ops-console",
            "actedAt": _AT,
        }
    )

    instance_id: str
    extended: bool | None = None
    extend_by: float | None = Field(None, description="seconds")
    step_id: int | None = None
    started_at: datetime | None = None
    previous_ends_at: datetime | None = None
    ends_at: datetime | None = None
    capped_by_deadline: bool | None = Field(None, description="the flow deadline came first")
    action_id: str | None = None
    actor: str | None = None
    acted_at: datetime | None = None
    pending: bool | None = None


class BulkResult(ApiModel):
    """What a bulk action did to one instance."""

    model_config = _examples({"instanceId": _ID, "outcome": "acted", "state": "cancelled"})

    instance_id: str
    outcome: str = Field(description="`acted` or `skipped`")
    state: InstanceState | None = None
    status: int | None = None
    code: str | None = Field(None, description="why it was skipped (an error code)")


class BulkAnswer(ApiModel):
    """The answer to a bulk action (``dryRun``: only ``matched``)."""

    model_config = _examples(
        {
            "action": "cancel",
            "dryRun": False,
            "matched": 1,
            "acted": 1,
            "skipped": 0,
            "results": [{"instanceId": _ID, "outcome": "acted", "state": "cancelled"}],
            "nextCursor": None,
        }
    )

    action: str
    dry_run: bool
    matched: int
    acted: int
    skipped: int | None = None
    results: list[BulkResult] | None = None
    next_cursor: str | None = None


class StreamMessageView(ApiModel):
    """One stream message; ``sequence`` is the cursor to resume after."""

    model_config = _examples(
        {"sequence": 31, "stream": "JobProgress", "createdAt": _AT, "value": {"state": "RUNNING"}}
    )

    sequence: int
    stream: str
    created_at: datetime | None
    value: Any


class EventView(ApiModel):
    """One outbox event."""

    model_config = _examples(
        {
            "sequence": 7,
            "id": "01936b2e-9d22-7e3b-81c5-1fa06d7e8f92",
            "instanceId": _ID,
            "name": "document.processed",
            "payload": {"documentId": "invoice-42", "fieldCount": 3},
            "createdAt": _AT,
            "publishedAt": None,
        }
    )

    sequence: int
    id: str
    instance_id: str
    name: str
    payload: Any
    created_at: datetime | None
    published_at: datetime | None


class ReviewView(ApiModel):
    """One item of the human review queue."""

    model_config = _examples(
        {
            "sequence": 3,
            "id": "01936b2e-a033-7f4c-92d6-20b17e8f9a03",
            "instanceId": _ID,
            "subject": "invoice-42",
            "reason": "the OCR did not finish within the budget",
            "details": {},
            "createdAt": _AT,
        }
    )

    sequence: int
    id: str
    instance_id: str
    subject: str
    reason: str
    details: Any
    created_at: datetime | None


class FlowView(ApiModel):
    """A flow version: one this node serves (``served`` true, with its definition), or one
    it does not serve that still has unfinished instances (``served`` false, name, version
    and ``unfinished`` only: they wait for a node that serves it)."""

    model_config = _examples(
        {
            "name": "document.process",
            "version": "1.0.0",
            "served": True,
            "unfinished": 12,
            "profile": "durable",
            "route": "/api/v1/documents",
            "signals": ["ocr.completed"],
            "streams": [],
            "deadlineSeconds": None,
        }
    )

    name: str
    version: str
    served: bool
    unfinished: int = Field(ge=0, description="Running and suspended instances.")
    profile: Profile | None = None
    route: str | None = None
    signals: list[str] = Field(default_factory=list)
    streams: list[str] = Field(default_factory=list)
    deadline_seconds: float | None = None


class WaitingView(ApiModel):
    """What a suspended instance waits for."""

    model_config = _examples(
        {
            "kind": "poll",
            "stepId": 2,
            "capabilityId": "ocr.status",
            "attempt": 3,
            "wakeAt": _LATER,
        }
    )

    kind: WakeKind
    step_id: int
    capability_id: str | None = Field(description="the capability (or signal) awaited")
    attempt: int | None = Field(description="the poll attempt (scope) it waits to run")
    wake_at: datetime | None


class InstanceSummaryView(ApiModel):
    """One row of the instance list."""

    model_config = _examples(
        {
            "instanceId": _ID,
            "flow": "document.process",
            "version": "1.0.0",
            "state": "suspended",
            "createdAt": _AT,
            "updatedAt": _LATER,
            "wakeAt": _LATER,
            "waiting": {
                "kind": "poll",
                "stepId": 2,
                "capabilityId": "ocr.status",
                "attempt": 3,
                "wakeAt": _LATER,
            },
            "attempt": 3,
            "budgetEndsAt": "2026-12-01T10:30:00.125000Z",
            "deadlineAt": None,
            "leaseExpiresAt": None,
            "errorCode": None,
            "instanceKey": None,
            "cancelRequested": False,
        }
    )

    instance_id: str
    flow: str
    version: str
    state: InstanceState
    created_at: datetime | None
    updated_at: datetime | None
    wake_at: datetime | None
    waiting: WaitingView | None
    attempt: int | None
    budget_ends_at: datetime | None
    deadline_at: datetime | None
    lease_expires_at: datetime | None
    error_code: str | None
    instance_key: str | None
    cancel_requested: bool


class InstanceList(ApiModel):
    """A page of the instance list; ``nextCursor`` is null on the last page."""

    model_config = _examples(
        {"instances": [InstanceSummaryView.model_json_schema()["examples"][0]], "nextCursor": None}
    )

    instances: list[InstanceSummaryView]
    next_cursor: str | None


class CountByState(ApiModel):
    """How many instances of one flow version are in one state."""

    model_config = _examples(
        {"flow": "document.process", "version": "1.0.0", "state": "suspended", "count": 12}
    )

    flow: str
    version: str
    state: InstanceState
    count: int


class InstanceCounts(ApiModel):
    """Instance counts by flow, version and state, with totals."""

    model_config = _examples(
        {
            "byState": [
                {"flow": "document.process", "version": "1.0.0", "state": "suspended", "count": 12}
            ],
            "flows": {"document.process": {"1.0.0": {"suspended": 12}}},
            "states": {"suspended": 12},
            "total": 12,
            "overdue": 1,
            "overdueSeconds": 0.0,
            "stuck": 0,
        }
    )

    by_state: list[CountByState]
    flows: dict[str, dict[str, dict[str, int]]] = Field(
        description="`flows[flow][version][state]`: a count"
    )
    states: dict[str, int] = Field(description="totals by state")
    total: int
    overdue: int
    overdue_seconds: float
    stuck: int


class PlanView(ApiModel):
    """A flow version's compiled plan: its nodes in order; ``end`` is the index that
    completes the flow."""

    model_config = _examples(
        {
            "name": "document.process",
            "version": "1.0.0",
            "profile": "durable",
            "route": "/api/v1/documents",
            "deadlineSeconds": None,
            "signals": ["ocr.completed"],
            "streams": [],
            "end": 2,
            "nodes": [
                {"index": 0, "kind": "step", "capabilityId": "ocr.upload", "next": 1},
                {"index": 1, "kind": "poll", "bodyIndex": 0, "timeoutSeconds": 3600.0},
            ],
        }
    )

    name: str
    version: str
    profile: Profile
    route: str | None
    deadline_seconds: float | None
    signals: list[str]
    streams: list[str]
    end: int
    nodes: list[dict[str, Any]] = Field(
        description="each with `index` and `kind` (`step`, `poll`, `await`, `fail`, "
        "`emit`) and the fields of its kind"
    )


class DeliveryView(ApiModel):
    """The delivery of one event to one subscriber."""

    model_config = _examples(
        {
            "deliveryId": 14,
            "eventId": "01936b2e-9d22-7e3b-81c5-1fa06d7e8f92",
            "eventName": "document.processed",
            "instanceId": _ID,
            "subscriber": "billing",
            "state": "pending",
            "attempts": 1,
            "nextTryAt": _LATER,
            "lastError": "503 Service Unavailable",
            "lastStatus": 503,
            "deliveredAt": None,
            "createdAt": _AT,
        }
    )

    delivery_id: int
    event_id: str
    event_name: str | None
    instance_id: str
    subscriber: str
    state: str = Field(description="`pending`, `delivered` or `failed` (its sends ran out)")
    attempts: int = Field(description="sends made")
    next_try_at: datetime | None
    last_error: str | None
    last_status: int | None
    delivered_at: datetime | None
    created_at: datetime | None


class Health(ApiModel):
    """Liveness of a node."""

    model_config = _examples({"status": "ok", "node": "node-a"})

    status: str
    node: str
