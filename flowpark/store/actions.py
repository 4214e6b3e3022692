"""SQL of the operator's action history (``flow_action``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from flowpark.engine.ports.operator import InstanceFilter, OperatorAction
from flowpark.store.base import SqlRole
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
        values = {
            "id": action.id,
            "instance_id": action.instance_id,
            "action": action.action,
            "actor": action.actor,
            "acted_at": action.acted_at,
            "details": dict(action.details),
            "idempotency_key": action.idempotency_key,
        }
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
