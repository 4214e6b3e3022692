"""The operator's actions on one instance: wake, cancel, extend its budget and retry its
compensations that failed for good, each recorded with an ``Idempotency-Key`` so a repeat
answers the first answer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from app.api.auth import Principal
from app.api.models import (
    BudgetExtension,
    CancelAnswer,
    CompensationRetryAnswer,
    OperatorSignalAnswer,
    RetriedCompensation,
    WakeAnswer,
)
from app.engine.engine import Engine
from app.engine.journal import InstanceRecord, InstanceState, WakeKind
from app.engine.operator import extend_budget, retry_compensations
from app.engine.ports.operator import OperatorAction, OperatorReads
from app.errors import FlowparkError, InstanceEnded

__all__ = ["Extension", "cancel", "extend", "retry", "signal", "wake"]

#: An action's answer model.
A = TypeVar(
    "A", WakeAnswer, CancelAnswer, BudgetExtension, OperatorSignalAnswer, CompensationRetryAnswer
)


def _stored(answer: BaseModel) -> dict[str, Any]:
    """An answer as the action's history keeps it: its JSON, without the unset fields."""
    return answer.model_dump(mode="json", by_alias=True, exclude_unset=True)


@dataclass(frozen=True)
class _Opened:
    """An action recorded as begun on an instance that has not ended."""

    instance: InstanceRecord
    action: OperatorAction


async def _repeat(
    reads: OperatorReads, model: type[A], instance_id: str, action: str, key: str | None
) -> tuple[int, A] | None:
    """The first answer of an action repeated with its ``Idempotency-Key``, if any."""
    if key is None:
        return None
    first = await reads.find_action(instance_id, action, key)
    if first is None:
        return None
    answer = first.details.get("answer") or {"instanceId": instance_id, "pending": True}
    return int(first.details.get("status", 200)), model.model_validate(answer)


async def _open(
    engine: Engine,
    actor: Principal,
    model: type[A],
    instance_id: str,
    action: str,
    key: str | None,
    *,
    on_ended: bool = False,
) -> _Opened | tuple[int, A]:
    """Open an action on one instance: the answer to give now, or the instance and the
    action recorded as begun.

    A repeat of ``key`` answers what the first request did (even once the instance has
    ended); else an ended instance is refused (unless ``on_ended``: an action on ended
    instances); else the action is recorded before it acts
    (so two requests with one key act once), and a concurrent request that recorded it
    first with the same key gives its answer.

    Returns:
        ``(status, answer)`` to answer at once, or the :class:`_Opened` instance and action.

    Raises:
        InstanceNotFound: 404. InstanceEnded: 409.
    """
    reads = engine.journal.operator
    first = await _repeat(reads, model, instance_id, action, key)
    if first is not None:
        return first
    inst = await engine.journal.reads.get_instance(instance_id)
    if inst.state.ended and not on_ended:
        raise InstanceEnded(
            f"instance {instance_id} has ended ({inst.state})", instance_id=instance_id
        )
    record = OperatorAction(
        id=engine.new_id(),
        instance_id=instance_id,
        action=action,
        actor=actor.name,
        acted_at=engine.clock.now(),
        details={"pending": True},
        idempotency_key=key,
    )
    stored, created = await reads.record_action(record)
    if created:
        return _Opened(inst, stored)
    repeat = await _repeat(reads, model, instance_id, action, key)
    assert repeat is not None
    return repeat


async def wake(
    engine: Engine, actor: Principal, instance_id: str, key: str | None
) -> tuple[int, WakeAnswer]:
    """Wake one instance as ``actor`` (see the route).

    Returns:
        ``(status, answer)``: 200 and the :class:`~app.api.models.WakeAnswer`.

    Raises:
        InstanceNotFound: 404. InstanceEnded: 409.
    """
    opened = await _open(engine, actor, WakeAnswer, instance_id, "wake", key)
    if not isinstance(opened, _Opened):
        return opened
    inst, action = opened.instance, opened.action
    done: dict[str, Any] = {}
    if inst.state is not InstanceState.SUSPENDED:
        done.update(state=inst.state, reason=f"not parked: the instance is {inst.state}")
    elif inst.wake_kind is WakeKind.SIGNAL:
        done.update(state=inst.state, reason="it waits for a signal, not for a wake")
    else:
        outcome = await engine.wake_now(instance_id)
        if outcome is None:
            now = await engine.journal.reads.get_instance(instance_id)
            done.update(state=now.state, reason="another node holds it now")
        else:
            done.update(woken=True, state=outcome.state, wake_at=outcome.wake_at)
    answer = WakeAnswer(
        instance_id=instance_id,
        woken=done.pop("woken", False),
        **done,
        action_id=action.id,
        actor=action.actor,
        acted_at=action.acted_at,
    )
    await engine.journal.operator.complete_action(
        action.id, {"answer": _stored(answer), "status": 200}
    )
    return 200, answer


async def signal(
    engine: Engine, actor: Principal, instance_id: str, name: str, payload: Any, key: str | None
) -> tuple[int, OperatorSignalAnswer]:
    """Deliver signal ``name`` as an operator (the console's *send signal*): the same
    delivery as the signal route's, recorded in the history as action ``signal`` with the
    actor's name.

    Returns:
        ``(status, answer)``: 202 and the :class:`~app.api.models.OperatorSignalAnswer`
        (``signalId``, ``name``, ``matched``: null while it waits in the mailbox, and the
        instance's ``state``).

    Raises:
        InstanceNotFound: 404. InstanceEnded: 409. SignalNotDeclared: 404.
        InputInvalid: 422 (the payload does not validate; nothing is recorded as done).
    """
    opened = await _open(engine, actor, OperatorSignalAnswer, instance_id, "signal", key)
    if not isinstance(opened, _Opened):
        return opened
    action = opened.action
    reads = engine.journal.operator
    try:
        delivery = await engine.deliver(instance_id, name, payload, key)
    except Exception as exc:
        refused = OperatorSignalAnswer(instance_id=instance_id, name=name, refused=str(exc)[:300])
        await reads.complete_action(action.id, {"answer": _stored(refused)})
        raise
    answer = OperatorSignalAnswer(
        instance_id=instance_id,
        name=name,
        signal_id=delivery.signal.id,
        matched=delivery.signal.outcome,
        state=delivery.state,
        action_id=action.id,
        actor=action.actor,
        acted_at=action.acted_at,
    )
    await reads.complete_action(action.id, {"answer": _stored(answer), "status": 202})
    return 202, answer


async def cancel(
    engine: Engine, actor: Principal, instance_id: str, key: str | None
) -> tuple[int, CancelAnswer]:
    """Cancel one instance as ``actor`` (see the route).

    Returns:
        ``(status, answer)``: 200 once cancelled, 202 while another node finishes the
        unwind, with the :class:`~app.api.models.CancelAnswer`.

    Raises:
        InstanceNotFound: 404. InstanceEnded: 409.
    """
    opened = await _open(engine, actor, CancelAnswer, instance_id, "cancel", key)
    if not isinstance(opened, _Opened):
        return opened
    action = opened.action
    after = await engine.cancel(instance_id)
    status = 200 if after.state.ended else 202
    answer = CancelAnswer(
        instance_id=instance_id,
        state=after.state,
        action_id=action.id,
        actor=action.actor,
        acted_at=action.acted_at,
    )
    await engine.journal.operator.complete_action(
        action.id, {"answer": _stored(answer), "status": status}
    )
    return status, answer


#: Most a budget may be extended by at once.
MAX_EXTENSION = timedelta(days=366)
_D = r"(?:[1-9][0-9]?|[12][0-9]{2}|3[0-5][0-9]|36[0-5])"
_H = r"(?:0?[1-9]|1[0-9]|2[0-3])"
_MS = r"(?:0?[1-9]|[1-5][0-9])"
_T = rf"(?:{_H}H(?:{_MS}M)?(?:{_MS}S)?|{_MS}M(?:{_MS}S)?|{_MS}S)"
#: An ``extendBy`` duration as text: ISO 8601 days, hours, minutes and whole seconds, each
#: present part non-zero and within its unit (at most 365 days, 23 hours, 59 minutes, 59
#: seconds), or ``P366D``: so every text the pattern takes is positive and at most
#: :data:`MAX_EXTENSION`, and the contract (a JSON schema pattern) says exactly what is taken.
EXTEND_PATTERN = rf"^P(?:366D|{_D}D(?:T{_T})?|T{_T})$"
#: Smallest ``extendBy`` in seconds (the clock's resolution: one microsecond).
MIN_EXTENSION_SECONDS = 1e-6
_EXTEND_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {
            "type": "string",
            "pattern": EXTEND_PATTERN,
            "description": "ISO 8601: days, hours, minutes, seconds (`PT2H`, `P1DT12H`)",
        },
        {
            "type": "number",
            "minimum": MIN_EXTENSION_SECONDS,
            "maximum": MAX_EXTENSION.total_seconds(),
            "description": "seconds",
        },
    ],
    "description": (
        "An ISO-8601 duration (`PT2H`; each part non-zero and within its unit: at most "
        "365 days, 23 hours, 59 minutes, 59 seconds, or `P366D`) or seconds (at least "
        "0.000001, at most 31622400); positive, at most 366 days."
    ),
}


class Extension(BaseModel):
    """``POST /api/v1/instances/{id}/budget``: how much longer the poll may wait."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"extendBy": "PT2H"}, {"extendBy": 600}]}
    )

    extend_by: Annotated[timedelta, WithJsonSchema(_EXTEND_SCHEMA)] = Field(alias="extendBy")

    @field_validator("extend_by", mode="before")
    @classmethod
    def _as_the_schema_says(cls, value: object) -> object:
        if isinstance(value, bool):  # pydantic would read true as 1 second
            raise ValueError("extendBy must be an ISO-8601 duration or seconds, not a boolean")
        if isinstance(value, str) and re.fullmatch(EXTEND_PATTERN, value) is None:
            raise ValueError(
                "extendBy must be an ISO-8601 duration of days, hours, minutes and whole "
                "seconds (each part non-zero, within its unit; e.g. PT2H, P1DT12H) of at "
                "most 366 days, or a number of seconds"
            )
        if isinstance(value, int | float) and not (
            MIN_EXTENSION_SECONDS <= value <= MAX_EXTENSION.total_seconds()
        ):
            raise ValueError("extendBy must be positive and at most 366 days")
        return value

    @field_validator("extend_by")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if not timedelta(0) < value <= MAX_EXTENSION:
            raise ValueError("extendBy must be positive and at most 366 days")
        return value


async def extend(
    engine: Engine, actor: Principal, instance_id: str, by: timedelta, key: str | None
) -> tuple[int, BudgetExtension]:
    """Extend a parked poll's budget by ``by`` as ``actor`` (see the route).

    Returns:
        ``(status, answer)``: 200 and the :class:`~app.api.models.BudgetExtension`.

    Raises:
        InstanceNotFound: 404. InstanceEnded, InstanceBusy, NoBudget: 409.
    """
    opened = await _open(engine, actor, BudgetExtension, instance_id, "extend_budget", key)
    if not isinstance(opened, _Opened):
        return opened
    action = opened.action
    reads = engine.journal.operator
    try:
        done = await extend_budget(engine, instance_id, by)
    except FlowparkError as exc:
        await reads.complete_action(
            action.id, {"refused": str(exc.code), "extendBy": by.total_seconds()}
        )
        raise
    answer = BudgetExtension(
        instance_id=instance_id,
        extended=done.extended,
        extend_by=by.total_seconds(),
        step_id=done.step_id,
        started_at=done.started_at,
        previous_ends_at=done.previous_ends_at,
        ends_at=done.ends_at,
        capped_by_deadline=done.capped_by_deadline,
        action_id=action.id,
        actor=action.actor,
        acted_at=action.acted_at,
    )
    await reads.complete_action(action.id, {"answer": _stored(answer), "status": 200})
    return 200, answer


async def retry(
    engine: Engine, actor: Principal, instance_id: str, key: str | None
) -> tuple[int, CompensationRetryAnswer]:
    """Retry the compensations of an ended instance that failed for good, as ``actor``
    (see the route).

    Returns:
        ``(status, answer)``: 200 and the :class:`~app.api.models.CompensationRetryAnswer`.

    Raises:
        InstanceNotFound: 404. CompensationNotFailed, InstanceBusy, InstanceKeyInUse: 409.
    """
    opened = await _open(
        engine,
        actor,
        CompensationRetryAnswer,
        instance_id,
        "retry_compensations",
        key,
        on_ended=True,
    )
    if not isinstance(opened, _Opened):
        return opened
    action = opened.action
    reads = engine.journal.operator
    try:
        done = await retry_compensations(engine, instance_id)
    except FlowparkError as exc:
        refused = CompensationRetryAnswer(instance_id=instance_id, refused=str(exc.code))
        await reads.complete_action(action.id, {"answer": _stored(refused)})
        raise
    answer = CompensationRetryAnswer(
        instance_id=instance_id,
        retried=[
            RetriedCompensation(step_id=step, scope=scope, capability_id=capability)
            for step, scope, capability in done.retried
        ],
        state=done.state,
        still_failed=done.still_failed,
        action_id=action.id,
        actor=action.actor,
        acted_at=action.acted_at,
    )
    await reads.complete_action(action.id, {"answer": _stored(answer), "status": 200})
    return 200, answer
