"""A bulk wake's batch, recorded at once (``POST /api/v1/instances/actions`` with ``"action":
"wake"``): the wakes are recorded, not run, and the sweep runs them at each provider's pace.

Run inline, each wake would run its instance's next try in the request: a thousand
instances of a limited (or paused) provider take the provider's pace, seconds to minutes,
and the client times out. Recorded, a batch costs the store a few statements whatever its
size (:meth:`flowpark.engine.ports.OperatorReads.record_wakes`): each instance parked on a
wait other than a signal's is marked woken and made due now; the claim that finds the mark
runs the wait it is parked on at once (a retry's next try too, whose instant the journal
holds), and a deferral of that try keeps the mark, so the wake survives the provider's
limit without spending a try.

Each instance's action is recorded in its history as the single wake records one (action
``wake``, the actor, the instant), with the answer its own route would give for a recorded
wake (status 202, ``queued: true``), or why it was not woken; with an ``Idempotency-Key``,
per instance under ``bulk:<key>``, so a repeated batch answers what the first recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowpark.api.auth import Principal
from flowpark.api.explain import action_outcome
from flowpark.api.models import BulkResult, WakeAnswer
from flowpark.api.problems import problem_members, status_of
from flowpark.engine.node.engine import Engine
from flowpark.engine.ports.operator import (
    InstanceSummary,
    OperatorAction,
    RecordedWake,
    WakeBatch,
    WakeMark,
)
from flowpark.engine.records import InstanceState, WakeKind
from flowpark.errors import ErrorCode, VersionNotServed

__all__ = ["QUEUED", "not_woken", "record_wakes"]

#: The status of a recorded wake (its own route's, had it recorded it): accepted, the sweep
#: runs it.
QUEUED = 202
_WAITS_FOR_SIGNAL = "it waits for a signal, not for a wake"
_HELD = "another node holds it now"


def not_woken(state: InstanceState | None, reason: str | None) -> str:
    """The code of a wake that did nothing: the instance waits for a signal
    (``waits_for_signal``), has ended since it was listed (``instance_ended``), or a node
    runs it now (``instance_busy``: the sweep took it between the list and the wake)."""
    if state is not None and state.ended:
        return ErrorCode.INSTANCE_ENDED
    if state is InstanceState.SUSPENDED and reason is not None and "signal" in reason:
        return ErrorCode.WAITS_FOR_SIGNAL
    return ErrorCode.INSTANCE_BUSY


def _unserved(row: InstanceSummary) -> VersionNotServed:
    return VersionNotServed(
        f"this node does not serve flow {row.flow_name}@{row.flow_version}, so nothing can "
        "advance the instance here: wake it on a node that serves that version",
        instance_id=row.id,
    )


def _details(mark: WakeMark, action: OperatorAction, row: InstanceSummary, served: bool) -> Any:
    """What the history keeps of one instance's wake, as its own route would record it
    (None: nothing, as the route records nothing for an instance gone or ended)."""
    state = mark.state
    if state is None or state.ended:
        return None
    if not served:
        problem = problem_members(_unserved(row))
        code = ErrorCode.VERSION_NOT_SERVED
        return {"refused": str(code), "status": status_of(code), "problem": problem}
    fields: dict[str, Any] = {"state": state}
    if mark.marked:
        fields.update(woken=True, queued=True, wake_at=mark.wake_at)
        status = QUEUED
    elif state is not InstanceState.SUSPENDED:
        fields.update(woken=False, reason=f"not parked: the instance is {state}")
        status = 200
    elif mark.wake_kind is WakeKind.SIGNAL:
        fields.update(woken=False, reason=_WAITS_FOR_SIGNAL)
        status = 200
    else:  # held by another transaction (a claim, a run's write) as the batch marked
        fields.update(woken=False, reason=_HELD)
        status = 200
    answer = WakeAnswer(
        instance_id=action.instance_id,
        **fields,
        action_id=action.id,
        actor=action.actor,
        acted_at=action.acted_at,
    )
    return {
        "answer": answer.model_dump(mode="json", by_alias=True, exclude_unset=True),
        "status": status,
    }


def _result(done: RecordedWake) -> BulkResult:
    """The bulk answer's entry of one instance: acted (a wake recorded), or skipped with a
    code; a repeat of the key answers what its first record says."""
    instance_id, mark, action = done.instance_id, done.mark, done.action
    if action is None:  # nothing recorded: gone or ended since it was listed
        state = mark.state if mark is not None else None
        code = ErrorCode.INSTANCE_NOT_FOUND if state is None else ErrorCode.INSTANCE_ENDED
        return BulkResult(instance_id=instance_id, outcome="skipped", code=code)
    outcome, refused = action_outcome(action.details)
    if outcome == "refused":
        return BulkResult(instance_id=instance_id, outcome="skipped", code=refused)
    if outcome == "pending":  # a request with this key still acts on it (or was lost)
        busy = ErrorCode.ACTION_IN_PROGRESS
        return BulkResult(instance_id=instance_id, outcome="skipped", code=busy)
    answer = WakeAnswer.model_validate(action.details["answer"])
    status = int(action.details.get("status", 200))
    if answer.woken is False:
        why = not_woken(answer.state, answer.reason)
        return BulkResult(
            instance_id=instance_id, outcome="skipped", state=answer.state, status=status, code=why
        )
    return BulkResult(instance_id=instance_id, outcome="acted", state=answer.state, status=status)


async def record_wakes(
    engine: Engine, actor: Principal, rows: Sequence[InstanceSummary], key: str | None
) -> list[BulkResult]:
    """Record the wakes of one batch of a bulk wake as ``actor``, at once (see the module).

    Args:
        engine: the node's engine.
        actor: the acting token.
        rows: the batch's instances, as the list gave them.
        key: the request's ``Idempotency-Key``, if any (each instance's under
            ``bulk:<key>``).

    Returns:
        One :class:`~flowpark.api.models.BulkResult` per row, in order: ``acted`` (status
        202: recorded, the sweep runs it) or ``skipped`` with a code.
    """
    if not rows:
        return []
    now = engine.clock.now()
    per_key = f"bulk:{key}" if key else None
    actions = tuple(
        OperatorAction(
            id=engine.new_id(),
            instance_id=row.id,
            action="wake",
            actor=actor.name,
            acted_at=now,
            idempotency_key=per_key,
        )
        for row in rows
    )
    by_id = {row.id: (row, action) for row, action in zip(rows, actions, strict=True)}
    unserved = frozenset(
        row.id for row in rows if engine.catalog.find(row.flow_name, row.flow_version) is None
    )

    def details(mark: WakeMark) -> Any:
        row, action = by_id[mark.instance_id]
        return _details(mark, action, row, row.id not in unserved)

    batch = WakeBatch(actions, now, details, unserved)
    return [_result(done) for done in await engine.store.operator.record_wakes(batch)]
