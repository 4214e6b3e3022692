"""Answers of the operator API: wake, budget extension, bulk actions, instance list, counts."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from flowpark.api.models._base import (
    _AT,
    _ID,
    _LATER,
    ApiModel,
    _examples,
)
from flowpark.engine.records import InstanceState, WakeKind

__all__ = [
    "BudgetExtension",
    "BulkAnswer",
    "BulkResult",
    "CompensationRetryAnswer",
    "CountByState",
    "FailedStep",
    "InstanceCounts",
    "InstanceList",
    "InstanceSummaryView",
    "OperatorSignalAnswer",
    "RetriedCompensation",
    "WaitingView",
    "WakeAnswer",
]


class FailedStep(ApiModel):
    """The plan step where an instance failed."""

    model_config = _examples(
        {"stepId": 4, "kind": "fail", "label": "fail document.not_read_in_time"},
        {"stepId": 0, "kind": "capability", "label": "ocr.upload", "capabilityId": "ocr.upload"},
    )

    step_id: int = Field(description="the step's index in the plan")
    kind: str = Field(description="step, poll, await, fail or emit")
    label: str = Field(description="what the step is: its capability, or fail/poll/await ...")
    capability_id: str | None = Field(
        default=None, description="the capability that failed, if any"
    )


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
    queued: bool | None = Field(
        default=None,
        description="`true`: the wake is recorded, not run yet (a bulk wake): the instance "
        "is marked woken and due at `wakeAt`, and the sweep runs the wait it is parked on "
        "at its next pass, at its provider's pace; `state` is the instance's as recorded",
    )
    state: InstanceState | None = None
    wake_at: datetime | None = None
    reason: str | None = Field(default=None, description="why nothing was done (`woken: false`)")
    action_id: str | None = None
    actor: str | None = None
    acted_at: datetime | None = None


class RetriedCompensation(ApiModel):
    """One compensation a retry ran again, named as ``compensationFailures`` names one:
    ``capabilityId`` the compensating capability, ``stepId`` and ``scope`` the execution it
    undoes, ``step`` that step as ``error.step`` names a step."""

    step_id: int = Field(description="the plan step it undoes")
    scope: int
    capability_id: str = Field(description="the compensating capability")
    step: FailedStep | None = Field(
        default=None,
        description="the step it undoes, named as `error.step` names a step (null when this "
        "node lacks the flow version)",
    )


class CompensationRetryAnswer(ApiModel):
    """The answer to a retry of compensations: each retried (`stepId`, `scope`,
    `capabilityId`), the instance's `state` once it returns (its ending again; `running`
    while another node finishes), and `stillFailed`, how many compensations failed for
    good after it (0: the mark is cleared)."""

    model_config = _examples(
        {
            "instanceId": _ID,
            "retried": [
                {
                    "stepId": 0,
                    "scope": 0,
                    "capabilityId": "ocr.cancel",
                    "step": {
                        "stepId": 0,
                        "kind": "capability",
                        "label": "ocr.upload",
                        "capabilityId": "ocr.upload",
                    },
                }
            ],
            "state": "cancelled",
            "stillFailed": 0,
            "actionId": "01936b2e-b144-7a5d-83e7-31c28f9a0b14",
            "actor": "ops-console",
            "actedAt": _AT,
        }
    )

    instance_id: str
    retried: list[RetriedCompensation] | None = Field(
        default=None, description="each compensation retried"
    )
    state: InstanceState | None = None
    still_failed: int | None = Field(
        default=None, description="compensations failed for good after the retry (0: none)"
    )
    action_id: str | None = None
    actor: str | None = None
    acted_at: datetime | None = None


class OperatorSignalAnswer(ApiModel):
    """A signal an operator sent from the console: the delivery and the recorded action."""

    model_config = _examples(
        {
            "instanceId": _ID,
            "name": "ocr.completed",
            "signalId": "01936b2e-8c11-7d2a-b0a4-0e9f5c6d7e81",
            "matched": None,
            "state": "suspended",
            "actionId": "01936b2e-b144-7a5d-83e7-31c28f9a0b14",
            "actor": "ops-console",
            "actedAt": _AT,
        }
    )

    instance_id: str
    name: str | None = None
    signal_id: str | None = None
    matched: bool | None = Field(default=None, description="null: it waits in the mailbox")
    state: InstanceState | None = None
    action_id: str | None = None
    actor: str | None = None
    acted_at: datetime | None = None


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
    extend_by: float | None = Field(default=None, description="seconds")
    step_id: int | None = None
    started_at: datetime | None = None
    previous_ends_at: datetime | None = None
    ends_at: datetime | None = None
    capped_by_deadline: bool | None = Field(
        default=None, description="the flow deadline came first"
    )
    action_id: str | None = None
    actor: str | None = None
    acted_at: datetime | None = None


class BulkResult(ApiModel):
    """What a bulk action did to one instance."""

    model_config = _examples({"instanceId": _ID, "outcome": "acted", "state": "cancelled"})

    instance_id: str
    outcome: str = Field(description="`acted` or `skipped`")
    state: InstanceState | None = None
    status: int | None = Field(
        default=None,
        description="the status its own route answers: 200 done; 202 a wake recorded for "
        "the sweep to run, or a cancel another node finishes",
    )
    code: str | None = Field(default=None, description="why it was skipped (an error code)")


class BulkAnswer(ApiModel):
    """The answer to a bulk action (``dryRun``: ``matched``, and ``actionable``: how many
    of them the action would touch - cancel: not ended; wake: parked, not waiting for a
    signal)."""

    model_config = _examples(
        {
            "action": "cancel",
            "dryRun": False,
            "matched": 1,
            "acted": 1,
            "skipped": 0,
            "results": [{"instanceId": _ID, "outcome": "acted", "state": "cancelled"}],
            "nextCursor": None,
        },
        {
            "action": "wake",
            "dryRun": False,
            "matched": 1,
            "acted": 1,
            "skipped": 0,
            "queued": True,
            "results": [
                {"instanceId": _ID, "outcome": "acted", "state": "suspended", "status": 202}
            ],
            "nextCursor": None,
        },
    )

    action: str
    dry_run: bool
    matched: int
    actionable: int | None = None
    acted: int = Field(
        description="instances acted on: a cancel done or requested; a wake recorded (see `queued`)"
    )
    skipped: int | None = None
    queued: bool | None = Field(
        default=None,
        description="A wake that is not a dry run: `true`. Each wake counted in `acted` is "
        "recorded (in the instance's history, status 202 in `results`) and the instance "
        "marked woken and due now; the sweep runs them at its next pass, at each provider's "
        "pace. The answer does not wait for them.",
    )
    results: list[BulkResult] | None = None
    next_cursor: str | None = None


class WaitingView(ApiModel):
    """What a suspended instance waits for. While it unwinds, a compensation's next try
    is named as ``compensationFailures`` names a compensation: ``kind`` ``retry``,
    ``capabilityId`` the compensating capability, ``stepId`` the step it undoes, and
    ``undoes`` that step as ``error.step`` names a step."""

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
    undoes: FailedStep | None = Field(
        default=None,
        description="a compensation's next try: the step it undoes (as "
        "`compensationFailures[].step`); null for any other wait",
    )


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
            "displayKey": "invoice-42",
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
    display_key: str | None = Field(
        default=None, description="the value of the flow's display key (an input field it declares)"
    )
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
