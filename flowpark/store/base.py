"""Transactions and driver-error translation shared by the store's roles, and the
:class:`Dialect` they run their database's own statements through.

:class:`SqlContext` holds the engine and opens transactions; each role of the store
(:class:`SqlRole` subclasses: runs, mailbox, streams, read models) is given
the one context of its :class:`~flowpark.store.sql_store.SqlStore`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy import String, Table, literal
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import ColumnElement

from flowpark.engine.ports.values import NewSignal, WakeClaim
from flowpark.engine.records import Ack, Claim, Delivery, NewInstance, Snapshot, StepRow
from flowpark.errors import FlowparkError, JournalConflict, StoreUnavailable
from flowpark.store.db import READ_ONLY, STORE_WAIT_SECONDS
from flowpark.store.lanes import Lanes
from flowpark.store.types import UtcDateTime

__all__ = ["Dialect", "JournalConflict", "SqlContext", "SqlRole", "const", "instant"]


def instant(value: datetime) -> ColumnElement[datetime]:
    """A bound instant usable inside SQL expressions (``CASE``/``COALESCE``), typed UTC."""
    return literal(value, UtcDateTime())


def const(value: str) -> ColumnElement[str]:
    """A constant rendered inline in the SQL text, not bound.

    Used for the state names the partial indexes are defined on: a planner can only use
    ``... WHERE state = 'suspended'`` when it sees the constant (PostgreSQL's generic plans
    for prepared statements do not see bound values).
    """
    return literal(value, String(), literal_execute=True)


def _reraise(exc: StatementError) -> NoReturn:
    """The store's edge: a connection fault becomes StoreUnavailable (``store_unavailable``);
    an error raised while binding a parameter is raised as itself: a ValueError (a naive
    datetime) or a flowpark error (an id that cannot name an instance:
    :class:`~flowpark.store.types.InstanceId` raises ``InstanceNotFound``); any other driver
    error is raised unchanged."""
    if isinstance(exc, OperationalError | InterfaceError):
        raise StoreUnavailable(f"database error: {exc.orig}") from exc
    if not isinstance(exc, DBAPIError) and isinstance(exc.orig, ValueError | FlowparkError):
        raise exc.orig from exc
    raise exc


def _pool_exhausted() -> StoreUnavailable:
    return StoreUnavailable(
        f"no database connection came free within {STORE_WAIT_SECONDS} s (pool exhausted)"
    )


class SqlContext:
    """Holds the engine and opens the store's transactions (shared by the store's roles).

    Args:
        engine: an engine from :func:`flowpark.store.db.make_async_engine` (SQLite file or
            PostgreSQL, migrated to head).
        dialect: what its database does its own way
            (:func:`flowpark.store.dialects.dialect_for`).
    """

    def __init__(self, engine: AsyncEngine, dialect: Dialect) -> None:
        self._engine = engine
        self.dialect = dialect
        self._read_engine = engine.execution_options(**(self.dialect.read_options or READ_ONLY))
        # one-statement work: autocommit where the database allows it (else a transaction)
        self._single_engine = self.dialect.single_engine(engine)
        # one writer at a time: this process's writers queue here, not in the busy handler
        self._write_lock = self.dialect.write_lock()
        # group commit (flowpark.store.batched) where the dialect has it; see SqlStore
        self.lanes: Lanes | None = None

    @property
    def engine(self) -> AsyncEngine:
        """The engine this store writes through."""
        return self._engine

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        """One write transaction (``BEGIN IMMEDIATE`` on SQLite); rolled back on any error.

        Raises:
            StoreUnavailable: the database could not be reached or stayed locked
                (code ``store_unavailable``).
            ValueError: a naive datetime was passed where an instant is required.
        """
        try:
            async with AsyncExitStack() as stack:
                if self._write_lock is not None:
                    try:
                        async with asyncio.timeout(STORE_WAIT_SECONDS):
                            await stack.enter_async_context(self._write_lock)
                    except TimeoutError:
                        raise StoreUnavailable(
                            f"the database's write lock stayed busy for {STORE_WAIT_SECONDS} s"
                        ) from None
                conn = await stack.enter_async_context(self._engine.begin())
                yield conn
        except StatementError as exc:
            _reraise(exc)
        except PoolTimeout as exc:
            raise _pool_exhausted() from exc

    @asynccontextmanager
    async def _single(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """A connection for exactly one statement: autocommit on PostgreSQL (no BEGIN or
        COMMIT round trips; the statement alone is atomic), else :meth:`_write` /
        :meth:`_read`. Same errors as :meth:`_write`."""
        if self._single_engine is None:
            async with self._write() if write else self._read() as conn:
                yield conn
            return
        try:
            async with self._single_engine.connect() as conn:
                yield conn
        except StatementError as exc:
            _reraise(exc)
        except PoolTimeout as exc:
            raise _pool_exhausted() from exc

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        """One read-only transaction (one snapshot); same errors as :meth:`_write`."""
        try:
            async with self._read_engine.begin() as conn:
                yield conn
        except StatementError as exc:
            _reraise(exc)
        except PoolTimeout as exc:
            raise _pool_exhausted() from exc


class SqlRole:
    """One role of the store over a shared :class:`SqlContext` (composed, not inherited:
    the roles of one :class:`~flowpark.store.sql_store.SqlStore` share its transactions and
    group-commit lanes).

    Args:
        context: the store's context.
    """

    def __init__(self, context: SqlContext) -> None:
        self._context = context

    @property
    def _dialect(self) -> Dialect:
        """What this database does its own way (:mod:`flowpark.store.dialects`)."""
        return self._context.dialect

    @property
    def _lanes(self) -> Lanes | None:
        return self._context.lanes

    def _write(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._context._write()

    def _single(self, *, write: bool) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._context._single(write=write)

    def _read(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._context._read()


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
    async def deliver(self, role: SqlRole, signal: NewSignal, claim: WakeClaim | None) -> Delivery:
        """Store ``signal`` and, with ``claim``, claim an instance parked on a wait that
        accepts it, atomically.

        Raises:
            InstanceNotFound, InstanceEnded.
            IntegrityError: the signal id exists, or a repeat of its key raced it.
        """
