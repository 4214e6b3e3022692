"""Answers about one instance: its start, view, journal, signals, budget, attempts and tries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from flowpark.api.models._base import (
    _AT,
    _HREF,
    _ID,
    _LATER,
    ApiModel,
    _examples,
)
from flowpark.api.models.operator import (
    FailedStep,
    WaitingView,
)
from flowpark.engine.records import InstanceState, Outcome, StepKind

__all__ = [
    "ActionView",
    "AttemptView",
    "Awaiting",
    "BudgetView",
    "CancelAnswer",
    "CompensationFailure",
    "FailedStep",
    "FlowError",
    "InstanceView",
    "JournalRow",
    "LeaseView",
    "SignalAnswer",
    "SignalView",
    "StartAnswer",
    "TryError",
    "TryView",
]


class Awaiting(ApiModel):
    """A signal the instance waits for now, and where to deliver it."""

    model_config = _examples({"signal": "ocr.completed", "href": _HREF})

    signal: str = Field(description="the signal's name")
    href: str = Field(description="the path to POST it to")


class FlowError(ApiModel):
    """Why an instance failed: a failure code (dotted, e.g. ``flow.step_failed``) and,
    when the journal tells, the plan step where it failed."""

    model_config = _examples(
        {
            "code": "document.not_read_in_time",
            "message": "the OCR did not finish within the budget",
            "details": {"step_id": 4},
            "step": {"stepId": 4, "kind": "fail", "label": "fail document.not_read_in_time"},
        }
    )

    code: str
    message: str
    details: dict[str, Any] | None = None
    step: FailedStep | None = Field(default=None, description="where it failed (null: not known)")


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
    result: Any = Field(default=None, description="the flow's result, once completed")
    awaiting: list[Awaiting] | None = Field(default=None, description="signals it waits for now")
    error: FlowError | None = Field(default=None, description="why it failed (ephemeral flows)")


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
            "values": {"OcrStatus": {"status": "RUNNING", "pagesDone": 3}},
            "valuesTruncated": False,
        }
    )

    sequence: int = Field(
        description="the write that stored the row, in commit order: rows written together "
        "share it (a deadline kept inside the row it was written with), 0 for the deadlines "
        "a start stores with the instance"
    )
    step_id: int = Field(description="the plan step (its index)")
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
    values: dict[str, Any] = Field(
        default_factory=dict,
        description="what the execution put in the state bag, by bag key: redacted by the "
        "capability's hook, each value's JSON cut at 1000 characters",
    )
    values_truncated: bool = Field(default=False, description="whether a value was cut")


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
    taken_at: datetime | None = Field(description="when a wait took it (null: not taken)")
    taken_step_id: int | None = Field(description="the step of the wait that took it")
    matched: bool | None = Field(
        description="true: taken by a wait; false: refused by the wait's match (kept, ending "
        "nothing); null: waiting in the mailbox"
    )
    refused_at: datetime | None = Field(
        default=None, description="when the wait's match refused it (matched false)"
    )
    refused_step_id: int | None = Field(
        default=None, description="the step of the wait whose match refused it"
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
    warns_at: datetime | None = Field(
        None,
        description="the stored instant of its warning before the end (`warn_before`), or "
        "null when it declares none; an extension moves it with the end",
    )
    warned: bool = Field(False, description="whether that warning was given")


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
            "values": {"OcrStatus": {"status": "RUNNING", "pagesDone": 3}},
        }
    )

    try_: int = Field(alias="try")
    started_at: datetime | None
    committed_at: datetime | None
    outcome: Outcome
    error: TryError | None
    next_try_at: datetime | None
    values: dict[str, Any] = Field(
        default_factory=dict, description="what the try put (as in the journal's `values`)"
    )


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
    lateness_seconds: float | None = Field(
        description="how late the sweep started it: after its scheduled instant, or, when "
        "its provider deferred it, after the deferral's end (negative: woken early)"
    )
    deferred_seconds: float | None = Field(
        default=None,
        description="how long its provider held it back after its scheduled instant (no "
        "budget under its limit, or a pushback), apart from the lateness; null when not "
        "deferred",
    )
    deferred_by: str | None = Field(
        default=None, description="why it was deferred: `budget` (the limit) or `pushback`"
    )
    provider: str | None = Field(
        default=None, description="the provider that deferred it (its capability's)"
    )
    duration_seconds: float | None
    outcome: str = Field(description="`success`, `failure`, `retrying` or `signal`")
    signal: str | None = Field(default=None, description="the signal that ended the wait")
    tries: list[TryView]


class ActionView(ApiModel):
    """One operator action on an instance (wake, extend_budget, cancel, signal,
    retry_compensations): who, when, and what came of it (``outcome``; ``code``: the
    refusal's error code), with the recorded ``details`` (its answer, or the problem it
    was refused with)."""

    model_config = _examples(
        {
            "actionId": "01936b2e-b144-7a5d-83e7-31c28f9a0b14",
            "action": "wake",
            "actor": "ops-console",
            "actedAt": _AT,
            "outcome": "done",
            "code": None,
            "details": {"answer": {"woken": True, "state": "suspended"}, "status": 200},
        }
    )

    action_id: str
    action: str
    actor: str
    acted_at: datetime | None
    outcome: str = Field(
        description="`done` (it acted: `details.answer`), `refused` (`code`, and "
        "`details.problem` as answered) or `pending` (its request is acting, or was lost)"
    )
    code: str | None = Field(default=None, description="the refusal's error code")
    details: Any


class CompensationError(ApiModel):
    """The last error of a compensation that failed for good."""

    code: str | None = Field(description="the error's type (`HTTPStatusError`, ...)")
    message: str = Field(description="its text, secrets masked, at most 500 characters")


class CompensationFailure(ApiModel):
    """A compensation that failed for good and is still failed (its retry policy
    exhausted, or an operator's retry of it failed; no try of it succeeded)."""

    model_config = _examples(
        {
            "code": "compensation_failed",
            "capabilityId": "ocr.cancel",
            "stepId": 0,
            "scope": 0,
            "step": {
                "stepId": 0,
                "kind": "capability",
                "label": "ocr.upload",
                "capabilityId": "ocr.upload",
            },
            "error": {"code": "ConnectTimeout", "message": "timed out"},
            "errorType": "ConnectTimeout",
            "errorDetail": "timed out",
            "tries": 15,
            "failedAt": _LATER,
        }
    )

    code: str = Field(description="always `compensation_failed`")
    capability_id: str | None = Field(description="the compensating capability")
    step_id: int = Field(description="the plan step it undoes")
    scope: int
    step: FailedStep | None = Field(
        default=None, description="the step it undoes, named as `error.step` names a failed step"
    )
    error: CompensationError
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
    display_key: str | None = Field(
        default=None, description="the value of the flow's display key (an input field it declares)"
    )
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
    finishes the unwind (202), with the recorded action."""

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
