"""Signed deliveries' ids, unique per flow and signal across instances.

A verified (signed) signal's delivery id is the provider's: one delivery is one event for
one instance. :meth:`SqlDeliveryIds.claim` records the instance an id reaches first (one
``INSERT ... SELECT`` from the instance row, ``ON CONFLICT DO NOTHING``, then a read of the
owner), so two replays racing to two instances record one owner, and a replay elsewhere is
refused before anything of it is stored.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import literal, select

from flowpark.store.base import instant
from flowpark.store.parts import SqlPart
from flowpark.store.tables import FlowInstanceRow, SignalDeliveryRow

__all__ = ["SqlDeliveryIds"]

INSTANCE = FlowInstanceRow.__table__  # type: ignore[attr-defined]
DELIVERY_ID = SignalDeliveryRow.__table__  # type: ignore[attr-defined]


class SqlDeliveryIds(SqlPart):
    """Which instance a signed delivery id belongs to."""

    async def claim(
        self, flow: str, signal: str, delivery_id: str, instance_id: str, now: datetime
    ) -> str | None:
        """Record that ``delivery_id`` of ``flow``'s ``signal`` reached ``instance_id``,
        unless an instance was recorded for it before.

        Args:
            flow: the flow's name.
            signal: the signal's name.
            delivery_id: the provider's delivery id (the verified delivery's key).
            instance_id: the instance the delivery names.
            now: the engine clock's now (aware UTC).

        Returns:
            The id's instance: ``instance_id`` when this delivery (or an earlier one of
            the same id to it) is the first; another instance's id when the id reached that
            one first; None when no instance ``instance_id`` exists (nothing recorded).

        Raises:
            InstanceNotFound: ``instance_id`` cannot name an instance.
            StoreUnavailable: the database could not be reached.
        """
        source = select(
            literal(flow),
            literal(signal),
            literal(delivery_id),
            INSTANCE.c.id,
            instant(now),
        ).where(INSTANCE.c.id == instance_id)
        columns = ["flow_name", "signal_name", "delivery_id", "instance_id", "received_at"]
        statement = (
            self._dialect.insert(DELIVERY_ID).from_select(columns, source).on_conflict_do_nothing()
        )
        owner = select(DELIVERY_ID.c.instance_id).where(
            DELIVERY_ID.c.flow_name == flow,
            DELIVERY_ID.c.signal_name == signal,
            DELIVERY_ID.c.delivery_id == delivery_id,
        )
        async with self._write() as conn:
            await conn.execute(statement)
            found = (await conn.execute(owner)).scalar_one_or_none()
        return None if found is None else str(found)

    async def owner(self, flow: str, signal: str, delivery_id: str) -> str | None:
        """The instance ``delivery_id`` of ``flow``'s ``signal`` reached first.

        Args:
            flow: the flow's name.
            signal: the signal's name.
            delivery_id: the provider's delivery id.

        Returns:
            The instance's id, or None when the id reached none.

        Raises:
            StoreUnavailable: the database could not be reached.
        """
        owner = select(DELIVERY_ID.c.instance_id).where(
            DELIVERY_ID.c.flow_name == flow,
            DELIVERY_ID.c.signal_name == signal,
            DELIVERY_ID.c.delivery_id == delivery_id,
        )
        async with self._read() as conn:
            found = (await conn.execute(owner)).scalar_one_or_none()
        return None if found is None else str(found)
