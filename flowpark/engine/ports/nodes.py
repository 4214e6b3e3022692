"""What a node keeps of itself in the store, as ports: its liveness row (:class:`Nodes`,
with :class:`NodeRecord` and :class:`NodesReport`), the console's sessions
(:class:`ConsoleSessions`) and the schema's revision (:class:`Schema`).

Implemented in SQL (:mod:`flowpark.store.nodes`, :mod:`flowpark.store.console_sessions`,
:class:`flowpark.store.migrate.SqlSchema`) and in memory (:mod:`flowpark.store.memory_node`).
A row is live when it was written within :data:`LIVE_BEATS` of its own beat and the node
did not stop; readers judge it from the engine clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

__all__ = [
    "FORGET_AFTER",
    "LIVE_BEATS",
    "MAX_OVERDUE_COUNT",
    "SESSIONS_KEPT",
    "TOUCH_SECONDS",
    "ConsoleSessions",
    "NodeRecord",
    "Nodes",
    "NodesReport",
    "Schema",
]

#: The overdue count of a :class:`NodesReport` stops at this many (a bounded read).
MAX_OVERDUE_COUNT = 10_000
#: A row not written for this many of its own beats is not live.
LIVE_BEATS = 3
#: Rows of nodes not seen for this long are deleted by the next beat of any node.
FORGET_AFTER = timedelta(hours=24)
#: Seconds between two writes of a console session's ``last_seen_at`` (at most).
TOUCH_SECONDS = 30.0
#: Console sessions ended or idle for this long are deleted at the next sign-in.
SESSIONS_KEPT = timedelta(days=1)


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


class Nodes(Protocol):
    """The nodes' liveness rows: each node writes its own, every beat."""

    async def beat(self, node: NodeRecord) -> None:
        """Write ``node``'s row (insert or replace); forget rows of nodes long unseen."""
        ...

    async def list_nodes(self) -> list[NodeRecord]:
        """Every node row, the most recently seen first."""
        ...

    async def report(self, now: datetime, overdue_before: datetime) -> NodesReport:
        """Every node row and the number of parked instances due before
        ``overdue_before`` (counted up to :data:`MAX_OVERDUE_COUNT`)."""
        ...


class ConsoleSessions(Protocol):
    """The console's sessions: opened at sign-in, seen on each request, ended at sign-out."""

    async def open(self, session_id: str, fingerprint: str, now: datetime) -> None:
        """Record a new session (and forget the ones ended or idle for a day)."""
        ...

    async def seen(
        self, session_id: str, now: datetime, idle: timedelta, lifetime: timedelta
    ) -> str | None:
        """The session's token fingerprint when it is open at ``now``, else None."""
        ...

    async def end(self, session_id: str, now: datetime) -> None:
        """End the session: no copy of its cookie opens the console again."""
        ...


class Schema(Protocol):
    """The store's schema revision, as readiness checks it."""

    async def check_at_head(self) -> None:
        """Return when the store answers and its schema is at the code's head revision.

        Raises:
            SchemaBehindHead: it is behind (code ``schema_behind_head``).
            StoreUnavailable: the store does not answer.
        """
        ...
