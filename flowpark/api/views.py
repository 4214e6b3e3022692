"""The API's answers as models (:mod:`flowpark.api.models`), built from engine records: the
routes return them, and the console reads the same ones (``model_dump(mode="json",
by_alias=True, exclude_unset=True)`` gives the JSON an answer carries).

A view sets exactly the fields its answer carries: a field left unset is absent from the
JSON (the routes answer with ``response_model_exclude_unset``), one set to None is null.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from flowpark.api.explain import explain_view, step_label
from flowpark.api.models import (
    Awaiting,
    BudgetView,
    CompensationFailure,
    EventView,
    FailedStep,
    FlowError,
    InstanceView,
    JournalRow,
    LeaseView,
    ReviewView,
    SignalAnswer,
    SignalView,
    StreamMessageView,
)
from flowpark.api.models.instances import CompensationError
from flowpark.api.values import shown_values
from flowpark.engine.decide.deadlines import open_budget
from flowpark.engine.decide.try_walk import DETAIL_LIMIT
from flowpark.engine.ports.operator import OperatorAction
from flowpark.engine.ports.reviews import ReviewRecord
from flowpark.engine.records import (
    COMPENSATION_FAILURES,
    InstanceRecord,
    InstanceState,
    Outcome,
    SignalRecord,
    StepKind,
    StepRow,
    StreamMessage,
)
from flowpark.engine.values import DECISION_KEY
from flowpark.flows.plan import AwaitSignalStep, Plan, PollStep
from flowpark.redaction import redact

__all__ = [
    "API",
    "answer_json",
    "awaiting",
    "compensation_failures",
    "display_value",
    "event_view",
    "failed_step",
    "instance_view",
    "review_view",
    "shown_details",
    "signal_answer",
    "signal_view",
    "step_label",
    "step_view",
    "stream_view",
]

API = "/api/v1"


def answer_json(answer: BaseModel) -> Any:
    """An answer model as the JSON value its route sends (camelCase names, ISO instants,
    the fields its view did not set left out): what the console's templates read.

    Args:
        answer: a model a view function built.

    Returns:
        A ``dict`` of JSON values.
    """
    return answer.model_dump(mode="json", by_alias=True, exclude_unset=True)


def step_view(row: StepRow, plan: Plan | None = None) -> JournalRow:
    """One journal row, with the values it put as :func:`flowpark.api.values.shown_values`
    shows them (``errorType``, ``errorDetail``, ``final``, ``nextTryAt`` only when it
    failed)."""
    values, truncated = shown_values(plan, row)
    # "try" is a keyword (the field is ``try_``); a stored row always has its sequence
    fields: dict[str, Any] = {"try": row.try_number, "sequence": row.sequence}
    if row.error_type is not None:
        fields.update(
            error_type=row.error_type,
            error_detail=redact(row.error_detail) if row.error_detail else row.error_detail,
            final=row.final,
            next_try_at=row.next_try_at,
        )
    return JournalRow(
        step_id=row.step_id,
        scope=row.scope,
        kind=row.kind,
        capability_id=row.capability_id,
        outcome=row.outcome,
        started_at=row.started_at,
        committed_at=row.committed_at,
        values=values,
        values_truncated=truncated,
        **fields,
    )


def signal_view(signal: SignalRecord) -> SignalView:
    """One signal as the API shows it (``matched`` says what became of it)."""
    return SignalView(**_signal_fields(signal))


def _signal_fields(signal: SignalRecord) -> dict[str, Any]:
    refused = signal.outcome is False  # the store keeps the refusing wait as "taken"
    fields: dict[str, Any] = {
        "signal_id": signal.id,
        "sequence": signal.sequence,
        "name": signal.name,
        "payload": signal.payload,
        "received_at": signal.received_at,
        "taken_at": None if refused else signal.taken_at,
        "taken_step_id": None if refused else signal.taken_step_id,
        # true: taken by a wait; false: the wait at takenStepId refused it (its match did
        # not hold), kept and ending nothing; null: waiting in the mailbox
        "matched": signal.outcome,
        # set when the instance ended while it waited untaken (it will never be taken)
        "discarded_at": signal.discarded_at,
        "discarded_reason": signal.discarded_reason,
    }
    if refused:
        fields.update(refused_at=signal.taken_at, refused_step_id=signal.taken_step_id)
    return fields


def signal_answer(
    signal: SignalRecord, instance_id: str, created: bool, state: InstanceState
) -> SignalAnswer:
    """The answer to a delivery: the signal as stored after the run it started, the
    instance, whether this request stored it (``created``) and the instance's state."""
    return SignalAnswer(
        **_signal_fields(signal), instance_id=instance_id, created=created, state=state
    )


def stream_view(message: StreamMessage) -> StreamMessageView:
    """One stream message: ``sequence``, ``stream``, ``createdAt``, ``value``."""
    return StreamMessageView(
        sequence=message.sequence,
        stream=message.stream,
        created_at=message.created_at,
        value=message.payload,
    )


def event_view(event: dict[str, Any]) -> EventView:
    """One outbox event (``GET /api/v1/events``) from the store's read dict."""
    return EventView(
        sequence=event["sequence"],
        id=event["id"],
        instance_id=event["instance_id"],
        name=event["name"],
        payload=event["payload"],
        created_at=event["created_at"],
        published_at=event.get("published_at"),
    )


def review_view(item: ReviewRecord) -> ReviewView:
    """One review-queue item (``GET /api/v1/reviews``) from the store's record."""
    return ReviewView(
        sequence=item.sequence,
        id=item.id,
        instance_id=item.instance_id,
        flow=item.flow,
        subject=item.subject,
        reason=item.reason,
        details=item.details,
        created_at=item.created_at,
        state=item.state.value,
        claimed_by=item.claimed_by,
        claimed_at=item.claimed_at,
        closed_by=item.closed_by,
        closed_at=item.closed_at,
        note=item.note,
    )


def awaiting(plan: Plan | None, inst: InstanceRecord, root: str = "") -> list[Awaiting]:
    """The signals a caller can deliver to continue ``inst`` now (empty when none).

    Args:
        plan: the instance's flow version (None: not served here, no signal listed).
        inst: the instance.
        root: the path the API is served under (a host application's prefix, the ASGI
            ``root_path``; empty when served at the root): each ``href`` starts with it.
    """
    if plan is None or inst.state.ended or inst.wake_step_id is None:
        return []
    if inst.wake_step_id >= plan.end:
        return []
    step = plan.steps[inst.wake_step_id]
    if not isinstance(step, PollStep | AwaitSignalStep) or step.signal is None:
        return []
    base = plan.trigger.route if plan.trigger is not None else f"{API}/instances"
    name = step.signal.name
    return [Awaiting(signal=name, href=f"{root}{base}/{inst.id}/signals/{name}")]


def _budget_view(
    inst: InstanceRecord, steps: list[StepRow], now: datetime | None
) -> BudgetView | None:
    budget = open_budget(inst.state, steps)
    if budget is None:
        return None
    return BudgetView(
        kind=budget.name,
        step_id=budget.step_id,
        scope=budget.scope,
        started_at=budget.started_at,
        ends_at=budget.ends_at,
        used_ratio=round(budget.used_ratio(now), 4) if now is not None else None,
        extensions=budget.extensions,
        warns_at=budget.warn_at,
        warned=budget.warned,
    )


def display_value(plan: Plan | None, value: Any) -> str | None:
    """The instance's display key: its input's field that the flow declares, as text."""
    if plan is None or plan.display_key is None or not isinstance(value, dict):
        return None
    found = value.get(plan.display_key)
    if found is None or isinstance(found, dict | list):
        return None
    return found if isinstance(found, str) else json.dumps(found)


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


def failed_step(plan: Plan | None, inst: InstanceRecord, steps: list[StepRow]) -> FailedStep | None:
    """Where a failed instance failed (``stepId``, ``kind``, ``label``, ``capabilityId``)
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
    return FailedStep(step_id=step_id, kind=kind, label=label, capability_id=capability)


def compensation_failures(
    steps: list[StepRow], plan: Plan | None = None
) -> list[CompensationFailure]:
    """The compensations that failed for good and are still failed (their retry policy
    exhausted, or an operator's retry failed; none of their tries succeeded): one entry
    per (step, scope), from its last try, with code ``compensation_failed``,
    ``capabilityId`` (the compensation), ``stepId`` and ``scope`` of the step it undoes,
    ``step`` (that step as ``error.step`` names a failed instance's step: ``stepId``,
    ``kind``, ``label``, ``capabilityId``; null when this node lacks the flow version),
    ``error`` (``code``: the error type, ``message``: its text, secrets masked, at most
    500 characters), ``errorType`` and ``errorDetail`` (the same, as stored), ``tries``
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
    failed: list[CompensationFailure] = []
    for key, row in last.items():
        if key in succeeded or not (row.final or row.next_try_at is None):
            continue
        step = None
        if plan is not None and 0 <= row.step_id < len(plan.steps):
            kind, label, capability = step_label(plan, row.step_id)
            step = FailedStep(step_id=row.step_id, kind=kind, label=label, capability_id=capability)
        failed.append(
            CompensationFailure(
                code="compensation_failed",
                capability_id=row.capability_id,
                step_id=row.step_id,
                scope=row.scope,
                step=step,
                error=CompensationError(
                    code=row.error_type, message=redact(row.error_detail or "")[:DETAIL_LIMIT]
                ),
                error_type=row.error_type,
                error_detail=redact(row.error_detail) if row.error_detail else None,
                tries=row.try_number,
                failed_at=row.committed_at,
            )
        )
    return failed


def shown_details(details: dict[str, Any]) -> dict[str, Any]:
    """A failure's details as shown: its texts (the failed try's ``detail``, the
    compensation failures') with secrets masked."""
    if isinstance(details.get("detail"), str):
        details = {**details, "detail": redact(details["detail"])}
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
    actions: Sequence[OperatorAction] = (),
    root: str = "",
) -> InstanceView:
    """The full view of one instance (``GET /api/v1/instances/{id}``).

    Args:
        inst: the instance row.
        steps: its journal rows, in commit order.
        signals: its signals (None: the answer has no ``signals``).
        plan: its flow version's plan (None: this node does not serve it).
        now: the engine clock's now (None: ``budget.usedRatio`` is null).
        actions: its operator history, oldest first.
        root: the path the API is served under (a host application's prefix; empty at the
            root): the ``awaiting`` signals' ``href`` start with it.

    ``budget`` is the bound of the wait the instance is in (None when none): ``kind``
    (``poll.budget``, ``signal.timeout`` or ``retry.total``), ``stepId``, ``scope``,
    ``startedAt``, ``endsAt`` (the stored end instant), ``usedRatio`` (the share spent at
    ``now``) and ``extensions``; ``waiting``, ``attempts``, ``tries`` and ``actions`` are
    :func:`flowpark.api.explain.explain_view`'s.
    """
    live_lease = inst.lease_owner is not None and not inst.state.ended
    optional: dict[str, Any] = {}
    if signals is not None:
        optional["signals"] = [signal_view(s) for s in signals]
    waits = awaiting(plan, inst, root)
    if waits:
        optional["awaiting"] = waits
    return InstanceView(
        instance_id=inst.id,
        flow=inst.flow_name,
        version=inst.flow_version,
        state=inst.state,
        created_at=inst.created_at,
        updated_at=inst.updated_at,
        deadline_at=inst.deadline_at,
        wake_at=inst.wake_at,
        wake_step_id=inst.wake_step_id,
        wake_scope=inst.wake_scope,
        instance_key=inst.instance_key,
        display_key=display_value(plan, inst.input),
        cancel_requested=inst.cancel_requested,
        lease=(
            LeaseView(
                owner=inst.lease_owner,
                expires_at=inst.lease_expires_at,
                fencing_token=inst.fencing_token,
            )
            if live_lease and inst.lease_owner is not None
            else None
        ),
        input=inst.input,
        result=inst.result,
        error=(
            FlowError(
                code=inst.failure.code,
                message=redact(inst.failure.message),
                details=shown_details(inst.failure.details),
                step=failed_step(plan, inst, steps),
            )
            if inst.failure is not None
            else None
        ),
        budget=_budget_view(inst, steps, now),
        journal=[step_view(r, plan) for r in steps],
        compensation_failures=compensation_failures(steps, plan),
        **optional,
        **explain_view(plan, inst, steps, list(actions)),
    )
