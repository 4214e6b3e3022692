"""JSON shapes of the API (camelCase), built from engine records."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from app.api.values import shown_values
from app.engine.deadlines import open_budget
from app.engine.journal import (
    COMPENSATION_FAILURES,
    InstanceRecord,
    InstanceState,
    Outcome,
    SignalRecord,
    StepKind,
    StepRow,
    StreamMessage,
)
from app.engine.try_walk import DETAIL_LIMIT
from app.engine.values import DECISION_KEY
from app.flows.plan import AwaitSignalStep, CapabilityStep, EmitStep, FailStep, Plan, PollStep
from app.redaction import redact

__all__ = [
    "awaiting",
    "compensation_failures",
    "event_view",
    "display_value",
    "failed_step",
    "step_label",
    "instance_view",
    "review_view",
    "shown_details",
    "signal_view",
    "stream_view",
]

API = "/api/v1"


def _at(instant: datetime | None) -> str | None:
    return instant.isoformat().replace("+00:00", "Z") if instant is not None else None


def step_view(row: StepRow, plan: Plan | None = None) -> dict[str, Any]:
    """One journal row (camelCase keys), with the values it put as
    :func:`app.api.values.shown_values` shows them."""
    values, truncated = shown_values(plan, row)
    view: dict[str, Any] = {
        "sequence": row.sequence,
        "stepId": row.step_id,
        "scope": row.scope,
        "kind": str(row.kind),
        "capabilityId": row.capability_id,
        "outcome": str(row.outcome),
        "try": row.try_number,
        "startedAt": _at(row.started_at),
        "committedAt": _at(row.committed_at),
        "values": values,
        "valuesTruncated": truncated,
    }
    if row.error_type is not None:
        view.update(
            errorType=row.error_type,
            errorDetail=redact(row.error_detail) if row.error_detail else row.error_detail,
            final=row.final,
            nextTryAt=_at(row.next_try_at),
        )
    return view


def signal_view(signal: SignalRecord) -> dict[str, Any]:
    """One signal as the API shows it (camelCase keys; ``outcome`` says what became of it)."""
    refused = signal.outcome is False  # the store keeps the refusing wait as "taken"
    view = {
        "signalId": signal.id,
        "sequence": signal.sequence,
        "name": signal.name,
        "payload": signal.payload,
        "receivedAt": _at(signal.received_at),
        "takenAt": None if refused else _at(signal.taken_at),
        "takenStepId": None if refused else signal.taken_step_id,
        # true: taken by a wait; false: the wait at takenStepId refused it (its match did
        # not hold), kept and ending nothing; null: waiting in the mailbox
        "matched": signal.outcome,
        # set when the instance ended while it waited untaken (it will never be taken)
        "discardedAt": _at(signal.discarded_at),
        "discardedReason": signal.discarded_reason,
    }
    if refused:
        view.update(refusedAt=_at(signal.taken_at), refusedStepId=signal.taken_step_id)
    return view


def stream_view(message: StreamMessage) -> dict[str, Any]:
    """One stream message as the API shows it: ``sequence``, ``stream``, ``createdAt``,
    ``value``."""
    return {
        "sequence": message.sequence,
        "stream": message.stream,
        "createdAt": _at(message.created_at),
        "value": message.payload,
    }


def event_view(event: dict[str, Any]) -> dict[str, Any]:
    """One outbox event (``GET /api/v1/events``) from the store's read dict."""
    return {
        "sequence": event["sequence"],
        "id": event["id"],
        "instanceId": event["instance_id"],
        "name": event["name"],
        "payload": event["payload"],
        "createdAt": _at(event["created_at"]),
        "publishedAt": _at(event.get("published_at")),
    }


def review_view(item: dict[str, Any]) -> dict[str, Any]:
    """One review-queue item (``GET /api/v1/reviews``) from the store's read dict."""
    return {
        "sequence": item["sequence"],
        "id": item["id"],
        "instanceId": item["instance_id"],
        "subject": item["subject"],
        "reason": item["reason"],
        "details": item["details"],
        "createdAt": _at(item["created_at"]),
    }


def awaiting(plan: Plan | None, inst: InstanceRecord) -> list[dict[str, str]]:
    """The signals a caller can deliver to continue ``inst`` now (empty when none)."""
    if plan is None or inst.state.ended or inst.wake_step_id is None:
        return []
    if inst.wake_step_id >= plan.end:
        return []
    step = plan.steps[inst.wake_step_id]
    if not isinstance(step, PollStep | AwaitSignalStep) or step.signal is None:
        return []
    base = plan.trigger.route if plan.trigger is not None else f"{API}/instances"
    return [{"signal": step.signal.name, "href": f"{base}/{inst.id}/signals/{step.signal.name}"}]


def _budget_view(
    inst: InstanceRecord, steps: list[StepRow], now: datetime | None
) -> dict[str, Any] | None:
    budget = open_budget(inst.state, steps)
    if budget is None:
        return None
    return {
        "kind": budget.name,
        "stepId": budget.step_id,
        "scope": budget.scope,
        "startedAt": _at(budget.started_at),
        "endsAt": _at(budget.ends_at),
        "usedRatio": round(budget.used_ratio(now), 4) if now is not None else None,
        "extensions": budget.extensions,
    }


def display_value(plan: Plan | None, value: Any) -> str | None:
    """The instance's display key: its input's field that the flow declares, as text."""
    if plan is None or plan.display_key is None or not isinstance(value, dict):
        return None
    found = value.get(plan.display_key)
    if found is None or isinstance(found, dict | list):
        return None
    return found if isinstance(found, str) else json.dumps(found)


def step_label(plan: Plan, step_id: int) -> tuple[str, str, str | None]:
    """``(kind, label, capability id)`` of a plan step: ``("capability", "ocr.upload",
    "ocr.upload")``, ``("fail", "fail document.ocr_failed", None)`` ..."""
    step = plan.steps[step_id]
    if isinstance(step, CapabilityStep):
        return "capability", step.capability.id, step.capability.id
    if isinstance(step, PollStep):
        return "poll", "poll", None
    if isinstance(step, AwaitSignalStep):
        return "await", f"await {step.signal.name}", None
    if isinstance(step, FailStep):
        return "fail", f"fail {step.code}", None
    if isinstance(step, EmitStep):
        return "emit", f"emit {step.name}", None
    return "step", type(step).__name__, None  # pragma: no cover - every kind is above


def _failed_step_id(inst: InstanceRecord, steps: list[StepRow]) -> int | None:
    details = inst.failure.details if inst.failure is not None else None
    for key in ("step_id", "step", "node"):  # "node": failures stored by earlier releases
        value = (details or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    # no step named: the execution that decided to fail the flow, else the last that
    # failed for good, else (an expression failed) the last one run
    runs = [r for r in steps if r.kind is StepKind.STEP]
    code = inst.failure.code if inst.failure is not None else None
    for row in reversed(runs):
        decided = row.values.get(DECISION_KEY)
        if isinstance(decided, dict) and (decided.get("fail") or {}).get("code") == code:
            return row.step_id
    for row in reversed(runs):
        if row.outcome is Outcome.FAILURE and row.final:
            return row.step_id
    if inst.failure is not None and inst.failure.code == "flow.expression_failed" and runs:
        return runs[-1].step_id
    return None


def failed_step(
    plan: Plan | None, inst: InstanceRecord, steps: list[StepRow]
) -> dict[str, Any] | None:
    """Where a failed instance failed: ``{"stepId", "kind", "label", "capabilityId"}``
    from the failure's own step, else the journal's last failed execution; None when
    neither tells (a deadline, a cancel) or this node lacks the flow version."""
    if inst.state is not InstanceState.FAILED or inst.failure is None or plan is None:
        return None
    step_id = _failed_step_id(inst, steps)
    if step_id is None or not 0 <= step_id < len(plan.steps):
        return None
    kind, label, capability = step_label(plan, step_id)
    details = inst.failure.details or {}
    named = details.get("capability_id")
    if kind == "poll" and isinstance(named, str):
        capability, label = named, f"poll {named}"
    return {"stepId": step_id, "kind": kind, "label": label, "capabilityId": capability}


def compensation_failures(steps: list[StepRow], plan: Plan | None = None) -> list[dict[str, Any]]:
    """The compensations that failed for good and are still failed (their retry policy
    exhausted, or an operator's retry failed; none of their tries succeeded): one entry
    per (step, scope), from its last try, with code ``compensation_failed``,
    ``capabilityId`` (the compensation), ``stepId`` and ``scope`` of the step it undoes,
    ``step`` (that step as ``error.step`` names a failed instance's step: ``{"stepId",
    "kind", "label", "capabilityId"}``; null when this node lacks the flow version),
    ``error`` (``{"code": the error type, "message": its text, secrets masked, at most
    500 characters}``), ``errorType`` and ``errorDetail`` (the same, as stored), ``tries``
    and ``failedAt``. Empty when none is."""
    last: dict[tuple[int, int], StepRow] = {}
    succeeded: set[tuple[int, int]] = set()
    for row in steps:
        if row.kind is not StepKind.COMPENSATION:
            continue
        key = (row.step_id, row.scope)
        if row.outcome is Outcome.SUCCESS:
            succeeded.add(key)
        elif key not in last or last[key].try_number < row.try_number:
            last[key] = row
    failed: list[dict[str, Any]] = []
    for key, row in last.items():
        if key in succeeded or not (row.final or row.next_try_at is None):
            continue
        step = None
        if plan is not None and 0 <= row.step_id < len(plan.steps):
            kind, label, capability = step_label(plan, row.step_id)
            step = {"stepId": row.step_id, "kind": kind, "label": label, "capabilityId": capability}
        failed.append(
            {
                "code": "compensation_failed",
                "capabilityId": row.capability_id,
                "stepId": row.step_id,
                "scope": row.scope,
                "step": step,
                "error": {
                    "code": row.error_type,
                    "message": redact(row.error_detail or "")[:DETAIL_LIMIT],
                },
                "errorType": row.error_type,
                "errorDetail": redact(row.error_detail) if row.error_detail else None,
                "tries": row.try_number,
                "failedAt": _at(row.committed_at),
            }
        )
    return failed


def shown_details(details: dict[str, Any]) -> dict[str, Any]:
    """A failure's details as shown: the compensation failures' texts with secrets
    masked."""
    failed = details.get(COMPENSATION_FAILURES)
    if not isinstance(failed, list):
        return details
    shown = [
        {**f, "detail": redact(f["detail"])} if isinstance(f, dict) and f.get("detail") else f
        for f in failed
    ]
    return {**details, COMPENSATION_FAILURES: shown}


def instance_view(
    inst: InstanceRecord,
    steps: list[StepRow],
    signals: list[SignalRecord] | None = None,
    plan: Plan | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The full view of one instance (``GET /api/v1/instances/{id}``).

    ``budget`` is the bound of the wait the instance is in (None when none):
    ``{"kind": "poll.budget" | "signal.timeout" | "retry.total", "stepId", "scope",
    "startedAt", "endsAt", "usedRatio", "extensions"}``; ``endsAt`` is the stored end
    instant, ``usedRatio`` the share spent at ``now`` (engine clock; null without it).
    """
    live_lease = inst.lease_owner is not None and not inst.state.ended
    view: dict[str, Any] = {
        "instanceId": inst.id,
        "flow": inst.flow_name,
        "version": inst.flow_version,
        "state": str(inst.state),
        "createdAt": _at(inst.created_at),
        "updatedAt": _at(inst.updated_at),
        "deadlineAt": _at(inst.deadline_at),
        "wakeAt": _at(inst.wake_at),
        "wakeStepId": inst.wake_step_id,
        "wakeScope": inst.wake_scope,
        "instanceKey": inst.instance_key,
        "displayKey": display_value(plan, inst.input),
        "cancelRequested": inst.cancel_requested,
        "lease": (
            {
                "owner": inst.lease_owner,
                "expiresAt": _at(inst.lease_expires_at),
                "fencingToken": inst.fencing_token,
            }
            if live_lease
            else None
        ),
        "input": inst.input,
        "result": inst.result,
        "error": (
            {
                "code": inst.failure.code,
                "message": inst.failure.message,
                "details": shown_details(inst.failure.details),
                "step": failed_step(plan, inst, steps),
            }
            if inst.failure is not None
            else None
        ),
        "budget": _budget_view(inst, steps, now),
        "journal": [step_view(r, plan) for r in steps],
        "compensationFailures": compensation_failures(steps, plan),
    }
    if signals is not None:
        view["signals"] = [signal_view(s) for s in signals]
    waits = awaiting(plan, inst)
    if waits:
        view["awaiting"] = waits
    return view
