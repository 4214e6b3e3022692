"""Event deliveries: the outbox relayed to subscribers, claimed atomically by nodes.

* :meth:`SqlDeliveries.relay` writes one ``flow_event_delivery`` row per subscriber for each
  outbox event not relayed yet (``published_at`` null) and marks the event relayed, in one
  transaction, in event order; one node at a time (a transaction-scoped advisory lock on
  PostgreSQL; SQLite has one writer).
* :meth:`SqlDeliveries.claim` leases due pending deliveries to a node until an instant
  (``FOR UPDATE SKIP LOCKED`` on PostgreSQL), never a delivery while an earlier event of its
  instance is still pending for the same subscriber: so each instance's events reach each
  subscriber in order, and no two nodes send one delivery at once.
* :meth:`SqlDeliveries.finish` records a send's outcome under the claim that made it (a
  node whose claim lapsed and was taken over writes nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, func, insert, or_, select, update
from sqlalchemy.sql import Select

from flowpark.engine.ports.outbox import ClaimedDelivery
from flowpark.store.parts import SqlPart
from flowpark.store.tables import EventDeliveryRow, OutboxEventRow

__all__ = ["SqlDeliveries"]

DELIVERY = EventDeliveryRow.__table__  # type: ignore[attr-defined]
EVENT = OutboxEventRow.__table__  # type: ignore[attr-defined]

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
#: Any fixed 64-bit key: the relay's advisory lock on PostgreSQL.
_RELAY_LOCK = 0x666C6F7770726B01


class SqlDeliveries(SqlPart):
    """The ``flow_event_delivery`` table's writes and reads (see the module docstring)."""

    async def relay(self, subscribers: Sequence[str], now: datetime, limit: int = 500) -> int:
        """Write the deliveries of up to ``limit`` events not relayed yet, oldest first.

        Args:
            subscribers: the configured subscribers' names (nothing is done without one).
            now: the engine clock's instant (deliveries are due at once).
            limit: at most this many events per call.

        Returns:
            How many events were relayed (0 also when another node is relaying).
        """
        if not subscribers:
            return 0
        # a read first: an idle node takes no write lock (SQLite has one per file)
        async with self._read() as conn:
            waiting = (
                await conn.execute(
                    select(EVENT.c.sequence).where(EVENT.c.published_at.is_(None)).limit(1)
                )
            ).first()
        if waiting is None:
            return 0
        async with self._write() as conn:
            if not await self._dialect.try_lock(conn, _RELAY_LOCK):
                return 0
            query = (
                select(EVENT.c.sequence, EVENT.c.id, EVENT.c.instance_id)
                .where(EVENT.c.published_at.is_(None))
                .order_by(EVENT.c.sequence)
                .limit(limit)
            )
            events = (await conn.execute(query)).all()
            if not events:
                return 0
            await conn.execute(
                insert(DELIVERY),
                [
                    {
                        "event_id": e.id,
                        "event_sequence": e.sequence,
                        "instance_id": e.instance_id,
                        "subscriber": name,
                        "state": PENDING,
                        "tries": 0,
                        "next_try_at": now,
                        "created_at": now,
                    }
                    for e in events
                    for name in subscribers
                ],
            )
            await conn.execute(
                update(EVENT)
                .where(EVENT.c.sequence.in_([e.sequence for e in events]))
                .values(published_at=now)
            )
            return len(events)

    async def claim(
        self, node: str, now: datetime, until: datetime, limit: int
    ) -> list[ClaimedDelivery]:
        """Lease up to ``limit`` due pending deliveries to ``node`` until ``until``.

        A delivery is due when ``next_try_at <= now``, no live claim holds it, and no
        earlier event of its instance is pending for the same subscriber.
        """
        earlier = DELIVERY.alias("earlier")
        picked: Select[Any] = (
            select(DELIVERY.c.sequence)
            .where(
                DELIVERY.c.state == PENDING,
                DELIVERY.c.next_try_at <= now,
                or_(DELIVERY.c.claimed_until.is_(None), DELIVERY.c.claimed_until < now),
                ~exists().where(
                    earlier.c.instance_id == DELIVERY.c.instance_id,
                    earlier.c.subscriber == DELIVERY.c.subscriber,
                    earlier.c.state == PENDING,
                    earlier.c.event_sequence < DELIVERY.c.event_sequence,
                ),
            )
            .order_by(DELIVERY.c.next_try_at, DELIVERY.c.sequence)
            .limit(limit)
        )
        async with self._read() as conn:  # an idle node takes no write lock
            due = (
                await conn.execute(
                    select(DELIVERY.c.sequence)
                    .where(DELIVERY.c.state == PENDING, DELIVERY.c.next_try_at <= now)
                    .limit(1)
                )
            ).first()
        if due is None:
            return []
        picked = self._dialect.locked(picked, skip_locked=True, of=DELIVERY)
        async with self._write() as conn:
            sequences = [r[0] for r in (await conn.execute(picked)).all()]
            if not sequences:
                return []
            await conn.execute(
                update(DELIVERY)
                .where(DELIVERY.c.sequence.in_(sequences))
                .values(claimed_by=node, claimed_until=until)
            )
            rows = (
                await conn.execute(
                    select(
                        DELIVERY.c.sequence,
                        DELIVERY.c.subscriber,
                        DELIVERY.c.tries,
                        EVENT.c.id,
                        EVENT.c.name,
                        EVENT.c.payload,
                        EVENT.c.created_at,
                        EVENT.c.instance_id,
                    )
                    .join(EVENT, EVENT.c.id == DELIVERY.c.event_id)
                    .where(DELIVERY.c.sequence.in_(sequences))
                    .order_by(DELIVERY.c.sequence)
                )
            ).all()
        return [
            ClaimedDelivery(
                sequence=r[0],
                subscriber=r[1],
                tries=r[2],
                claimed_until=until,
                event_id=r[3],
                event_name=r[4],
                payload=r[5] or {},
                event_created_at=r[6],
                instance_id=r[7],
            )
            for r in rows
        ]

    async def finish(
        self,
        claimed: ClaimedDelivery,
        node: str,
        *,
        delivered_at: datetime | None = None,
        next_try_at: datetime | None = None,
        error: str | None = None,
        status: int | None = None,
    ) -> bool:
        """Record a send's outcome: delivered (``delivered_at``), due again (``next_try_at``)
        or failed for good (neither), under the claim that made it.

        Returns:
            False when the claim was no longer this node's (nothing written).
        """
        state = DELIVERED if delivered_at is not None else PENDING if next_try_at else FAILED
        values: dict[str, Any] = {
            "state": state,
            "tries": DELIVERY.c.tries + 1,
            "last_status": status,
            "last_error": error[:2000] if error else None,
            "delivered_at": delivered_at,
            "next_try_at": next_try_at,
            "claimed_by": None,
            "claimed_until": None,
        }
        async with self._write() as conn:
            result = await conn.execute(
                update(DELIVERY)
                .where(
                    DELIVERY.c.sequence == claimed.sequence,
                    DELIVERY.c.claimed_by == node,
                    DELIVERY.c.claimed_until == claimed.claimed_until,
                )
                .values(**values)
            )
            return bool(result.rowcount)

    async def retry(self, sequence: int, now: datetime) -> dict[str, Any] | None:
        """Make a failed delivery pending again, due now, with its tries counted afresh.

        Returns:
            The delivery as stored now; None when there is no such delivery.

        Raises:
            ValueError: the delivery is not ``failed`` (nothing changed).
        """
        async with self._write() as conn:
            result = await conn.execute(
                update(DELIVERY)
                .where(DELIVERY.c.sequence == sequence, DELIVERY.c.state == FAILED)
                .values(state=PENDING, tries=0, next_try_at=now)
            )
            row = (
                await conn.execute(select(DELIVERY).where(DELIVERY.c.sequence == sequence))
            ).first()
        if row is None:
            return None
        if not result.rowcount:
            raise ValueError(f"delivery {sequence} is {row._mapping['state']}, not failed")
        return dict(row._mapping)

    async def list_deliveries(
        self,
        *,
        state: str | None = None,
        subscriber: str | None = None,
        instance_id: str | None = None,
        after: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Deliveries in creation order, with their event's name.

        Returns:
            Dicts of the ``flow_event_delivery`` columns plus ``event_name``.
        """
        query = select(DELIVERY, EVENT.c.name.label("event_name")).join(
            EVENT, EVENT.c.id == DELIVERY.c.event_id, isouter=True
        )
        conditions = []
        if state is not None:
            conditions.append(DELIVERY.c.state == state)
        if subscriber is not None:
            conditions.append(DELIVERY.c.subscriber == subscriber)
        if instance_id is not None:
            conditions.append(DELIVERY.c.instance_id == instance_id)
        if after is not None:
            conditions.append(DELIVERY.c.sequence > after)
        if conditions:
            query = query.where(and_(*conditions))
        async with self._read() as conn:
            rows = await conn.execute(query.order_by(DELIVERY.c.sequence).limit(limit))
            return [dict(r._mapping) for r in rows]

    async def count_by_state(self) -> dict[str, int]:
        """Deliveries per state (``pending``, ``delivered``, ``failed``)."""
        async with self._read() as conn:
            rows = await conn.execute(
                select(DELIVERY.c.state, func.count()).group_by(DELIVERY.c.state)
            )
            return {r[0]: int(r[1]) for r in rows}
