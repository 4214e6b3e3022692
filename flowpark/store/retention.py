"""The retention purge: ended instances past the retention deleted with all their rows.

Each call of :meth:`SqlRetention.purge_batch` is one short transaction: it picks up to
``limit`` instances that ended (``completed``, ``failed``, ``cancelled``) before the cutoff
(read through the state index, no sort) and deletes their rows from every table that has
an ``instance_id`` column (journal, signals, streams, heartbeats, outbox events and their
deliveries, review items, operator actions: whatever the schema holds), then the instance
rows. An instance with an event delivery still ``pending`` is not picked: it waits until
each of its deliveries is ``delivered`` or ``failed`` (visible in ``GET
/api/v1/deliveries``), so retention never drops an undelivered event. On
PostgreSQL a transaction-scoped advisory lock lets one node purge at a time (another node's
call returns 0 at once) and the picked rows are locked ``FOR UPDATE SKIP LOCKED``; SQLite
has one writer. No lock outlives a batch, so the purge never blocks starts, signals or
sweeps for longer than one batch's deletes.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, exists, select

from flowpark.store.parts import SqlPart
from flowpark.store.tables import EventDeliveryRow, FlowInstanceRow, metadata

__all__ = ["ENDED_STATES", "SqlRetention"]

INSTANCE = FlowInstanceRow.__table__  # type: ignore[attr-defined]
DELIVERY = EventDeliveryRow.__table__  # type: ignore[attr-defined]
#: The states of an instance that will never run again.
ENDED_STATES = ("completed", "failed", "cancelled")
_PURGE_LOCK = 0x666C6F7770726B02


class SqlRetention(SqlPart):
    """Deletes ended instances older than a cutoff, in bounded batches."""

    async def purge_batch(self, cutoff: datetime, limit: int = 500) -> int:
        """Delete up to ``limit`` instances that ended before ``cutoff`` with all their rows.

        Args:
            cutoff: the engine clock's now minus the retention (aware UTC); an instance's
                end is its ``updated_at`` (its last write).
            limit: the most instances deleted in this transaction.

        Returns:
            How many instances were deleted (0 also when another node is purging).
        """
        children = [
            t for t in metadata.sorted_tables if t.name != INSTANCE.name and "instance_id" in t.c
        ]
        async with self._write() as conn:
            if not await self._dialect.try_lock(conn, _PURGE_LOCK):
                return 0
            undelivered = exists().where(
                DELIVERY.c.instance_id == INSTANCE.c.id, DELIVERY.c.state == "pending"
            )
            picked = self._dialect.locked(
                select(INSTANCE.c.id)
                .where(
                    INSTANCE.c.state.in_(ENDED_STATES),
                    INSTANCE.c.updated_at < cutoff,
                    ~undelivered,
                )
                .limit(limit),
                skip_locked=True,
            )
            ids = [r[0] for r in (await conn.execute(picked)).all()]
            if not ids:
                return 0
            for table in children:
                await conn.execute(delete(table).where(table.c.instance_id.in_(ids)))
            await conn.execute(delete(INSTANCE).where(INSTANCE.c.id.in_(ids)))
            return len(ids)

    async def purge(self, cutoff: datetime, limit: int = 500, *, most: int | None = None) -> int:
        """Call :meth:`purge_batch` until a batch deletes fewer than ``limit`` instances
        (or ``most`` were deleted).

        Returns:
            How many instances were deleted in all.
        """
        total = 0
        while most is None or total < most:
            done = await self.purge_batch(cutoff, limit)
            total += done
            if done < limit:
                break
        return total
