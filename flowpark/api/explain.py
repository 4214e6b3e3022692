"""The operator's answers as models: list rows, counts, and the parts of the instance view
that explain a wait (``waiting``, ``attempts``, ``tries``, ``actions``).

Vocabulary: an *attempt* is one iteration of a parked poll (the journal's *scope*); a
*try* is one execution of a capability under its retry policy (``try`` 1, 2, ...).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import datetime
from typing import Any

from flowpark.api.models import (
    ActionView,
    AttemptView,
    CountByState,
    FailedStep,
    InstanceCounts,
    InstanceSummaryView,
    TryError,
    TryView,
    WaitingView,
)
from flowpark.api.values import shown_values
from flowpark.engine.decide.deadlines import POLL_BUDGET, ends_at
from flowpark.engine.ports import operator as ports
from flowpark.engine.ports.operator import InstanceSummary, OperatorAction
from flowpark.engine.records import InstanceRecord, Outcome, StepKind, StepRow, WakeKind
from flowpark.errors import InputInvalid
from flowpark.flows.plan import (
    AwaitSignalStep,
    CapabilityStep,
    EmitStep,
    FailStep,
    Plan,
    PollStep,
    Step,
)
from flowpark.redaction import redact

__all__ = [
    "action_outcome",
    "action_view",
    "attempts_view",
    "counts_view",
    "decode_cursor",
    "encode_cursor",
    "explain_view",
    "poll_of",
    "step_label",
    "step_ref",
    "summary_view",
    "waiting_of",
    "waiting_view",
]


def encode_cursor(position: tuple[datetime, str]) -> str:
    """An opaque cursor (URL-safe base64 of ``[createdAt, id]``) for the next page."""
    raw = json.dumps([position[0].isoformat(), position[1]], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, loc: tuple[str, ...] = ("query", "cursor")) -> tuple[datetime, str]:
    """The keyset position a cursor from :func:`encode_cursor` names.

    Args:
        cursor (str): a ``nextCursor`` an answer gave out.
        loc (tuple[str, ...]): where the request held it, for the error's ``loc``.

    Raises:
        InputInvalid: not a cursor this API gave out (``input_invalid``, 422).
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, instance_id = json.loads(raw)
        instant = datetime.fromisoformat(at)
        if instant.tzinfo is None or str(uuid.UUID(instance_id)) != instance_id:
            raise ValueError("not a cursor")
    except (ValueError, TypeError, AttributeError, binascii.Error, UnicodeDecodeError):
        raise InputInvalid(
            "cursor is not a nextCursor this API gave out",
            errors=[{"loc": list(loc), "msg": "invalid cursor", "type": "value_error"}],
        ) from None
    return instant, instance_id


def poll_of(plan: Plan | None, step_id: int | None) -> PollStep | None:
    """The poll step at ``step_id`` (a parked poll waits there), or None."""
    step = _step(plan, step_id)
    return step if isinstance(step, PollStep) else None


def _step(plan: Plan | None, step_id: int | None) -> Step | None:
    if plan is None or step_id is None or not 0 <= step_id < len(plan.steps):
        return None
    return plan.steps[step_id]


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


def step_ref(plan: Plan | None, step_id: int) -> FailedStep | None:
    """Plan step ``step_id`` as ``error.step`` names one (``stepId``, ``kind``, ``label``,
    ``capabilityId``), or None when ``plan`` lacks it."""
    if plan is None or not 0 <= step_id < len(plan.steps):
        return None
    kind, label, capability = step_label(plan, step_id)
    return FailedStep(step_id=step_id, kind=kind, label=label, capability_id=capability)


def waiting_view(
    plan: Plan | None,
    step_id: int | None,
    scope: int | None,
    kind: WakeKind | None,
    wake_at: datetime | None,
    *,
    unwinding: bool = False,
) -> WaitingView | None:
    """What a suspended instance waits for: ``kind``, ``stepId``, ``capabilityId``,
    ``attempt``, ``wakeAt`` (and ``undoes`` for a compensation's next try).

    ``capabilityId`` is the capability the next execution runs (a poll's body), or the
    signal's name for a signal wait; ``attempt`` is the poll attempt (scope) it waits to
    run, None outside polls. An instance that ``unwinding`` (its ending set: it runs its
    compensations) and waits to retry waits for a compensation's next try: then
    ``capabilityId`` is the compensating capability, ``stepId`` the step it undoes and
    ``undoes`` that step, as ``compensationFailures`` names them.
    """
    if kind is None or step_id is None:
        return None
    step = _step(plan, step_id)
    capability: str | None = None
    attempt: int | None = None
    if (
        unwinding
        and kind in (WakeKind.RETRY, WakeKind.PROVIDER_BUDGET, WakeKind.PROVIDER_PUSHBACK)
        and isinstance(step, CapabilityStep)
        and step.compensation is not None
    ):
        return WaitingView(
            kind=kind,
            step_id=step_id,
            capability_id=step.compensation.id,
            attempt=None,
            wake_at=wake_at,
            undoes=step_ref(plan, step_id),
        )
    if isinstance(step, PollStep):
        body = plan.steps[step.body_index] if plan is not None else None
        capability = body.capability.id if isinstance(body, CapabilityStep) else None
        attempt = scope
        if kind is WakeKind.SIGNAL and step.signal is not None:
            capability = step.signal.name
    elif isinstance(step, CapabilityStep):
        capability = step.capability.id
    elif step is not None and getattr(step, "signal", None) is not None:
        capability = step.signal.name  # type: ignore[union-attr]
    return WaitingView(
        kind=kind, step_id=step_id, capability_id=capability, attempt=attempt, wake_at=wake_at
    )


def waiting_of(plan: Plan | None, row: InstanceRecord | InstanceSummary) -> WaitingView | None:
    """What an instance or a list row waits for (:func:`waiting_view` of its wake
    columns) while it is suspended, else None."""
    if row.wake_kind is None or row.state.value != "suspended":
        return None
    return waiting_view(
        plan,
        row.wake_step_id,
        row.wake_scope,
        row.wake_kind,
        row.wake_at,
        unwinding=row.ending is not None,
    )


def summary_view(
    row: InstanceSummary, plan: Plan | None, budget_ends_at: datetime | None
) -> InstanceSummaryView:
    """One row of ``GET /api/v1/instances``."""
    waiting = waiting_of(plan, row)
    return InstanceSummaryView(
        instance_id=row.id,
        flow=row.flow_name,
        version=row.flow_version,
        state=row.state,
        created_at=row.created_at,
        updated_at=row.updated_at,
        wake_at=row.wake_at if row.state.value == "suspended" else None,
        waiting=waiting,
        attempt=waiting.attempt if waiting else None,
        budget_ends_at=budget_ends_at,
        deadline_at=row.deadline_at,
        lease_expires_at=row.lease_expires_at if row.state.value == "running" else None,
        error_code=row.error_code,
        instance_key=row.instance_key,
        display_key=row.display_value,
        cancel_requested=row.cancel_requested,
    )


def counts_view(counts: ports.StateCounts, overdue_seconds: float) -> InstanceCounts:
    """``GET /api/v1/instances/counts``: per flow, version and state, with totals."""
    flows: dict[str, dict[str, dict[str, int]]] = {}
    totals: dict[str, int] = {}
    for c in counts.by_state:
        flows.setdefault(c.flow_name, {}).setdefault(c.flow_version, {})[str(c.state)] = c.count
        totals[str(c.state)] = totals.get(str(c.state), 0) + c.count
    return InstanceCounts(
        by_state=[
            CountByState(flow=c.flow_name, version=c.flow_version, state=c.state, count=c.count)
            for c in counts.by_state
        ],
        flows=flows,
        states=totals,
        total=sum(totals.values()),
        overdue=counts.overdue,
        overdue_seconds=overdue_seconds,
        stuck=counts.stuck,
    )


def attempts_view(
    plan: Plan | None, inst: InstanceRecord, steps: list[StepRow]
) -> list[AttemptView]:
    """Per poll attempt of the poll the instance is at (or last ran): one entry per scope
    with its scheduled wake, actual start, lateness, duration, outcome and every try.

    The scheduled instant of attempt *n* > 0 is the wake the park after attempt *n-1*
    asked for; it is read from the committed rows: the park wrote ``wake_at`` on the
    instance row only, so earlier wakes are reconstructed as the interval schedule from the
    plan (the same jitter function as the engine's) after attempt *n-1*'s commit, capped by
    the budget's end in force at that commit (an extension moves it from then on).
    """
    step = _current_poll(plan, inst, steps)
    if step is None:
        return []
    body = step.body_index
    by_scope: dict[int, list[StepRow]] = {}
    for row in steps:
        if row.step_id == body and row.kind is StepKind.STEP:
            by_scope.setdefault(row.scope, []).append(row)
    signal_rows = [r for r in steps if r.step_id == step.index and r.kind is StepKind.SIGNAL]
    out: list[AttemptView] = []
    first_start = min((r.started_at for r in by_scope.get(0, [])), default=None)
    budgets = sorted(
        (
            r
            for r in steps
            if r.kind is StepKind.DEADLINE
            and (r.step_id, r.scope, r.capability_id) == (step.index, 0, POLL_BUDGET)
        ),
        key=lambda r: r.try_number,
    )
    previous_commit: datetime | None = None
    provider = _provider_of(plan, body)
    for scope in sorted(by_scope):
        tries = sorted(by_scope[scope], key=lambda r: r.try_number)
        started = tries[0].started_at
        ended = tries[-1].committed_at
        scheduled: datetime | None = None
        held = tries[0].deferred_until
        if scope == 0:  # due when the poll was entered (its budget's start)
            scheduled = budgets[0].started_at if budgets and held is not None else started
        elif previous_commit is not None:
            scheduled = previous_commit + step.interval.delay(scope - 1, inst.id)
            written = [r for r in budgets if r.committed_at <= previous_commit]
            if written:  # the end in force when the park was asked for (extended or not)
                scheduled = min(scheduled, ends_at(written[-1]))
            elif first_start is not None:
                scheduled = min(scheduled, first_start + step.timeout)
        success = any(t.outcome is Outcome.SUCCESS for t in tries)
        last = tries[-1]
        outcome = "success" if success else ("failure" if last.final else "retrying")
        deferred = held is not None and scheduled is not None and held > scheduled
        woke = held if deferred else scheduled  # the sweep is late from the deferral's end
        out.append(
            AttemptView(
                attempt=scope,
                scheduled_at=scheduled,
                started_at=started,
                lateness_seconds=(round((started - woke).total_seconds(), 3) if woke else None),
                deferred_seconds=(
                    round((held - scheduled).total_seconds(), 3)
                    if deferred and held is not None and scheduled is not None
                    else None
                ),
                deferred_by=tries[0].deferred_by if deferred else None,
                provider=provider if deferred else None,
                duration_seconds=round((ended - started).total_seconds(), 3),
                outcome=outcome,
                tries=[
                    TryView(
                        **{"try": t.try_number},
                        started_at=t.started_at,
                        committed_at=t.committed_at,
                        outcome=t.outcome,
                        error=(
                            TryError(
                                type=t.error_type,
                                detail=redact(t.error_detail) if t.error_detail else t.error_detail,
                            )
                            if t.outcome is Outcome.FAILURE
                            else None
                        ),
                        next_try_at=t.next_try_at,
                        values=shown_values(plan, t)[0],
                    )
                    for t in tries
                ],
            )
        )
        previous_commit = next(
            (t.committed_at for t in tries if t.outcome is Outcome.SUCCESS), ended
        )
    for row in signal_rows:
        out.append(
            AttemptView(
                attempt=row.scope,
                scheduled_at=None,
                started_at=row.started_at,
                lateness_seconds=None,
                duration_seconds=0.0,
                outcome="signal",
                signal=row.capability_id,
                tries=[],
            )
        )
    return out


def _provider_of(plan: Plan | None, step_id: int) -> str | None:
    """The name of the provider the capability of step ``step_id`` calls, or None."""
    step = _step(plan, step_id)
    provider = getattr(getattr(step, "capability", None), "provider", None)
    return provider.name if provider is not None else None


def _current_poll(plan: Plan | None, inst: InstanceRecord, steps: list[StepRow]) -> PollStep | None:
    """The poll the instance waits at, else the last poll it ran an attempt of."""
    step = poll_of(plan, inst.wake_step_id) if not inst.state.ended else None
    if step is not None or plan is None:
        return step
    for row in reversed(steps):
        body = _step(plan, row.step_id)
        if isinstance(body, CapabilityStep) and body.poll_index is not None:
            return poll_of(plan, body.poll_index)
    return None


def action_outcome(details: Any) -> tuple[str, str | None]:
    """What a recorded action's ``details`` say it did, for the history's readers.

    Returns:
        ``(outcome, code)``: ``("done", None)``, ``("refused", code)`` or
        ``("pending", None)`` (acting, or its request was lost).
    """
    if not isinstance(details, dict):
        return "pending", None
    answer = details.get("answer")
    refused = details.get("refused")
    if refused is None and isinstance(answer, dict):
        refused = answer.get("refused")  # as an earlier release recorded a refusal
    if isinstance(refused, str):
        return "refused", refused
    if isinstance(answer, dict):
        return "done", None
    return "pending", None


def action_view(action: OperatorAction) -> ActionView:
    """One entry of an instance's operator history."""
    outcome, code = action_outcome(action.details)
    return ActionView(
        action_id=action.id,
        action=action.action,
        actor=action.actor,
        acted_at=action.acted_at,
        outcome=outcome,
        code=code,
        details=action.details,
    )


def explain_view(
    plan: Plan | None,
    inst: InstanceRecord,
    steps: list[StepRow],
    actions: list[OperatorAction],
) -> dict[str, Any]:
    """What the instance view adds to explain a wait (next to its ``budget``), as
    :class:`~flowpark.api.models.InstanceView` fields by name: ``waiting`` (what a suspended
    instance waits for), ``attempts`` (per poll attempt, with every try), ``tries``
    (capability executions in the whole journal) and ``actions`` (the operator's
    history)."""
    return {
        "waiting": waiting_of(plan, inst),
        "attempts": attempts_view(plan, inst, steps),
        "tries": sum(1 for r in steps if r.kind is StepKind.STEP),
        "actions": [action_view(a) for a in actions],
    }
