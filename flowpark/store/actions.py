"""SQL of the operator's action history (``flow_action``), and a bulk wake's batch: its
marks on the instances and its records, in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Table, case, func, insert, or_, select, tuple_, update
from sqlalchemy.exc import IntegrityError

from flowpark.engine.ports.operator import (
    InstanceFilter,
    OperatorAction,
    RecordedWake,
    WakeBatch,
    WakeMark,
)
from flowpark.engine.records import InstanceState, WakeKind
from flowpark.store.base import SqlRole, const
from flowpark.store.listing import filter_clauses
from flowpark.store.mapping import INSTANCE
from flowpark.store.tables import FlowActionRow

__all__ = ["SqlOperatorActions"]

ACTION: Table = FlowActionRow.__table__  # type: ignore[attr-defined]


def _action(row: Any) -> OperatorAction:
    m = row._mapping
    return OperatorAction(
        id=m["id"],
        instance_id=m["instance_id"],
        action=m["action"],
        actor=m["actor"],
        acted_at=m["acted_at"],
        details=m["details"] or {},
        idempotency_key=m["idempotency_key"],
    )


def _values(action: OperatorAction) -> dict[str, Any]:
    return {
        "id": action.id,
        "instance_id": action.instance_id,
        "action": action.action,
        "actor": action.actor,
        "acted_at": action.acted_at,
        "details": dict(action.details),
        "idempotency_key": action.idempotency_key,
    }


class SqlOperatorActions(SqlRole):
    """Records operator actions and reads an instance's history of them."""

    async def record_action(self, action: OperatorAction) -> tuple[OperatorAction, bool]:
        """Insert ``action``; with an ``idempotency_key`` already used for the same
        instance and action, insert nothing and return the first.

        Returns:
            ``(action as stored, created)``.

        Raises:
            StoreUnavailable: the database could not be reached (``store_unavailable``).
        """
        values = _values(action)
        try:
            async with self._write() as conn:
                await conn.execute(insert(ACTION).values(**values))
            return action, True
        except IntegrityError:
            if action.idempotency_key is None:
                raise
        first = await self.find_action(action.instance_id, action.action, action.idempotency_key)
        if first is None:  # pragma: no cover - the conflict's row exists
            raise RuntimeError("an action's idempotency conflict found no first action")
        return first, False

    async def complete_action(self, action: OperatorAction) -> bool:
        """Store what an action did (its answer or its refusal) once it is done, unless its
        record was retaken since (``acted_at`` moved on).

        Returns:
            True when it was stored.
        """
        query = (
            update(ACTION)
            .where(ACTION.c.id == action.id, ACTION.c.acted_at == action.acted_at)
            .values(details=dict(action.details))
        )
        async with self._write() as conn:
            return bool((await conn.execute(query)).rowcount)

    async def retake_action(self, seen: OperatorAction, fresh: OperatorAction) -> bool:
        """Take record ``seen`` over for a new run (``fresh``'s actor, instant and
        details), if it is still as ``seen`` was read (its ``acted_at``).

        Returns:
            True when this call retook it.
        """
        query = (
            update(ACTION)
            .where(ACTION.c.id == seen.id, ACTION.c.acted_at == seen.acted_at)
            .values(actor=fresh.actor, acted_at=fresh.acted_at, details=dict(fresh.details))
        )
        async with self._write() as conn:
            return bool((await conn.execute(query)).rowcount)

    async def find_action(
        self, instance_id: str, action: str, idempotency_key: str
    ) -> OperatorAction | None:
        """The action recorded with ``idempotency_key`` on the instance, or None."""
        query = select(ACTION).where(
            ACTION.c.instance_id == instance_id,
            ACTION.c.action == action,
            ACTION.c.idempotency_key == idempotency_key,
        )
        async with self._read() as conn:
            row = (await conn.execute(query)).first()
        return _action(row) if row is not None else None

    async def record_wakes(self, batch: WakeBatch) -> list[RecordedWake]:
        """See :meth:`flowpark.engine.ports.OperatorReads.record_wakes`: one write
        transaction of at most five statements, whatever the batch's size: the repeats'
        records, the marks (one ``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP
        LOCKED)``: a row another transaction holds, a claim's or a run's, is left to it),
        the state of the instances not marked, the records (``ON CONFLICT DO NOTHING``),
        and the first records of a concurrent repeat that won its key.
        """
        c = INSTANCE.c
        async with self._write() as conn:
            firsts = await self._firsts(conn, batch.actions)
            todo = [a for a in batch.actions if a.instance_id not in firsts]
            to_mark = [a.instance_id for a in todo if a.instance_id not in batch.unmarked]
            marks: dict[str, WakeMark] = {}
            if to_mark:
                parked = self._dialect.locked(
                    select(c.id).where(
                        c.id.in_(to_mark),
                        c.state == const(InstanceState.SUSPENDED.value),
                        or_(c.wake_kind.is_(None), c.wake_kind != const(WakeKind.SIGNAL.value)),
                    ),
                    skip_locked=True,
                )
                due = case((c.wake_at <= batch.at, c.wake_at), else_=batch.at)
                marked = await conn.execute(
                    update(INSTANCE)
                    .where(c.id.in_(parked.scalar_subquery()))
                    .values(woken=True, wake_at=due, updated_at=batch.at)
                    .returning(c.id, c.wake_kind, c.wake_at)
                )
                for r in marked:
                    kind = WakeKind(r.wake_kind) if r.wake_kind else None
                    marks[r.id] = WakeMark(
                        r.id, InstanceState.SUSPENDED, kind, marked=True, wake_at=r.wake_at
                    )
            rest = [a.instance_id for a in todo if a.instance_id not in marks]
            if rest:
                found = await conn.execute(select(c.id, c.state, c.wake_kind).where(c.id.in_(rest)))
                for r in found:
                    kind = WakeKind(r.wake_kind) if r.wake_kind else None
                    marks[r.id] = WakeMark(r.id, InstanceState(r.state), kind)
            records: dict[str, OperatorAction] = {}
            for action in todo:
                mark = marks.get(action.instance_id) or WakeMark(action.instance_id, None)
                marks[action.instance_id] = mark
                details = batch.details(mark)
                if details is not None:
                    records[action.instance_id] = replace(action, details=dict(details))
            stored: set[str] = set()
            if records:
                inserted = await conn.execute(
                    self._dialect.insert(ACTION)
                    .values([_values(a) for a in records.values()])
                    .on_conflict_do_nothing()
                    .returning(ACTION.c.instance_id)
                )
                stored = {r.instance_id for r in inserted}
            lost = [records[i] for i in records if i not in stored]
            if lost:  # a concurrent request with the same key recorded them first
                firsts.update(await self._firsts(conn, lost))
        return [
            RecordedWake(a.instance_id, None, firsts[a.instance_id])
            if a.instance_id in firsts
            else RecordedWake(a.instance_id, marks[a.instance_id], records.get(a.instance_id))
            for a in batch.actions
        ]

    async def _firsts(
        self, conn: Any, actions: Sequence[OperatorAction]
    ) -> dict[str, OperatorAction]:
        """The recorded wakes with the idempotency keys of ``actions``, by instance."""
        keyed = [(a.instance_id, a.idempotency_key) for a in actions if a.idempotency_key]
        if not keyed:
            return {}
        query = select(ACTION).where(
            ACTION.c.action == const("wake"),
            tuple_(ACTION.c.instance_id, ACTION.c.idempotency_key).in_(keyed),
        )
        return {r.instance_id: _action(r) for r in await conn.execute(query)}

    async def actions_of(self, instance_id: str) -> list[OperatorAction]:
        """The instance's operator actions, oldest first."""
        query = (
            select(ACTION).where(ACTION.c.instance_id == instance_id).order_by(ACTION.c.sequence)
        )
        async with self._read() as conn:
            return [_action(r) for r in await conn.execute(query)]

    async def count_matching(self, where: InstanceFilter) -> int:
        """How many instances ``where`` selects (a bulk action's dry run)."""
        query = select(func.count()).select_from(INSTANCE).where(*filter_clauses(where))
        async with self._read() as conn:
            return int((await conn.execute(query)).scalar_one())
