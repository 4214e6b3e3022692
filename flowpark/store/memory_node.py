"""The in-memory twins of what a node keeps of itself (:mod:`flowpark.engine.ports.nodes`):
liveness rows (:class:`MemoryNodes`), console sessions (:class:`MemoryConsoleSessions`) and
the schema check (:class:`MemorySchema`), over a :class:`~flowpark.store.memory.MemoryStore`'s
state where they read it. The same answers as :mod:`flowpark.store.nodes`,
:mod:`flowpark.store.console_sessions` and :class:`flowpark.store.schema.SqlSchema` (the
contract suite runs the same bodies on each).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from flowpark.engine.ports.nodes import (
    FORGET_AFTER,
    MAX_OVERDUE_COUNT,
    SESSIONS_KEPT,
    TOUCH_SECONDS,
    NodeRecord,
    NodesReport,
)
from flowpark.store.memory_state import SUSPENDED, MemoryBase, require_aware

__all__ = ["MemoryConsoleSessions", "MemoryNodes", "MemorySchema"]


class MemoryNodes:
    """:class:`~flowpark.engine.ports.nodes.Nodes` in memory; the overdue count reads the
    store's instances.

    Args:
        base: the store's state.
    """

    def __init__(self, base: MemoryBase) -> None:
        self._s = base._s
        self._rows: dict[str, NodeRecord] = {}

    async def beat(self, node: NodeRecord) -> None:
        """See :meth:`flowpark.engine.ports.nodes.Nodes.beat`."""
        require_aware(node.seen_at, node.started_at)
        self._rows[node.id] = replace(node, flows=tuple(node.flows))
        forget = node.seen_at - FORGET_AFTER
        self._rows = {k: v for k, v in self._rows.items() if v.seen_at >= forget}

    async def list_nodes(self) -> list[NodeRecord]:
        """See :meth:`flowpark.engine.ports.nodes.Nodes.list_nodes`."""
        return sorted(self._rows.values(), key=lambda n: n.seen_at, reverse=True)

    async def report(self, now: datetime, overdue_before: datetime) -> NodesReport:
        """See :meth:`flowpark.engine.ports.nodes.Nodes.report`."""
        require_aware(now, overdue_before)
        overdue = sum(
            1
            for i in self._s.instances.values()
            if i.state is SUSPENDED and i.wake_at is not None and i.wake_at < overdue_before
        )
        return NodesReport(await self.list_nodes(), now, min(overdue, MAX_OVERDUE_COUNT))


@dataclass
class _Session:
    fingerprint: str
    created_at: datetime
    last_seen_at: datetime
    ended_at: datetime | None = None


class MemoryConsoleSessions:
    """:class:`~flowpark.engine.ports.nodes.ConsoleSessions` in memory."""

    def __init__(self) -> None:
        self._rows: dict[str, _Session] = {}

    async def open(self, session_id: str, fingerprint: str, now: datetime) -> None:
        """See :meth:`flowpark.engine.ports.nodes.ConsoleSessions.open`."""
        require_aware(now)
        kept = now - SESSIONS_KEPT
        self._rows = {
            k: v
            for k, v in self._rows.items()
            if not (v.ended_at is not None and v.ended_at < kept) and v.last_seen_at >= kept
        }
        self._rows[session_id] = _Session(fingerprint, now, now)

    async def seen(
        self, session_id: str, now: datetime, idle: timedelta, lifetime: timedelta
    ) -> str | None:
        """See :meth:`flowpark.engine.ports.nodes.ConsoleSessions.seen`."""
        require_aware(now)
        row = self._rows.get(session_id)
        if (
            row is None
            or row.ended_at is not None
            or row.last_seen_at < now - idle
            or row.created_at < now - lifetime
        ):
            return None
        if now - row.last_seen_at >= min(timedelta(seconds=TOUCH_SECONDS), idle / 4):
            row.last_seen_at = now
        return row.fingerprint

    async def end(self, session_id: str, now: datetime) -> None:
        """See :meth:`flowpark.engine.ports.nodes.ConsoleSessions.end`."""
        row = self._rows.get(session_id)
        if row is not None and row.ended_at is None:
            row.ended_at = now


class MemorySchema:
    """:class:`~flowpark.engine.ports.nodes.Schema` in memory: nothing to migrate."""

    async def check_at_head(self) -> None:
        """Return at once: a memory store has no schema revision to be behind."""
