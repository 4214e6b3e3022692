"""``SqlJournal``: the SQL implementation of the engine's storage roles
(:class:`app.engine.roles.Journal`).

The roles are composed, each an object of its own over one shared context (engine,
transactions, PostgreSQL group-commit lanes): claims and leases (:mod:`app.store.claims`),
the lease holder's journal (:mod:`app.store.writes`), the signal mailbox
(:mod:`app.store.signals`), streams (:mod:`app.store.streams`) and the read model
(:mod:`app.store.reads`). Every SQL statement flowpark runs lives in ``app.store``.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.actions import SqlOperatorActions
from app.store.base import SqlContext
from app.store.batched import Lanes, PgBatches
from app.store.claims import SqlClaims
from app.store.listing import SqlOperatorReads
from app.store.overview import SqlOverviewReads
from app.store.reads import SqlReads
from app.store.signals import SqlMailbox
from app.store.streams import SqlStreams
from app.store.writes import SqlJournalWrites

__all__ = ["SqlJournal", "SqlReadModel"]


class SqlReadModel(SqlReads, SqlOperatorReads, SqlOperatorActions, SqlOverviewReads):
    """The read model: what the HTTP API (:class:`app.engine.roles.ReadModel`), the
    operator views (:class:`app.store.read_model.OperatorReads`, with the log of operator
    actions) and the console overview read. One role; its queries are grouped by module."""


class SqlJournal:
    """The store: the five roles of :class:`app.engine.roles.Journal` over one database.

    Args:
        engine: an engine from :func:`app.store.db.make_async_engine`, migrated to head.
        on_batch: told ``(lane, size)`` for each group-commit batch on PostgreSQL (lanes
            ``create``, ``commit``, ``park``, ``finish``); the metrics count them.

    Attributes:
        claims: claims and leases (:class:`~app.store.claims.SqlClaims`).
        writes: the lease holder's journal (:class:`~app.store.writes.SqlJournalWrites`).
        mailbox: signals (:class:`~app.store.signals.SqlMailbox`).
        streams: progress messages (:class:`~app.store.streams.SqlStreams`).
        reads: the read model of the API and the operator views (:class:`SqlReadModel`).

    On PostgreSQL, concurrent starts, journal commits, parks and completions are grouped
    into one statement per batch (:mod:`app.store.batched`); each keeps its own fence.
    """

    def __init__(
        self, engine: AsyncEngine, *, on_batch: Callable[[str, int], None] | None = None
    ) -> None:
        context = SqlContext(engine)
        if context.is_postgresql:
            context.lanes = PgBatches(context).make_lanes(on_batch)
        self._context = context
        self.claims = SqlClaims(context)
        self.writes = SqlJournalWrites(context)
        self.mailbox = SqlMailbox(context)
        self.streams = SqlStreams(context)
        self.reads = SqlReadModel(context)

    @property
    def engine(self) -> AsyncEngine:
        """The engine this store writes through."""
        return self._context.engine

    @property
    def is_postgresql(self) -> bool:
        """Whether the store is PostgreSQL (claims use ``FOR UPDATE SKIP LOCKED``)."""
        return self._context.is_postgresql

    @property
    def lanes(self) -> Lanes | None:
        """The PostgreSQL group-commit lanes (None on SQLite)."""
        return self._context.lanes
