"""Node liveness rows (``flow_node``): each node process writes its own, every beat.

A row says what the node is (role, flowpark version, the flow versions it serves, whether
it sweeps) and how its sweep went (the instant of the last sweep, how many instances it
claimed). Readers judge liveness from the engine clock: a row is live when it was written
within :data:`LIVE_BEATS` of its own beat and the node did not stop.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, select, update

from flowpark.engine.ports.nodes import FORGET_AFTER, MAX_OVERDUE_COUNT, NodeRecord, NodesReport
from flowpark.store.base import const
from flowpark.store.parts import SqlPart
from flowpark.store.tables import FlowInstanceRow, FlowNodeRow

__all__ = ["SqlNodes"]

NODE = FlowNodeRow.__table__  # type: ignore[attr-defined]
INSTANCE = FlowInstanceRow.__table__  # type: ignore[attr-defined]


class SqlNodes(SqlPart):
    """Writes and reads the ``flow_node`` rows (:class:`~flowpark.engine.ports.Nodes`)."""

    async def beat(self, node: NodeRecord) -> None:
        """Write ``node``'s row (insert or replace), and delete the rows of nodes not seen
        for :data:`FORGET_AFTER`.

        Raises:
            StoreUnavailable: the database could not be reached (``store_unavailable``).
        """
        values = {
            "role": node.role,
            "version": node.version,
            "flows": list(node.flows),
            "sweeps": node.sweeps,
            "beat_seconds": node.beat_seconds,
            "started_at": node.started_at,
            "seen_at": node.seen_at,
            "stopped_at": node.stopped_at,
            "last_sweep_at": node.last_sweep_at,
            "last_claimed": node.last_claimed,
        }
        async with self._write() as conn:
            done = await conn.execute(update(NODE).where(NODE.c.id == node.id).values(**values))
            if not done.rowcount:
                await conn.execute(NODE.insert().values(id=node.id, **values))
            await conn.execute(delete(NODE).where(NODE.c.seen_at < node.seen_at - FORGET_AFTER))

    async def list_nodes(self) -> list[NodeRecord]:
        """Every node row, the most recently seen first.

        Raises:
            StoreUnavailable: the database could not be reached (``store_unavailable``).
        """
        async with self._read() as conn:
            rows = (await conn.execute(select(NODE).order_by(NODE.c.seen_at.desc()))).all()
        return [
            NodeRecord(
                id=r.id,
                role=r.role,
                version=r.version,
                flows=tuple(r.flows or ()),
                sweeps=bool(r.sweeps),
                beat_seconds=float(r.beat_seconds),
                started_at=r.started_at,
                seen_at=r.seen_at,
                stopped_at=r.stopped_at,
                last_sweep_at=r.last_sweep_at,
                last_claimed=r.last_claimed,
            )
            for r in rows
        ]

    async def report(self, now: datetime, overdue_before: datetime) -> NodesReport:
        """Every node row and the number of parked instances due before ``overdue_before``
        (counted up to :data:`MAX_OVERDUE_COUNT`, through the index of parked wakes).

        Args:
            now: the engine-clock instant (aware UTC).
            overdue_before: a parked instance due before this instant is overdue.

        Raises:
            StoreUnavailable: the database could not be reached (``store_unavailable``).
        """
        nodes = await self.list_nodes()
        due = (
            select(INSTANCE.c.id)
            .where(INSTANCE.c.state == const("suspended"), INSTANCE.c.wake_at < overdue_before)
            .limit(MAX_OVERDUE_COUNT)
            .subquery()
        )
        async with self._read() as conn:
            overdue = (await conn.execute(select(func.count()).select_from(due))).scalar_one()
        return NodesReport(nodes, now, int(overdue))
