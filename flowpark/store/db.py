"""Database engines: URL normalisation and per-backend connection setup.

flowpark accepts plain URLs (``sqlite:///flowpark.db``, ``postgresql://user@host/db``) and
picks the driver itself: aiosqlite or psycopg 3 for the service, pysqlite or psycopg 3 (sync)
for Alembic.

SQLite is put in WAL mode, and SQLAlchemy takes over transaction control from the driver so
that every write transaction starts with ``BEGIN IMMEDIATE``: overlapping writers queue on
SQLite's busy handler (``busy_timeout``) instead of failing with "database is locked" when a
deferred transaction tries to upgrade its lock. Read-only transactions (connections carrying
:data:`READ_ONLY`) start with a plain ``BEGIN``.

PostgreSQL sessions use the UTC time zone. With a schema of flowpark's own (the setting
``database_schema``), every PostgreSQL connection starts with ``search_path`` set to it (libpq's
``options``), so the tables (defined without a schema) and the store's raw SQL resolve
there; SQLite has no schemas and refuses one. A PostgreSQL URL may name several hosts, as libpq
does (``postgresql://user@h1:5432,h2:5432/db``), or as SQLAlchemy does
(``?host=h1:5432&host=h2:5432`` or ``?host=h1,h2&port=5432,5432``); with several hosts and no
``target_session_attrs`` of its own, ``target_session_attrs=read-write`` is added, so a new
connection goes to the host that takes writes (the primary after a failover). A statement
refused because its connection is on a read-only server (a standby, SQLSTATE 25006) drops
that connection and every other one the pool holds, like a lost connection: the error is an
outage (``store_unavailable``), and the next checkout connects anew.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, pool
from sqlalchemy.engine import URL, Connection, Engine, ExceptionContext, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

__all__ = [
    "CONNECT_ARGS",
    "CONNECT_TIMEOUT_SECONDS",
    "READ_ONLY",
    "READ_ONLY_OPTION",
    "STANDBY_SQLSTATES",
    "STORE_WAIT_SECONDS",
    "async_url",
    "check_schema_name",
    "is_sqlite",
    "make_async_engine",
    "make_sync_engine",
    "parse_url",
    "schema_connect_args",
    "schema_translate_map",
    "sqlite_folder_missing",
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
#: The longest a new PostgreSQL connection takes to be made (an unreachable server), per
#: host of the URL's list.
CONNECT_TIMEOUT_SECONDS = 5
#: libpq's connection parameters flowpark sets unless the URL's query sets them: the
#: connect timeout above, and TCP settings that notice a server that vanished without
#: closing its connections (a lost machine, a partition) in tens of seconds instead of the
#: operating system's hours: keepalive probes after 10 s idle, every 5 s, 3 unanswered end
#: the connection; data unacknowledged for 15 s ends it (``tcp_user_timeout``, ms).
CONNECT_ARGS: dict[str, int] = {
    "connect_timeout": CONNECT_TIMEOUT_SECONDS,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 15_000,
}

SQLITE_BUSY_TIMEOUT_MS = int(STORE_WAIT_SECONDS * 1000)

#: A schema name flowpark takes: a plain (unquoted) SQL identifier PostgreSQL keeps as written.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: SQLSTATEs saying the connection is on a server that takes no writes (now): a standby,
#: or a primary being demoted. ``25006`` read_only_sql_transaction ("cannot execute INSERT
#: in a read-only transaction"). The connection is dropped as if lost (see the module).
STANDBY_SQLSTATES = frozenset({"25006"})

#: ``scheme://[user[:password]@]h1[:p1],h2[:p2]...[/db][?query]``: libpq's multi-host form
#: (user and password as SQLAlchemy's own URL pattern reads them).
_MULTIHOST = re.compile(
    r"^(?P<head>[\w+]+://(?:[^:/]*(?::[^@]*)?@)?)(?P<hosts>[^/?]*,[^/?]*)(?P<tail>[/?].*)?$",
    re.DOTALL,
)
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<name>[^:\[\]]*))(?::(?P<port>\d*))?$")


def _split_hosts(hosts: str) -> tuple[list[str], list[str]]:
    names: list[str] = []
    ports: list[str] = []
    for token in hosts.split(","):
        found = _HOST_PORT.match(token.strip())
        if found is None or not (found["v6"] or found["name"]):
            raise ValueError(f"cannot read host {token!r} of the host list {hosts!r}")
        names.append(found["v6"] or found["name"])
        ports.append(found["port"] or "")
    return names, ports


def _several_hosts(url: URL) -> bool:
    given = url.query.get("host")
    if isinstance(given, tuple):
        return len(given) > 1
    return given is not None and "," in given


def parse_url(url: str | URL) -> URL:
    """Parse a database URL, libpq's multi-host form included.

    Args:
        url: ``sqlite:///path.db``, ``postgresql://user@host:5432/db``, or several hosts:
            ``postgresql://user@h1:5432,h2:5433/db`` (libpq's form),
            ``postgresql://user@/db?host=h1:5432&host=h2:5433`` or
            ``postgresql://user@/db?host=h1,h2&port=5432,5433`` (SQLAlchemy's forms).

    Returns:
        The URL; libpq's host list moved into ``host=h1,h2&port=p1,p2`` query parameters
        (SQLAlchemy's parser reads one host only); with several hosts,
        ``target_session_attrs=read-write`` unless the URL sets it.

    Raises:
        ValueError: the host list has an entry that is not ``host``, ``host:port`` or
            ``[v6]:port``, or names hosts both before the path and in ``host=``; or a
            SQLite URL with a host (``sqlite://flowpark.db``, two slashes: SQLite has no
            host, its path follows a third slash).
        sqlalchemy.exc.ArgumentError: not a URL at all.
    """
    if isinstance(url, str):
        several = _MULTIHOST.match(url)
        if several is None:
            parsed = make_url(url)
        else:
            parsed = make_url(several["head"] + (several["tail"] or "/"))
            if "host" in parsed.query or "port" in parsed.query:
                raise ValueError("hosts named both before the path and in host= or port=")
            names, ports = _split_hosts(several["hosts"])
            query = {"host": ",".join(names)}
            if any(ports):
                query["port"] = ",".join(ports)
            parsed = parsed.update_query_dict(query)
    else:
        parsed = url
    if parsed.get_backend_name() == "sqlite" and (parsed.host or parsed.port):
        raise ValueError(
            f"{_shown(url)} is a malformed SQLite URL (two slashes name a host, and SQLite "
            f"has none): {SQLITE_URL_FORMS}"
        )
    if _several_hosts(parsed) and "target_session_attrs" not in parsed.query:
        parsed = parsed.update_query_dict({"target_session_attrs": "read-write"})
    return parsed


#: What a SQLite URL looks like, for the message that refuses a malformed one.
SQLITE_URL_FORMS = (
    "write sqlite:///relative.db (three slashes: a path from the working directory) or "
    "sqlite:////abs/path.db (four slashes: an absolute path)"
)


def _shown(url: str | URL) -> str:
    """``url`` as a message may show it (no password)."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def sqlite_folder_missing(url: str | URL) -> str | None:
    """The folder a SQLite file URL names that does not exist (SQLite would say only
    "unable to open database file"), else None (also for any other database).

    Args:
        url: a database URL (:func:`parse_url` reads it).

    Raises:
        ValueError: as :func:`parse_url`.
        sqlalchemy.exc.ArgumentError: not a URL at all.
    """
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    folder = Path(parsed.database).parent
    return None if folder.is_dir() else str(folder)


def _backend(url: URL) -> str:
    name = url.get_backend_name()
    if name in ("postgres", "postgresql"):
        return "postgresql"
    if name == "sqlite":
        return "sqlite"
    raise ValueError(f"unsupported database URL {url.render_as_string(hide_password=True)!r}")


def _normalise(url: str | URL, *, async_driver: bool) -> URL:
    parsed = parse_url(url)
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
    return _backend(parse_url(url)) == "sqlite"


def check_schema_name(schema: str) -> str:
    """Check a PostgreSQL schema name for flowpark's tables.

    Args:
        schema: the name (``flowpark``).

    Returns:
        ``schema`` unchanged.

    Raises:
        ValueError: it is not a plain SQL identifier (lowercase letters, digits and
            underscores, starting with a letter or an underscore, at most 63 characters) or
            it begins with ``pg_`` (PostgreSQL's own); the message does not repeat it.
    """
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(
            "a schema name is a plain SQL identifier: lowercase letters, digits and "
            "underscores, starting with a letter or an underscore, at most 63 characters"
        )
    if schema.startswith("pg_"):
        raise ValueError("a schema name may not begin with pg_ (PostgreSQL's own schemas)")
    return schema


def schema_translate_map(schema: str | None) -> dict[str | None, str] | None:
    """The ``schema_translate_map`` that puts flowpark's tables in ``schema``.

    flowpark's tables are defined without a schema; its own engine reaches them through
    the connection's ``search_path`` (:func:`make_async_engine`). A statement built from
    those tables on another connection (an application's, inside its own transaction)
    reaches them with ``connection.execution_options(schema_translate_map=...)`` (or the
    same execution option on the statement). It translates SQLAlchemy Core statements,
    not raw SQL text.

    Args:
        schema: the setting ``database_schema``; None: the connection's default schema.

    Returns:
        ``{None: schema}``, or None when ``schema`` is None (nothing to translate).

    Raises:
        ValueError: ``schema`` is no name :func:`check_schema_name` takes.
    """
    if schema is None:
        return None
    return {None: check_schema_name(schema)}


def schema_connect_args(url: str | URL, schema: str | None) -> dict[str, Any]:
    """The connection arguments that put a PostgreSQL connection in ``schema``.

    Args:
        url: the database's URL (its own ``options`` query parameter, if any, is kept).
        schema: the schema; None: none needed.

    Returns:
        ``{"options": "-c search_path=<schema>"}`` (after the URL's own ``options``), or
        ``{}`` when ``schema`` is None.

    Raises:
        ValueError: ``schema`` is no name :func:`check_schema_name` takes, or the URL names
            a SQLite database (SQLite has no schemas) or another database.
    """
    if schema is None:
        return {}
    check_schema_name(schema)
    parsed = parse_url(url)
    if _backend(parsed) != "postgresql":
        raise ValueError(
            "SQLite has no schemas: a database schema applies to PostgreSQL only (on SQLite "
            "flowpark's tables are told apart by their flow_ names)"
        )
    given = parsed.query.get("options")
    own = " ".join(given) if isinstance(given, tuple) else given
    option = f"-c search_path={schema}"
    return {"options": f"{own} {option}" if own else option}


def make_sync_engine(url: str | URL, *, schema: str | None = None) -> Engine:
    """Create the synchronous engine migrations run on (no pool).

    Args:
        url: any URL :func:`make_async_engine` accepts.
        schema: the PostgreSQL schema of flowpark's tables (see
            :func:`schema_connect_args`); None: the connection's default schema.

    Returns:
        An engine whose PostgreSQL connections use ``schema`` and whose SQLite
        transactions are SQLite's own (``BEGIN IMMEDIATE``, or ``BEGIN`` with
        :data:`READ_ONLY`, issued by SQLAlchemy rather than by the driver, which would
        leave DDL outside them): a migration run inside one transaction is whole or
        nothing on both databases.

    Raises:
        ValueError: as :func:`sync_url` and :func:`schema_connect_args`.
    """
    target = _normalise(url, async_driver=False)
    engine = create_engine(
        target, poolclass=pool.NullPool, connect_args=schema_connect_args(target, schema)
    )
    if _backend(target) == "sqlite":

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            read_only = conn.get_execution_options().get(READ_ONLY_OPTION)
            conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


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


def _read_only_is_lost(context: ExceptionContext) -> OperationalError | None:
    """A statement refused by a read-only server: drop its connection (and the pool's
    others, opened to the same server) as a lost one, and raise it as an outage."""
    original = context.original_exception
    if getattr(original, "sqlstate", None) not in STANDBY_SQLSTATES:
        return None
    context.is_disconnect = True
    context.invalidate_pool_on_disconnect = True
    return OperationalError(
        context.statement,
        context.parameters,
        original,
        hide_parameters=True,
        connection_invalidated=True,
    )


def _setup_postgresql(engine: AsyncEngine) -> None:
    event.listen(engine.sync_engine, "handle_error", _read_only_is_lost)

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


def make_async_engine(
    url: str | URL, *, pool_size: int = 20, schema: str | None = None, **kwargs: Any
) -> AsyncEngine:
    """Create the service's async engine for ``url``.

    Args:
        url: ``sqlite:///path.db``, ``postgresql://...`` or ``postgres://...`` (several
            hosts in any form :func:`parse_url` reads); the driver is chosen here
            (aiosqlite, psycopg 3).
        pool_size: connections at most, each kept open once opened (no overflow: a
            connection opened for a burst and closed after it costs PostgreSQL a backend
            start, and each new backend begins its inserts on a fresh heap page, leaving
            the previous backend's page partly filled; 384 connections were opened during
            3,000 parked starts with 10 + 10 overflow, and the heap grew ~40% over its rows).
        schema: PostgreSQL only: the schema of flowpark's tables (the setting
            ``database_schema``), which every connection's ``search_path`` names; None:
            the connection's default schema.
        **kwargs: passed to :func:`sqlalchemy.ext.asyncio.create_async_engine`.

    Returns:
        An engine whose SQLite connections run in WAL mode with ``BEGIN IMMEDIATE`` write
        transactions and a busy timeout of :data:`STORE_WAIT_SECONDS`, whose PostgreSQL
        sessions use UTC, connect within :data:`CONNECT_TIMEOUT_SECONDS` (per host) and
        drop a connection to a vanished server in seconds (:data:`CONNECT_ARGS`, each
        unless the URL's query sets it),
        whose PostgreSQL connections refused as read-only (a standby) are dropped and raised
        as :class:`sqlalchemy.exc.OperationalError` (an outage, ``store_unavailable`` at the
        store's edge), and whose pool gives a connection within :data:`STORE_WAIT_SECONDS`
        or raises.

    Raises:
        ValueError: the URL names another database, or an in-memory SQLite database (each
            connection would get its own empty database), or a host list it cannot read;
            or ``schema`` is given for SQLite or is no name :func:`check_schema_name` takes.
    """
    target = _normalise(url, async_driver=True)
    in_schema = schema_connect_args(target, schema)
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
        for name, value in CONNECT_ARGS.items():
            if name not in target.query:  # the URL's own setting wins
                connect_args.setdefault(name, value)
        if in_schema and connect_args.get("options"):  # the caller's own options first
            in_schema = {"options": f"{connect_args['options']} {in_schema['options']}"}
        connect_args.update(in_schema)
        kwargs["connect_args"] = connect_args
    engine = create_async_engine(target, pool_size=pool_size, **kwargs)
    if _backend(target) == "sqlite":
        _setup_sqlite(engine)
    else:
        _setup_postgresql(engine)
    return engine
