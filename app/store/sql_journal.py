"""``SqlJournal``: the SQL implementation of the engine's ports
(:class:`app.engine.ports.Journal`).

The ports are composed, each an object of its own over one shared context (engine,
transactions, PostgreSQL group-commit lanes): a run's claims, commits and lease, with
starts and the sweep's claims (:mod:`app.store.runs`), the signal mailbox
(:mod:`app.store.signals`), streams (:mod:`app.store.streams`) and the read models
(:mod:`app.store.reads`, :mod:`app.store.listing`, :mod:`app.store.overview`). Every SQL
statement flowpark runs lives in ``app.store``.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from app.engine.ports import Journal
from app.store.actions import SqlOperatorActions
from app.store.base import SqlContext
from app.store.batched import Lanes
from app.store.listing import SqlOperatorReads
from app.store.memory import MemoryStore
from app.store.overview import SqlOverviewReads
from app.store.reads import SqlReads
from app.store.runs import SqlRuns
from app.store.signals import SqlMailbox
from app.store.streams import SqlStreams

__all__ = ["SqlJournal", "SqlReadModel"]


class SqlReadModel(SqlReads, SqlOperatorReads, SqlOperatorActions, SqlOverviewReads):
    """The read models: what the HTTP API (:class:`app.engine.ports.ReadModel`), the
    operator views (:class:`app.engine.ports.OperatorReads`, with the log of operator
    actions) and the console overview (:class:`app.engine.ports.OverviewReads`) read. One
    object; its queries are grouped by module."""


class SqlJournal:
    """The store: the ports of :class:`app.engine.ports.Journal` over one database.

    Args:
        engine: an engine from :func:`app.store.db.make_async_engine`, migrated to head.
        on_batch: told ``(lane, size)`` for each group-commit batch on PostgreSQL (lanes
            ``create``, ``commit``, ``park``, ``finish``); the metrics count them.

    Attributes:
        runs: what a run needs (:class:`~app.store.runs.SqlRuns`).
        intake: starts, the sweep's claims, cancel requests (the same object as ``runs``).
        mailbox: signals (:class:`~app.store.signals.SqlMailbox`).
        streams: progress messages (:class:`~app.store.streams.SqlStreams`).
        reads: the HTTP API's reads (:class:`SqlReadModel`).
        operator / overview: the operator's queries and the console overview's counts
            (the same object as ``reads``).

    On PostgreSQL, concurrent starts, journal commits, parks and completions are grouped
    into one statement per batch (:mod:`app.store.batched`); each keeps its own fence.
    """

    def __init__(
        self, engine: AsyncEngine, *, on_batch: Callable[[str, int], None] | None = None
    ) -> None:
        context = SqlContext(engine)
        context.lanes = context.dialect.make_lanes(context, on_batch)
        self._context = context
        self.mailbox = SqlMailbox(context)
        self.runs = SqlRuns(context, self.mailbox)
        self.intake = self.runs
        self.streams = SqlStreams(context)
        self.reads = SqlReadModel(context)
        self.operator = self.reads
        self.overview = self.reads

    @property
    def engine(self) -> AsyncEngine:
        """The engine this store writes through."""
        return self._context.engine

    @property
    def is_postgresql(self) -> bool:
        """Whether the store is PostgreSQL (claims use ``FOR UPDATE SKIP LOCKED``)."""
        return self._context.dialect.name == "postgresql"

    def scratch(self) -> Journal:
        """A new, empty :class:`~app.store.memory.MemoryStore` (an ephemeral run's store)."""
        return MemoryStore()

    @property
    def lanes(self) -> Lanes | None:
        """The PostgreSQL group-commit lanes (None on SQLite)."""
        return self._context.lanes
