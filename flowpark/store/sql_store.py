"""``SqlStore``: the SQL implementation of the engine's ports
(:class:`flowpark.engine.ports.Store`).

The ports are composed, each an object of its own over one shared context (engine,
transactions, PostgreSQL group-commit lanes): a run's claims, commits and lease, with
starts and the sweep's claims (:mod:`flowpark.store.runs`), the signal mailbox
(:mod:`flowpark.store.signals`), streams (:mod:`flowpark.store.streams`) and the read models
(:mod:`flowpark.store.reads`, :mod:`flowpark.store.listing`,
:mod:`flowpark.store.overview`). Every SQL
statement flowpark runs lives in ``flowpark.store``.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.engine.ports import Store
from flowpark.store.actions import SqlOperatorActions
from flowpark.store.correlations import SqlCorrelations
from flowpark.store.lanes import Lanes
from flowpark.store.listing import SqlOperatorReads
from flowpark.store.memory import MemoryStore
from flowpark.store.overview import SqlOverviewReads
from flowpark.store.parts import context_for
from flowpark.store.providers import SqlProviderLimits
from flowpark.store.reads import SqlReads
from flowpark.store.reviews import SqlReviews
from flowpark.store.runs import SqlRuns
from flowpark.store.signals import SqlMailbox
from flowpark.store.streams import SqlStreams

__all__ = ["SqlStore", "SqlReadModel"]


class SqlReadModel(SqlReads, SqlOperatorReads, SqlOperatorActions, SqlOverviewReads):
    """The read models: what the HTTP API (:class:`flowpark.engine.ports.ReadModel`), the
    operator views (:class:`flowpark.engine.ports.OperatorReads`, with the log of operator
    actions) and the console overview (:class:`flowpark.engine.ports.OverviewReads`) read. One
    object; its queries are grouped by module."""


class SqlStore:
    """The store: the ports of :class:`flowpark.engine.ports.Store` over one database.

    Args:
        engine: an engine from :func:`flowpark.store.db.make_async_engine`, migrated to head.
        on_batch: told ``(lane, size)`` for each group-commit batch on PostgreSQL (lanes
            ``create``, ``commit``, ``park``, ``finish``); the metrics count them.

    Attributes:
        runs: what a run needs (:class:`~flowpark.store.runs.SqlRuns`).
        intake: starts, the sweep's claims, cancel requests (the same object as ``runs``).
        mailbox: signals (:class:`~flowpark.store.signals.SqlMailbox`).
        streams: progress messages (:class:`~flowpark.store.streams.SqlStreams`).
        reads: the HTTP API's reads (:class:`SqlReadModel`).
        operator / overview: the operator's queries and the console overview's counts
            (the same object as ``reads``).
        correlations: which live instance holds a provider's id
            (:class:`~flowpark.store.correlations.SqlCorrelations`).
        providers: the providers' shared limits
            (:class:`~flowpark.store.providers.SqlProviderLimits`).
        reviews: the review queue (:class:`~flowpark.store.reviews.SqlReviews`).

    On PostgreSQL, concurrent starts, journal commits, parks and completions are grouped
    into one statement per batch (:mod:`flowpark.store.batched`); each keeps its own fence.
    """

    def __init__(
        self, engine: AsyncEngine, *, on_batch: Callable[[str, int], None] | None = None
    ) -> None:
        context = context_for(engine)
        context.lanes = context.dialect.make_lanes(context, on_batch)
        self._context = context
        self.mailbox = SqlMailbox(context)
        self.runs = SqlRuns(context, self.mailbox)
        self.intake = self.runs
        self.streams = SqlStreams(context)
        self.reads = SqlReadModel(context)
        self.operator = self.reads
        self.overview = self.reads
        self.correlations = SqlCorrelations(context)
        self.providers = SqlProviderLimits(context)
        self.reviews = SqlReviews(context)

    @property
    def engine(self) -> AsyncEngine:
        """The engine this store writes through."""
        return self._context.engine

    @property
    def is_postgresql(self) -> bool:
        """Whether the store is PostgreSQL (claims use ``FOR UPDATE SKIP LOCKED``)."""
        return self._context.dialect.name == "postgresql"

    def scratch(self) -> Store:
        """A new, empty :class:`~flowpark.store.memory.MemoryStore` (an ephemeral run's store)."""
        return MemoryStore()

    @property
    def lanes(self) -> Lanes | None:
        """The PostgreSQL group-commit lanes (None on SQLite)."""
        return self._context.lanes
