"""The operator's actions on one instance: wake, cancel, extend its budget, retry its
compensations that failed for good and (from the console) send a signal, each recorded in
the instance's history (``flow_action``) with an ``Idempotency-Key``, so a repeat of the key
answers what the first request answered.

An action's record is written (``pending``) before it acts, so two requests with one key
act once, then completed with what it did; its ``details`` are one of:

* ``{"answer": {...}, "status": 200}``: it acted; a repeat answers the same status and
  answer.
* ``{"refused": code, "status": 409, "problem": {...}}``: it was refused; a repeat answers
  the same problem (code, title, detail, fields).
* ``{"refused": code, "status": 409, "tryAgain": true}``: it was refused with an answer
  that says *try again* (``instance_busy``, ``store_unavailable``, an unexpected error):
  a repeat acts again, under the same record.
* ``{"pending": true}``: the first request is acting. A repeat is 409
  ``action_in_progress`` (with ``Retry-After``) until the record is :data:`PENDING_LEASES`
  leases old; then its request is taken to be lost (its node died mid-action) and the
  repeat runs the action again under the same record (``runs`` counts the runs). A run
  again is safe for each action: a wake or a cancel fenced by the instance's lease does
  at most what a second request would; a signal is stored once by its key; an extension
  and a retry of compensations find the journal rows their first run wrote (they carry
  the action's id) and answer those instead of acting twice.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from flowpark.api.auth import Principal
from flowpark.api.explain import action_outcome, step_ref
from flowpark.api.models import (
    BudgetExtension,
    CancelAnswer,
    CompensationRetryAnswer,
    OperatorSignalAnswer,
    RetriedCompensation,
    WakeAnswer,
)
from flowpark.api.problems import STATUS, problem_members, status_of
from flowpark.engine.node.engine import Engine
from flowpark.engine.node.operator import extend_budget, retry_compensations
from flowpark.engine.ports.operator import OperatorAction
from flowpark.engine.records import InstanceRecord, InstanceState, WakeKind
from flowpark.errors import (
    ActionInProgress,
    ErrorCode,
    FlowparkError,
    InstanceEnded,
    RepeatedRefusal,
    VersionNotServed,
)

__all__ = [
    "PENDING_LEASES",
    "Extension",
    "cancel",
    "extend",
    "retry",
    "signal",
    "wake",
]

log = logging.getLogger("flowpark.api")

#: An action's answer model.
A = TypeVar(
    "A", WakeAnswer, CancelAnswer, BudgetExtension, OperatorSignalAnswer, CompensationRetryAnswer
)
#: How many leases (``FLOWPARK_LEASE_SECONDS``, 30 s by default) a record may stay pending
#: before a repeat of its key takes its request for lost and runs the action again.
PENDING_LEASES = 2
#: Refusals that ask the client to try again: not kept as the key's answer.
_TRY_AGAIN = frozenset({ErrorCode.INSTANCE_BUSY, ErrorCode.STORE_UNAVAILABLE})
_PENDING: dict[str, Any] = {"pending": True}
_CODES = {str(c): c for c in ErrorCode}


def _stored(answer: BaseModel) -> dict[str, Any]:
    """An answer as the action's history keeps it: its JSON, without the unset fields."""
    return answer.model_dump(mode="json", by_alias=True, exclude_unset=True)


@dataclass(frozen=True)
class _Opened:
    """An action recorded (or retaken) to run now; ``instance`` as read before it was
    recorded (None when retaken: read it again)."""

    action: OperatorAction
    instance: InstanceRecord | None


def _runs(action: OperatorAction) -> dict[str, Any]:
    """The run count a record carries into its next details (none for a first run)."""
    runs = action.details.get("runs")
    return {"runs": runs} if isinstance(runs, int) and runs > 1 else {}


def _replay(engine: Engine, model: type[A], first: OperatorAction) -> tuple[int, A] | None:
    """The answer a repeat of ``first``'s key gives: ``(status, answer)`` of the action it
    did, or None when the repeat runs the action (again) itself.

    Raises:
        RepeatedRefusal: the first request was refused: the same problem.
        ActionInProgress: the first request is acting (409, ``Retry-After``).
    """
    details = first.details
    outcome, code = action_outcome(details)
    if outcome == "done":
        return int(details.get("status", 200)), model.model_validate(details["answer"])
    if outcome == "refused" and not details.get("tryAgain"):
        refused = _CODES.get(code or "")
        if refused is None:
            return None
        members = details.get("problem")
        if isinstance(members, dict):
            fields = {k: v for k, v in members.items() if k not in ("detail", "code", "errors")}
            detail = str(members.get("detail", ""))
            raise RepeatedRefusal(refused, detail, members.get("errors"), **fields)
        # recorded by an earlier release: its code alone
        raise RepeatedRefusal(
            refused,
            f"the first {first.action} request with this Idempotency-Key was refused: {code}",
            instance_id=first.instance_id,
        )
    if outcome == "refused":  # its answer said try again: this repeat does
        return None
    rerun_at = first.acted_at + PENDING_LEASES * engine.lease
    if engine.clock.now() >= rerun_at:  # its request is lost: this repeat runs it
        return None
    raise ActionInProgress(
        f"the first {first.action} request with this Idempotency-Key (action {first.id}, "
        f"begun {first.acted_at.isoformat()}) is still acting: try again; a repeat from "
        f"{rerun_at.isoformat()} on runs the action itself if it is still pending",
        instance_id=first.instance_id,
        action=first.action,
        action_id=first.id,
        acted_at=first.acted_at.isoformat(),
        rerun_at=rerun_at.isoformat(),
    )


async def _open(
    engine: Engine,
    actor: Principal,
    model: type[A],
    instance_id: str,
    action: str,
    key: str | None,
    *,
    on_ended: bool,
) -> _Opened | tuple[int, A]:
    """Open an action on one instance: the answer to give now, or the action recorded (or
    retaken) to run.

    A repeat of ``key`` answers what the first request did (even once the instance has
    ended; see :func:`_replay`); else an ended instance is refused (unless ``on_ended``:
    an action on ended instances), with nothing recorded; else the action is recorded
    before it acts (so two requests with one key act once).

    Returns:
        ``(status, answer)`` to answer at once, or the :class:`_Opened` action.

    Raises:
        InstanceNotFound: 404. InstanceEnded: 409. RepeatedRefusal: the first refusal.
        ActionInProgress: 409, the first request is acting.
    """
    reads = engine.store.operator
    for _ in range(3):  # a lost race reads the winner's record again
        first = await reads.find_action(instance_id, action, key) if key is not None else None
        if first is None:
            inst = await engine.store.reads.get_instance(instance_id)
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
                details=dict(_PENDING),
                idempotency_key=key,
            )
            stored, created = await reads.record_action(record)
            if created:
                return _Opened(stored, inst)
            continue
        answer = _replay(engine, model, first)
        if answer is not None:
            return answer
        runs = first.details.get("runs")
        fresh = replace(
            first,
            actor=actor.name,
            # later than the record's instant, so a second retake of what was read fails
            acted_at=max(engine.clock.now(), first.acted_at + timedelta(microseconds=1)),
            details={**_PENDING, "runs": (runs if isinstance(runs, int) else 1) + 1},
        )
        if await reads.retake_action(first, fresh):
            return _Opened(fresh, None)
    raise ActionInProgress(  # pragma: no cover - three races lost in a row
        f"another request with this Idempotency-Key runs {action} now: try again",
        instance_id=instance_id,
        action=action,
    )


async def _refused(engine: Engine, action: OperatorAction, exc: FlowparkError) -> None:
    """Record the refusal of ``action``: the problem it is answered with, kept for a repeat
    of its key, or (a refusal that says try again) its code only."""
    code = exc.code if exc.code in STATUS else ErrorCode.INTERNAL_ERROR
    details: dict[str, Any] = {**_runs(action), "refused": str(code), "status": status_of(code)}
    if code in _TRY_AGAIN or code is ErrorCode.INTERNAL_ERROR:
        details["tryAgain"] = True
    else:
        details["problem"] = problem_members(exc)
    await _complete(engine, replace(action, details=details))


async def _complete(engine: Engine, action: OperatorAction) -> None:
    """Store ``action``'s details; a store that fails here leaves the record pending (a
    repeat runs it again past the bound) and the request's own answer stands."""
    try:
        stored = await engine.store.operator.complete_action(action)
    except Exception:
        log.warning("the outcome of action %s could not be stored", action.id, exc_info=True)
        return
    if not stored:
        log.info("action %s was retaken by a repeat of its key; its outcome is not kept", action.id)


#: What an action does once opened: ``(status, answer)`` of the instance and the record.
_Act = Callable[[InstanceRecord, OperatorAction], Awaitable[tuple[int, A]]]


async def _act(
    engine: Engine,
    actor: Principal,
    model: type[A],
    instance_id: str,
    action: str,
    key: str | None,
    run: _Act[A],
    *,
    on_ended: bool = False,
) -> tuple[int, A]:
    """Open ``action`` (:func:`_open`), run it, and record its answer or its refusal."""
    opened = await _open(engine, actor, model, instance_id, action, key, on_ended=on_ended)
    if not isinstance(opened, _Opened):
        return opened
    record, inst = opened.action, opened.instance
    try:
        if inst is None:
            inst = await engine.store.reads.get_instance(instance_id)
            if inst.state.ended and not on_ended:
                raise InstanceEnded(
                    f"instance {instance_id} has ended ({inst.state})", instance_id=instance_id
                )
        status, answer = await run(inst, record)
    except FlowparkError as exc:
        await _refused(engine, record, exc)
        raise
    except Exception:
        details = {**_runs(record), "refused": str(ErrorCode.INTERNAL_ERROR), "status": 500}
        with contextlib.suppress(Exception):
            await _complete(engine, replace(record, details={**details, "tryAgain": True}))
        raise
    done = {**_runs(record), "answer": _stored(answer), "status": status}
    await _complete(engine, replace(record, details=done))
    return status, answer


async def wake(
    engine: Engine, actor: Principal, instance_id: str, key: str | None
) -> tuple[int, WakeAnswer]:
    """Wake one instance as ``actor`` (see the route).

    Returns:
        ``(status, answer)``: 200 and the :class:`~flowpark.api.models.WakeAnswer`.

    Raises:
        InstanceNotFound: 404. InstanceEnded, ActionInProgress, VersionNotServed: 409.
        RepeatedRefusal.
    """

    async def run(inst: InstanceRecord, action: OperatorAction) -> tuple[int, WakeAnswer]:
        done: dict[str, Any] = {}
        if engine.catalog.find(inst.flow_name, inst.flow_version) is None:
            raise VersionNotServed(
                f"this node does not serve flow {inst.flow_name}@{inst.flow_version}, so "
                "nothing can advance the instance here: wake it on a node that serves that "
                "version",
                instance_id=instance_id,
            )
        if inst.state is not InstanceState.SUSPENDED:
            done.update(state=inst.state, reason=f"not parked: the instance is {inst.state}")
        elif inst.wake_kind is WakeKind.SIGNAL:
            done.update(state=inst.state, reason="it waits for a signal, not for a wake")
        else:
            outcome = await engine.wake_now(instance_id)
            if outcome is None:
                now = await engine.store.reads.get_instance(instance_id)
                done.update(state=now.state, reason="another node holds it now")
            else:
                done.update(woken=True, state=outcome.state, wake_at=outcome.wake_at)
        return 200, WakeAnswer(
            instance_id=instance_id,
            woken=done.pop("woken", False),
            **done,
            action_id=action.id,
            actor=action.actor,
            acted_at=action.acted_at,
        )

    return await _act(engine, actor, WakeAnswer, instance_id, "wake", key, run)


async def signal(
    engine: Engine, actor: Principal, instance_id: str, name: str, payload: Any, key: str | None
) -> tuple[int, OperatorSignalAnswer]:
    """Deliver signal ``name`` as an operator (the console's *send signal*): the same
    delivery as the signal route's, recorded in the history as action ``signal`` with the
    actor's name.

    Returns:
        ``(status, answer)``: 202 and the :class:`~flowpark.api.models.OperatorSignalAnswer`
        (``signalId``, ``name``, ``matched``: null while it waits in the mailbox, and the
        instance's ``state``).

    Raises:
        InstanceNotFound: 404. InstanceEnded, ActionInProgress: 409. SignalNotDeclared:
        404. InputInvalid: 422 (the payload does not validate; recorded as refused).
        RepeatedRefusal: the first request's refusal, again.
    """

    async def run(inst: InstanceRecord, action: OperatorAction) -> tuple[int, OperatorSignalAnswer]:
        delivery = await engine.deliver(instance_id, name, payload, key)
        return 202, OperatorSignalAnswer(
            instance_id=instance_id,
            name=name,
            signal_id=delivery.signal.id,
            matched=delivery.signal.outcome,
            state=delivery.state,
            action_id=action.id,
            actor=action.actor,
            acted_at=action.acted_at,
        )

    return await _act(engine, actor, OperatorSignalAnswer, instance_id, "signal", key, run)


async def cancel(
    engine: Engine, actor: Principal, instance_id: str, key: str | None
) -> tuple[int, CancelAnswer]:
    """Cancel one instance as ``actor`` (see the route).

    Returns:
        ``(status, answer)``: 200 once cancelled, 202 while another node finishes the
        unwind, with the :class:`~flowpark.api.models.CancelAnswer`.

    Raises:
        InstanceNotFound: 404. InstanceEnded, ActionInProgress: 409. RepeatedRefusal.
    """

    async def run(inst: InstanceRecord, action: OperatorAction) -> tuple[int, CancelAnswer]:
        after = await engine.cancel(instance_id)
        return 200 if after.state.ended else 202, CancelAnswer(
            instance_id=instance_id,
            state=after.state,
            action_id=action.id,
            actor=action.actor,
            acted_at=action.acted_at,
        )

    return await _act(engine, actor, CancelAnswer, instance_id, "cancel", key, run)


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
        ``(status, answer)``: 200 and the :class:`~flowpark.api.models.BudgetExtension`.

    Raises:
        InstanceNotFound: 404. InstanceEnded, InstanceBusy, NoBudget, ActionInProgress:
        409. RepeatedRefusal: the first request's refusal, again.
    """

    async def run(inst: InstanceRecord, action: OperatorAction) -> tuple[int, BudgetExtension]:
        done = await extend_budget(engine, instance_id, by, action.id)
        return 200, BudgetExtension(
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

    return await _act(engine, actor, BudgetExtension, instance_id, "extend_budget", key, run)


async def retry(
    engine: Engine, actor: Principal, instance_id: str, key: str | None
) -> tuple[int, CompensationRetryAnswer]:
    """Retry the compensations of an ended instance that failed for good, as ``actor``
    (see the route).

    Returns:
        ``(status, answer)``: 200 and the :class:`~flowpark.api.models.CompensationRetryAnswer`.

    Raises:
        InstanceNotFound: 404. CompensationNotFailed, InstanceBusy, InstanceKeyInUse,
        ActionInProgress: 409. RepeatedRefusal: the first request's refusal, again.
    """

    async def run(
        inst: InstanceRecord, action: OperatorAction
    ) -> tuple[int, CompensationRetryAnswer]:
        done = await retry_compensations(engine, instance_id, action.id)
        plan = engine.catalog.find(inst.flow_name, inst.flow_version)
        return 200, CompensationRetryAnswer(
            instance_id=instance_id,
            retried=[
                RetriedCompensation(
                    step_id=step,
                    scope=scope,
                    capability_id=capability,
                    step=step_ref(plan, step),
                )
                for step, scope, capability in done.retried
            ],
            state=done.state,
            still_failed=done.still_failed,
            action_id=action.id,
            actor=action.actor,
            acted_at=action.acted_at,
        )

    return await _act(
        engine,
        actor,
        CompensationRetryAnswer,
        instance_id,
        "retry_compensations",
        key,
        run,
        on_ended=True,
    )
