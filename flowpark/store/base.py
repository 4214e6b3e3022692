"""Transactions and driver-error translation shared by the store's roles.

:class:`SqlContext` holds the engine and opens transactions; each role of the store
(:class:`SqlRole` subclasses: runs, mailbox, streams, read models) is given
the one context of its :class:`~flowpark.store.sql_store.SqlStore`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, NoReturn

from sqlalchemy import String, literal
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from flowpark.errors import FlowparkError, JournalConflict, StoreUnavailable
from flowpark.store.db import READ_ONLY, STORE_WAIT_SECONDS

if TYPE_CHECKING:
    from flowpark.store.batched import Lanes
    from flowpark.store.dialects import Dialect
from flowpark.store.types import UtcDateTime

__all__ = ["JournalConflict", "SqlContext", "SqlPart", "SqlRole", "const", "instant"]


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
    """

    def __init__(self, engine: AsyncEngine) -> None:
        from flowpark.store.dialects import dialect_for  # the dialects build on the roles

        self._engine = engine
        self.dialect: Dialect = dialect_for(engine)
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


class SqlPart(SqlRole):
    """A store part that stands alone, outside :class:`~flowpark.store.sql_store.SqlStore`'s
    roles, with a context of its own over ``engine`` (e.g. the outbox deliveries).

    Args:
        engine: an engine from :func:`flowpark.store.db.make_async_engine`, migrated to head.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(SqlContext(engine))
