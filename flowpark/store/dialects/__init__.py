"""What PostgreSQL and SQLite do differently, one module each, chosen once per store.

:func:`dialect_for` picks the :class:`Dialect` of an engine when the store's context is
made (:class:`flowpark.store.base.SqlContext`); the store's roles call it and hold no branch on
the database themselves.

* :mod:`flowpark.store.dialects.postgres` — several nodes: claims with ``FOR UPDATE SKIP
  LOCKED``, one-statement writes in autocommit (a fenced commit, a signal's take and
  delivery, a load with its journal as JSON arrays), group commit (:mod:`flowpark.store.batched`),
  advisory locks for the one-node-at-a-time jobs, REPEATABLE READ reads.
* :mod:`flowpark.store.dialects.sqlite` — the embedded file: one writer at a time (this
  process's writers queue on an asyncio lock), so a read-then-write transaction sees
  nothing change under it; journal sequences are ``max + 1``.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Select

from flowpark.engine.ports.values import NewSignal, WakeClaim
from flowpark.engine.records import Ack, Claim, Delivery, NewInstance, Snapshot, StepRow

if TYPE_CHECKING:
    from flowpark.store.base import SqlContext, SqlRole
    from flowpark.store.batched import Lanes
    from flowpark.store.signals import SqlMailbox

__all__ = ["Dialect", "dialect_for"]


class Dialect(ABC):
    """The statements and transaction settings one database needs (see the module).

    The abstract methods are what every database says in its own SQL (an upsert, the
    claim, the load, the delivery); the others have the default of a database with one
    writer at a time, which a dialect overrides where it does better.

    Attributes:
        name: SQLAlchemy's dialect name (``postgresql``, ``sqlite``).
        read_options: execution options of read-only transactions.
    """

    name: str = ""
    read_options: dict[str, object] = {}

    def single_engine(self, engine: AsyncEngine) -> AsyncEngine | None:
        """The engine one-statement work runs on (autocommit), or None: a transaction."""
        return None

    def write_lock(self) -> asyncio.Lock | None:
        """The lock this process's writers queue on, or None."""
        return None

    def make_lanes(
        self, context: SqlContext, on_batch: Callable[[str, int], None] | None
    ) -> Lanes | None:
        """The group-commit lanes of a store over ``context``, or None."""
        return None

    @abstractmethod
    def insert(self, table: Table) -> Any:
        """An INSERT of ``table`` that can say ``ON CONFLICT DO NOTHING``."""

    def locked(self, query: Select[Any], *, skip_locked: bool = False, of: Any = None) -> Any:
        """``query`` locking the rows it reads until the transaction ends (skipping rows
        another transaction holds when ``skip_locked``); unchanged where one writer at a
        time holds the whole database."""
        return query

    async def try_lock(self, conn: AsyncConnection, key: int) -> bool:
        """Take the transaction-scoped lock ``key`` if free (one node at a time runs a
        job); True where one writer at a time holds the whole database."""
        return True

    def sequence_values(self) -> dict[str, Any]:
        """Extra values of a journal row's INSERT (its ``sequence``, where the database
        does not fill it)."""
        return {}

    def by_idempotency_key(self, query: Select[Any], new: NewInstance) -> Select[Any]:
        """``query`` of the instance with ``new``'s idempotency key, through the index the
        database has for it."""
        return query

    @abstractmethod
    async def claim_due(self, role: SqlRole, params: dict[str, Any]) -> list[Claim]:
        """``claim_due``'s statement (parameters ``c_owner``, ``c_now``, ``c_lease``,
        ``c_limit``, ``c_runnable``): the claims, expired leases (``taken_over``) first,
        then the earliest wake."""

    @abstractmethod
    async def load(self, role: SqlRole, instance_id: str) -> Snapshot:
        """The instance, its journal and its untaken signals from one snapshot.

        Raises:
            InstanceNotFound: no such instance.
        """

    async def commit_step(
        self, role: SqlRole, token: int, row: StepRow, lease_until: Any
    ) -> Ack | None:
        """A plain fenced commit of ``row`` as one statement, or None: the role's
        transaction does it.

        Raises:
            StaleFencingToken, InstanceNotFound, JournalConflict.
        """
        return None

    async def take_signal(
        self, role: SqlRole, token: int, signal_id: str, row: StepRow
    ) -> Ack | None:
        """A take of ``signal_id`` with its row as one statement, or None: the role's
        transaction does it.

        Raises:
            StaleFencingToken, InstanceNotFound, JournalConflict.
        """
        return None

    @abstractmethod
    async def deliver(
        self, store: SqlMailbox, signal: NewSignal, claim: WakeClaim | None
    ) -> Delivery:
        """Store ``signal`` and, with ``claim``, claim an instance parked on a wait that
        accepts it, atomically.

        Raises:
            InstanceNotFound, InstanceEnded.
            IntegrityError: the signal id exists, or a repeat of its key raced it.
        """


def dialect_for(engine: AsyncEngine) -> Dialect:
    """The :class:`Dialect` of ``engine``'s database.

    Raises:
        ValueError: a database flowpark does not support.
    """
    name = engine.dialect.name
    if name == "postgresql":
        from flowpark.store.dialects.postgres import PostgresDialect

        return PostgresDialect()
    if name == "sqlite":
        from flowpark.store.dialects.sqlite import SqliteDialect

        return SqliteDialect()
    raise ValueError(f"flowpark stores in PostgreSQL or SQLite, not {name!r}")
