"""Node liveness rows (``flow_node``): each node process writes its own, every beat.

A row says what the node is (role, flowpark version, the flow versions it serves, whether
it sweeps) and how its sweep went (the instant of the last sweep, how many instances it
claimed). Readers judge liveness from the engine clock: a row is live when it was written
within :data:`LIVE_BEATS` of its own beat and the node did not stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update

from flowpark.store.base import const
from flowpark.store.parts import SqlPart
from flowpark.store.tables import FlowInstanceRow, FlowNodeRow

__all__ = [
    "FORGET_AFTER",
    "LIVE_BEATS",
    "MAX_OVERDUE_COUNT",
    "NodeRecord",
    "NodesReport",
    "SqlNodes",
]

NODE = FlowNodeRow.__table__  # type: ignore[attr-defined]
INSTANCE = FlowInstanceRow.__table__  # type: ignore[attr-defined]
#: The overdue count of a :class:`NodesReport` stops at this many (a bounded read).
MAX_OVERDUE_COUNT = 10_000
#: A row not written for this many of its own beats is not live.
LIVE_BEATS = 3
#: Rows of nodes not seen for this long are deleted by the next beat of any node.
FORGET_AFTER = timedelta(hours=24)


@dataclass(frozen=True)
class NodeRecord:
    """One node process's liveness row.

    Attributes:
        id: the node id (``FLOWPARK_NODE_ID``, default ``<host>-<pid>``).
        role: ``serve`` (HTTP API and console) or ``worker`` (sweeps, no HTTP).
        version: the flowpark version the node runs.
        flows: the flow versions it serves, ``name@version``, sorted.
        sweeps: whether the node runs the sweep.
        beat_seconds: how often the node writes this row (seconds).
        started_at: when the node started (aware UTC, engine clock).
        seen_at: when the node last wrote this row (aware UTC, engine clock).
        stopped_at: when the node stopped cleanly (None while it runs, or if it died).
        last_sweep_at: when its last sweep ended (None: none yet, or it does not sweep).
        last_claimed: how many instances that sweep claimed.
    """

    id: str
    role: str
    version: str
    flows: tuple[str, ...]
    sweeps: bool
    beat_seconds: float
    started_at: datetime
    seen_at: datetime
    stopped_at: datetime | None = None
    last_sweep_at: datetime | None = None
    last_claimed: int | None = None

    def live(self, now: datetime) -> bool:
        """True when the node wrote its row within :data:`LIVE_BEATS` beats of ``now``
        and has not stopped."""
        if self.stopped_at is not None:
            return False
        return now - self.seen_at <= timedelta(seconds=LIVE_BEATS * self.beat_seconds)

    def sweeping(self, now: datetime) -> bool:
        """True when the node is live, sweeps, and its last sweep ended within
        :data:`LIVE_BEATS` beats of ``now``."""
        if not (self.sweeps and self.live(now)) or self.last_sweep_at is None:
            return False
        return now - self.last_sweep_at <= timedelta(seconds=LIVE_BEATS * self.beat_seconds)


@dataclass(frozen=True)
class NodesReport:
    """The nodes and whether overdue work has a live sweeping node to take it.

    Attributes:
        nodes: every node row, the most recently seen first.
        now: the engine-clock instant the report was read at (aware UTC).
        overdue: parked instances due before the overdue threshold (at most
            :data:`MAX_OVERDUE_COUNT`).
    """

    nodes: list[NodeRecord]
    now: datetime
    overdue: int

    @property
    def live(self) -> int:
        """How many nodes are live."""
        return sum(1 for n in self.nodes if n.live(self.now))

    @property
    def sweeping(self) -> int:
        """How many live nodes sweep (and swept recently)."""
        return sum(1 for n in self.nodes if n.sweeping(self.now))

    @property
    def notice(self) -> str | None:
        """The one sentence to show when overdue work has no live sweeping node, else None."""
        if self.overdue == 0 or self.sweeping > 0:
            return None
        many = f"{self.overdue}+" if self.overdue >= MAX_OVERDUE_COUNT else str(self.overdue)
        return (
            f"no live sweeping node: {many} overdue instance{'s' if self.overdue != 1 else ''} "
            "will wait until a node that sweeps runs"
        )


class SqlNodes(SqlPart):
    """Writes and reads the ``flow_node`` rows."""

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
