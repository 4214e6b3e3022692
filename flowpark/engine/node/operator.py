"""Operator decisions the engine carries out: extending a parked poll's budget, retrying
the compensations of an ended instance that failed for good.

An extension is a decision like any other: a ``deadline`` journal row at the poll step
(the next ``try_number``, the same ``started_at``, a later ``endsAt``; see
:mod:`flowpark.engine.decide.deadlines`) written under a claim, so any node resuming the instance
reads
the new end from the journal. It never passes the flow deadline.

A retry of compensations is a decision too: one ``retry`` journal row per compensation
that failed for good (at its step and scope, ``after_try`` its last try), written with the
claim that reopens the ended instance (:meth:`flowpark.engine.ports.Intake.reopen`); the run
that follows unwinds again, and the decider runs one more try of each compensation a row
asks for (final if it fails), then finishes the instance in its state, marked again or
cleared.

Both carry out an operator action: given its id, they write it on their rows
(``values["actionId"]``), and a second run of the same action (its first request's node died
before the action's answer was stored) finds those rows and answers what they did instead
of extending or retrying twice.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from flowpark.engine.decide.deadlines import POLL_BUDGET, deadline_row, ends_at, warns_at
from flowpark.engine.node.host import NodeEngine
from flowpark.engine.ports import Commit, Reopen
from flowpark.engine.records import InstanceState, Outcome, StepKind, StepRow
from flowpark.errors import CompensationNotFailed, InstanceBusy, NoBudget, StaleFencingToken
from flowpark.flows.plan import CapabilityStep, PollStep

__all__ = ["ACTION", "ExtendedBudget", "CompensationRetry", "extend_budget", "retry_compensations"]

#: The key of a journal row's values naming the operator action that wrote it (an
#: extension's ``deadline`` row, a retry's ``retry`` rows).
ACTION = "actionId"


@dataclass(frozen=True)
class ExtendedBudget:
    """What an extension did.

    Attributes:
        extended: False when the flow deadline left nothing to add (nothing written).
        started_at: when the poll's budget began (aware UTC).
        previous_ends_at / ends_at: the end before and after (aware UTC).
        capped_by_deadline: the new end is the flow deadline (less than asked).
        step_id: the poll step.
    """

    extended: bool
    started_at: datetime
    previous_ends_at: datetime
    ends_at: datetime
    capped_by_deadline: bool
    step_id: int


async def extend_budget(
    engine: NodeEngine, instance_id: str, by: timedelta, action_id: str | None = None
) -> ExtendedBudget:
    """Extend the budget of the poll the instance is parked at by ``by`` (at most to the
    flow deadline), durably, then give the instance back parked as it was: its next
    decision (the sweep at its ``wake_at``) reads the new end.

    Args:
        engine: the node's engine.
        instance_id: the instance.
        by: how much later the budget ends (positive).
        action_id: the operator action it carries out (None: none), stored on the
            extension's row (``values["actionId"]``): a second run of that action (its
            request's node died before its answer was stored) finds the row and answers
            that extension again instead of extending twice.

    Returns:
        :class:`ExtendedBudget`.

    Raises:
        InstanceNotFound: no such instance (``instance_not_found``).
        InstanceBusy: it runs under a live lease now (``instance_busy``); try again.
        NoBudget: it does not wait in a poll with a stored budget (``no_budget``),
            e.g. it ended, waits for a signal, or its flow version is not on this node.
    """
    if by <= timedelta(0):
        raise ValueError("an extension must be positive")
    store = engine.store
    now = engine.clock.now()
    claim = await store.runs.claim(instance_id, engine.config.node_id, now, now + engine.lease)
    if claim is None:
        inst = await store.reads.get_instance(instance_id)
        if inst.state.ended:
            raise NoBudget(f"instance {instance_id} has ended", instance_id=instance_id)
        raise InstanceBusy(
            f"instance {instance_id} is running on {inst.lease_owner}; try again",
            instance_id=instance_id,
        )
    try:
        snapshot = claim.snapshot or await store.runs.load(instance_id)
        inst = snapshot.instance
        plan = engine.catalog.find(inst.flow_name, inst.flow_version)
        node = (
            plan.steps[inst.wake_step_id]
            if plan is not None
            and inst.wake_step_id is not None
            and 0 <= inst.wake_step_id < len(plan.steps)
            else None
        )
        stored = [
            r
            for r in snapshot.steps
            if isinstance(node, PollStep)
            and r.kind is StepKind.DEADLINE
            and r.step_id == node.index
            and r.scope == 0
            and r.capability_id == POLL_BUDGET
        ]
        if plan is None:
            raise NoBudget(
                f"this node does not serve flow {inst.flow_name}@{inst.flow_version}, so it "
                "cannot extend the budget of its instances: ask a node that serves that version",
                instance_id=instance_id,
            )
        if not isinstance(node, PollStep) or not stored:
            raise NoBudget(
                f"instance {instance_id} does not wait in a poll with a budget",
                instance_id=instance_id,
            )
        done = [r for r in stored if action_id is not None and r.values.get(ACTION) == action_id]
        if done:  # this action extended it already: the same extension again
            row = done[0]
            before = [r for r in stored if r.try_number < row.try_number]
            previous = (
                ends_at(max(before, key=lambda r: r.try_number)) if before else row.started_at
            )
            end = ends_at(row)
            return ExtendedBudget(
                True, row.started_at, previous, end, end < previous + by, node.index
            )
        last = max(stored, key=lambda r: r.try_number)
        previous = ends_at(last)
        wanted = previous + by
        deadline = inst.deadline_at
        new_end = min(wanted, deadline) if deadline is not None else wanted
        if new_end <= previous:
            return ExtendedBudget(False, last.started_at, previous, previous, True, node.index)
        warned = warns_at(last)  # the warning moves with the end
        row = deadline_row(
            instance_id,
            node.index,
            0,
            POLL_BUDGET,
            last.started_at,
            new_end,
            committed_at=now,
            try_number=last.try_number + 1,
            warn_at=None if warned is None else warned + (new_end - previous),
        )
        if action_id is not None:
            row = replace(row, values={**row.values, ACTION: action_id})
        await store.runs.commit(
            Commit(instance_id, claim.fencing_token, now, now + engine.lease, rows=(row,))
        )
        return ExtendedBudget(
            True, last.started_at, previous, new_end, new_end < wanted, node.index
        )
    finally:
        await store.runs.release(instance_id, claim.fencing_token, engine.clock.now())


@dataclass(frozen=True)
class CompensationRetry:
    """What a retry of compensations did.

    Attributes:
        retried: ``(step_id, scope, capability_id)`` of each compensation retried.
        state: the instance's state once the retry returns (its ending: ``failed`` or
            ``cancelled``; ``running`` while another node finishes the run).
        still_failed: how many compensations failed for good once it returns (0: the
            mark is cleared).
    """

    retried: tuple[tuple[int, int, str], ...]
    state: InstanceState
    still_failed: int


def failed_for_good(steps: list[StepRow]) -> list[StepRow]:
    """The last row of each compensation (step, scope) that failed for good and never
    succeeded, in commit order."""
    last: dict[tuple[int, int], StepRow] = {}
    succeeded: set[tuple[int, int]] = set()
    for row in steps:
        if row.kind is not StepKind.COMPENSATION:
            continue
        key = (row.step_id, row.scope)
        if row.outcome is Outcome.SUCCESS:
            succeeded.add(key)
        else:
            last[key] = row
    return [
        row
        for key, row in last.items()
        if key not in succeeded and (row.final or row.next_try_at is None)
    ]


async def retry_compensations(
    engine: NodeEngine, instance_id: str, action_id: str | None = None
) -> CompensationRetry:
    """Run each compensation of the ended instance that failed for good once more, now:
    reopen it with one ``retry`` row per compensation, run the unwind, and give it back
    ended in its state (marked again if a try failed, cleared if every one succeeded).

    Args:
        engine: the node's engine.
        instance_id: an instance that ended ``failed`` or ``cancelled``.
        action_id: the operator action it carries out (None: none), stored on each
            ``retry`` row (``values["actionId"]``): a second run of that action (its
            request's node died before its answer was stored) finds the rows and answers
            what that retry did (the state now) instead of retrying again.

    Returns:
        :class:`CompensationRetry`.

    Raises:
        InstanceNotFound: no such instance (``instance_not_found``).
        CompensationNotFailed: it has no compensation that failed for good, has not
            ended, or this node does not serve its flow version
            (``compensation_not_failed``).
        InstanceBusy: another retry of it runs now (``instance_busy``); try again.
        InstanceKeyInUse: a running instance of its flow holds its instance key.
    """
    store = engine.store
    snapshot = await store.runs.load(instance_id)
    inst = snapshot.instance
    plan = engine.catalog.find(inst.flow_name, inst.flow_version)
    failed = failed_for_good(snapshot.steps)
    done = [
        r
        for r in snapshot.steps
        if action_id is not None and r.kind is StepKind.RETRY and r.values.get(ACTION) == action_id
    ]
    if done:  # this action asked for its retry already (the run goes on, or went on)
        return CompensationRetry(
            tuple((r.step_id, r.scope, r.capability_id) for r in done), inst.state, len(failed)
        )
    if inst.state not in (InstanceState.FAILED, InstanceState.CANCELLED) or not failed:
        raise CompensationNotFailed(
            f"instance {instance_id} ({inst.state}) has no compensation that failed for good",
            instance_id=instance_id,
        )
    if plan is None:
        raise CompensationNotFailed(
            f"this node does not serve flow {inst.flow_name}@{inst.flow_version}, so it "
            "cannot run its compensations: ask a node that serves that version",
            instance_id=instance_id,
        )
    now = engine.clock.now()
    asked = [r for r in snapshot.steps if r.kind is StepKind.RETRY]
    rows = tuple(
        StepRow(
            instance_id,
            row.step_id,
            row.scope,
            StepKind.RETRY,
            row.capability_id,
            Outcome.SUCCESS,
            now,
            now,
            try_number=1 + sum(1 for r in asked if (r.step_id, r.scope) == key),
            values={"after_try": row.try_number}
            | ({ACTION: action_id} if action_id is not None else {}),
        )
        for row in failed
        if isinstance(plan.steps[row.step_id], CapabilityStep)
        for key in [(row.step_id, row.scope)]
    )
    node = engine.config.node_id
    claim = await store.intake.reopen(Reopen(instance_id, node, now, now + engine.lease, rows))
    if claim is None:
        raise InstanceBusy(
            f"instance {instance_id} is being retried or run elsewhere; try again",
            instance_id=instance_id,
        )
    # another node that took the run over (logged by advance) finishes the retry
    with contextlib.suppress(StaleFencingToken):
        await engine.runs.advance(claim, gated=False)
    after = await store.runs.load(instance_id)
    return CompensationRetry(
        tuple((r.step_id, r.scope, r.capability_id) for r in rows),
        after.instance.state,
        len(failed_for_good(after.steps)),
    )
