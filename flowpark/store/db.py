"""Database engines: URL normalisation and per-backend connection setup.

flowpark accepts plain URLs (``sqlite:///flowpark.db``, ``postgresql://user@host/db``) and
picks the driver itself: aiosqlite or psycopg 3 for the service, pysqlite or psycopg 3 (sync)
for Alembic.

SQLite is put in WAL mode, and SQLAlchemy takes over transaction control from the driver so
that every write transaction starts with ``BEGIN IMMEDIATE``: overlapping writers queue on
SQLite's busy handler (``busy_timeout``) instead of failing with "database is locked" when a
deferred transaction tries to upgrade its lock. Read-only transactions (connections carrying
:data:`READ_ONLY`) start with a plain ``BEGIN``.

PostgreSQL sessions use the UTC time zone.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "READ_ONLY",
    "READ_ONLY_OPTION",
    "STORE_WAIT_SECONDS",
    "async_url",
    "is_sqlite",
    "make_async_engine",
    "sync_url",
]

#: Execution option marking a connection's transactions read-only (plain ``BEGIN`` on SQLite).
READ_ONLY_OPTION = "flowpark_read_only"
#: Execution options for read-only work: ``engine.execution_options(**READ_ONLY)``.
READ_ONLY: dict[str, Any] = {READ_ONLY_OPTION: True}

#: The longest a store operation waits for the database before it fails with
#: ``store_unavailable`` (a 503 on the API): for a pooled connection (PostgreSQL, all in
#: use), for SQLite's write lock (held by another process), for this process's SQLite
#: writer queue.
STORE_WAIT_SECONDS = 10.0
#: The longest a new PostgreSQL connection takes to be made (an unreachable server).
CONNECT_TIMEOUT_SECONDS = 5

SQLITE_BUSY_TIMEOUT_MS = int(STORE_WAIT_SECONDS * 1000)


def _backend(url: URL) -> str:
    name = url.get_backend_name()
    if name in ("postgres", "postgresql"):
        return "postgresql"
    if name == "sqlite":
        return "sqlite"
    raise ValueError(f"unsupported database URL {url.render_as_string(hide_password=True)!r}")


def _normalise(url: str | URL, *, async_driver: bool) -> URL:
    parsed = make_url(url) if isinstance(url, str) else url
    backend = _backend(parsed)
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg")
    return parsed.set(drivername="sqlite+aiosqlite" if async_driver else "sqlite")


def async_url(url: str | URL) -> str:
    """Return ``url`` with the async driver flowpark uses.

    Args:
        url: ``sqlite:///path.db``, ``postgresql://...`` or ``postgres://...`` (any driver
            suffix is replaced).

    Returns:
        ``sqlite+aiosqlite:///...`` or ``postgresql+psycopg://...`` (password kept).

    Raises:
        ValueError: the URL names another database.
    """
    return _normalise(url, async_driver=True).render_as_string(hide_password=False)


def sync_url(url: str | URL) -> str:
    """Return ``url`` with the synchronous driver Alembic uses.

    Args:
        url: any URL :func:`make_async_engine` accepts (async driver suffixes included).

    Returns:
        ``sqlite:///...`` or ``postgresql+psycopg://...`` (password kept).

    Raises:
        ValueError: the URL names another database.
    """
    return _normalise(url, async_driver=False).render_as_string(hide_password=False)


def is_sqlite(url: str | URL) -> bool:
    """Whether ``url`` names a SQLite database."""
    return _backend(make_url(url) if isinstance(url, str) else url) == "sqlite"


def _setup_sqlite(engine: AsyncEngine) -> None:
    sync_engine = engine.sync_engine

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN away from the driver: we emit it ourselves in "begin" below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READ_ONLY_OPTION):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def _setup_postgresql(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SET TIME ZONE 'UTC'")
        finally:
            cursor.close()
        dbapi_connection.autocommit = autocommit


def make_async_engine(url: str | URL, *, pool_size: int = 20, **kwargs: Any) -> AsyncEngine:
    """Create the service's async engine for ``url``.

    Args:
        url: ``sqlite:///path.db``, ``postgresql://...`` or ``postgres://...``; the driver is
            chosen here (aiosqlite, psycopg 3).
        pool_size: connections at most, each kept open once opened (no overflow: a
            connection opened for a burst and closed after it costs PostgreSQL a backend
            start, and each new backend begins its inserts on a fresh heap page, leaving
            the previous backend's page partly filled; 384 connections were opened during
            3,000 parked starts with 10 + 10 overflow, and the heap grew ~40% over its rows).
        **kwargs: passed to :func:`sqlalchemy.ext.asyncio.create_async_engine`.

    Returns:
        An engine whose SQLite connections run in WAL mode with ``BEGIN IMMEDIATE`` write
        transactions and a busy timeout of :data:`STORE_WAIT_SECONDS`, whose PostgreSQL
        sessions use UTC and connect within :data:`CONNECT_TIMEOUT_SECONDS`, and whose pool
        gives a connection within :data:`STORE_WAIT_SECONDS` or raises.

    Raises:
        ValueError: the URL names another database, or an in-memory SQLite database (each
            connection would get its own empty database).
    """
    target = _normalise(url, async_driver=True)
    if _backend(target) == "sqlite" and target.database in (None, "", ":memory:"):
        raise ValueError("flowpark needs a SQLite file, not an in-memory database")
    kwargs.setdefault("max_overflow", 0)
    # No pre-ping: it costs a round trip on every checkout (a third of a small
    # transaction's time). A connection the server dropped fails its statement with a
    # disconnect error (StoreUnavailable), SQLAlchemy invalidates the pool, and the next
    # checkout reconnects; pool_recycle retires connections before server-side timeouts.
    kwargs.setdefault("pool_pre_ping", False)
    kwargs.setdefault("pool_timeout", STORE_WAIT_SECONDS)
    if _backend(target) == "postgresql":
        kwargs.setdefault("pool_recycle", 1800)
        connect_args = dict(kwargs.pop("connect_args", {}))
        connect_args.setdefault("connect_timeout", CONNECT_TIMEOUT_SECONDS)
        kwargs["connect_args"] = connect_args
    engine = create_async_engine(target, pool_size=pool_size, **kwargs)
    if _backend(target) == "sqlite":
        _setup_sqlite(engine)
    else:
        _setup_postgresql(engine)
    return engine
