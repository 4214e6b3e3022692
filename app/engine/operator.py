"""Operator decisions the engine carries out: extending a parked poll's budget.

An extension is a decision like any other: a ``deadline`` journal row at the poll step
(the next ``try_number``, the same ``started_at``, a later ``endsAt``; see
:mod:`app.engine.deadlines`) written under a claim, so any node resuming the instance reads
the new end from the journal. It never passes the flow deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from app.engine.deadlines import POLL_BUDGET, deadline_row, ends_at
from app.engine.host import NodeEngine
from app.engine.journal import StepKind
from app.engine.ports import Commit
from app.errors import InstanceBusy, NoBudget
from app.flows.plan import PollStep

__all__ = ["BudgetExtension", "extend_budget"]


@dataclass(frozen=True)
class BudgetExtension:
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


async def extend_budget(engine: NodeEngine, instance_id: str, by: timedelta) -> BudgetExtension:
    """Extend the budget of the poll the instance is parked at by ``by`` (at most to the
    flow deadline), durably, then give the instance back parked as it was: its next
    decision (the sweep at its ``wake_at``) reads the new end.

    Args:
        engine: the node's engine.
        instance_id: the instance.
        by: how much later the budget ends (positive).

    Returns:
        :class:`BudgetExtension`.

    Raises:
        InstanceNotFound: no such instance (``instance_not_found``).
        InstanceBusy: it runs under a live lease now (``instance_busy``); try again.
        NoBudget: it does not wait in a poll with a stored budget (``no_budget``),
            e.g. it ended, waits for a signal, or its flow version is not on this node.
    """
    if by <= timedelta(0):
        raise ValueError("an extension must be positive")
    journal = engine.journal
    now = engine.clock.now()
    claim = await journal.runs.claim(instance_id, engine.config.node_id, now, now + engine.lease)
    if claim is None:
        inst = await journal.reads.get_instance(instance_id)
        if inst.state.ended:
            raise NoBudget(f"instance {instance_id} has ended", instance_id=instance_id)
        raise InstanceBusy(
            f"instance {instance_id} is running on {inst.lease_owner}; try again",
            instance_id=instance_id,
        )
    try:
        snapshot = claim.snapshot or await journal.runs.load(instance_id)
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
        last = max(stored, key=lambda r: r.try_number)
        previous = ends_at(last)
        wanted = previous + by
        deadline = inst.deadline_at
        new_end = min(wanted, deadline) if deadline is not None else wanted
        if new_end <= previous:
            return BudgetExtension(False, last.started_at, previous, previous, True, node.index)
        row = deadline_row(
            instance_id,
            node.index,
            0,
            POLL_BUDGET,
            last.started_at,
            new_end,
            committed_at=now,
            try_number=last.try_number + 1,
        )
        await journal.runs.commit(
            Commit(instance_id, claim.fencing_token, now, now + engine.lease, rows=(row,))
        )
        return BudgetExtension(
            True, last.started_at, previous, new_end, new_end < wanted, node.index
        )
    finally:
        await journal.runs.release(instance_id, claim.fencing_token, engine.clock.now())
