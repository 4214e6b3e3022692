"""A start written in the caller's own transaction: the outbox pattern, built in.

A host application's handler saves its own rows and starts a flow in one SQLAlchemy
transaction of its own (an ``AsyncSession``, ``Session``, ``AsyncConnection`` or
``Connection`` on flowpark's database). The start is **one INSERT** of the instance row
(``ON CONFLICT DO NOTHING``: a conflict never aborts the caller's transaction on
PostgreSQL), with the deadlines a start stores carried inside that row; only a repeat of an
idempotency key or an instance key in use reads what holds the key (one more statement).
Nothing is written after the caller's commit: the row is born leased to nobody in
particular (its lease already expired), so the node that wrote it claims it once the
caller committed, and any node's sweep does if that node is gone.

The statements run on the caller's connection, compiled by its dialect; with a PostgreSQL
schema of flowpark's own they name it through ``schema_translate_map`` (an option of the
statement, never of the caller's connection).

This module holds the SQL; :mod:`flowpark.embedding.transaction` drives it.
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import Select, insert, select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from flowpark.engine.records import InstanceRecord, NewInstance
from flowpark.errors import IdempotencyKeyReused, InstanceKeyInUse, JournalConflict
from flowpark.store.base import Dialect, const
from flowpark.store.carried import start_step_rows
from flowpark.store.dialects.postgres import PostgresDialect
from flowpark.store.dialects.sqlite import SqliteDialect
from flowpark.store.mapping import (
    INSTANCE,
    STEP,
    instance_from_new,
    instance_from_row,
    instance_values,
    step_values,
)
from flowpark.store.tables import ACTIVE_STATES

__all__ = [
    "conflict_queries",
    "insert_in",
    "insert_in_sync",
    "resolve_conflict",
    "same_database",
]

_LOCAL_HOSTS = frozenset({None, "", "localhost", "127.0.0.1", "::1"})


def _dialect(name: str) -> Dialect:
    if name == "postgresql":
        return PostgresDialect()
    if name == "sqlite":
        return SqliteDialect()
    raise ValueError(f"flowpark stores in PostgreSQL or SQLite, not {name!r}")


def same_database(ours: URL, theirs: URL) -> bool:
    """Whether two URLs name the same database: the same backend and, for PostgreSQL, the
    same host (the loopback names alike), port and database; for SQLite the same file
    (resolved: symbolic links and relative paths compared as the files they reach; an
    in-memory database is never the same as another connection's).

    Args:
        ours: flowpark's database URL (any driver).
        theirs: the URL of the caller's connection.
    """
    if ours.get_backend_name() != theirs.get_backend_name():
        return False
    if ours.get_backend_name() == "sqlite":
        if (
            not ours.database
            or not theirs.database
            or ":memory:" in (ours.database, theirs.database)
        ):
            return False
        return os.path.realpath(ours.database) == os.path.realpath(theirs.database)
    ours_host = None if ours.host in _LOCAL_HOSTS else ours.host
    theirs_host = None if theirs.host in _LOCAL_HOSTS else theirs.host
    return (
        ours_host == theirs_host
        and (ours.port or 5432) == (theirs.port or 5432)
        and (ours.database or "") == (theirs.database or "")
    )


def _options(schema_map: dict[str | None, str] | None) -> dict[str, Any]:
    """The statements' options: flowpark's schema, or none, always stated, so a
    ``schema_translate_map`` of the caller's connection (a tenant's schema ...) never sends
    flowpark's rows into tables flowpark does not read."""
    return {"schema_translate_map": schema_map or None}


def _insert(new: NewInstance, dialect: Dialect) -> Any:
    return (
        dialect.insert(INSTANCE)
        .values(instance_values(new))
        .on_conflict_do_nothing()
        .returning(INSTANCE.c.id)
    )


def _step_inserts(new: NewInstance, dialect: Dialect) -> list[Any]:
    """The journal rows the instance row cannot carry (rare: a deadline the compact form
    cannot store exactly), each an INSERT of its own."""
    return [
        insert(STEP).values({**step_values(row), **dialect.sequence_values()})
        for row in start_step_rows(new)
    ]


def conflict_queries(dialect: Dialect, new: NewInstance) -> tuple[Any, Select[Any] | None]:
    """The reads that tell what holds a start's keys once its INSERT did nothing.

    Returns:
        ``(holder, first)``: the active instance holding ``new.instance_key`` (None when the
        start has none) and the instance ``new.idempotency_key`` made (None when none). The
        holder is read first: a start writes both keys in one transaction, so under READ
        COMMITTED a holder seen first guarantees its idempotency row is seen after.
    """
    holder = None
    if new.instance_key is not None:
        holder = select(INSTANCE.c.id).where(
            INSTANCE.c.flow_name == new.flow_name,
            INSTANCE.c.instance_key == new.instance_key,
            INSTANCE.c.state.in_([const(s) for s in ACTIVE_STATES]),
        )
    first = None
    if new.idempotency_key is not None:
        first = dialect.by_idempotency_key(
            select(INSTANCE).where(
                INSTANCE.c.flow_name == new.flow_name,
                INSTANCE.c.idempotency_key == new.idempotency_key,
            ),
            new,
        )
    return holder, first


def resolve_conflict(
    new: NewInstance, holder: Any, first: Any, cause: BaseException | None = None
) -> InstanceRecord | None:
    """What a start whose INSERT did nothing answers, from :func:`conflict_queries`' rows.

    Args:
        new: the start.
        holder: the row of the active instance holding its instance key, or None.
        first: the row of the instance its idempotency key made, or None.
        cause: the error to chain (a driver's unique violation), if any.

    Returns:
        The instance the idempotency key made (a repeat of the same request); None when
        neither key explains the conflict (the id itself exists).

    Raises:
        IdempotencyKeyReused: the key was used with another input or instance key (code
            ``idempotency_key_reused``).
        InstanceKeyInUse: an active instance holds the instance key and the idempotency
            key does not name it (code ``instance_key_in_use``).
    """
    if first is not None:
        if not new.repeats(first.input, first.instance_key):
            raise IdempotencyKeyReused(
                f"idempotency key {new.idempotency_key!r} of flow {new.flow_name!r} "
                "was used with a different request",
                flow=new.flow_name,
                idempotency_key=new.idempotency_key,
                instance_id=first.id,
            ) from cause
        return instance_from_row(first)
    if holder is not None:
        raise InstanceKeyInUse(
            f"instance key {new.instance_key!r} of flow {new.flow_name!r} is held by "
            f"instance {holder.id!r}",
            flow=new.flow_name,
            instance_key=new.instance_key,
            instance_id=holder.id,
        ) from cause
    return None


def _no_key_conflict(new: NewInstance) -> JournalConflict:
    return JournalConflict(
        f"cannot start instance {new.id!r}: its id exists already", instance_id=new.id
    )


async def insert_in(
    conn: AsyncConnection, new: NewInstance, schema_map: dict[str | None, str] | None
) -> tuple[InstanceRecord, bool]:
    """Write ``new`` in the transaction ``conn`` is in (one statement; one more only on a
    key conflict).

    Args:
        conn: the caller's connection, inside the caller's transaction.
        new: the start (its lease already expired: whoever claims it first runs it).
        schema_map: ``{None: schema}`` for a PostgreSQL schema of flowpark's own, else None.

    Returns:
        ``(record, created)``: the new instance, or the one its idempotency key made.

    Raises:
        IdempotencyKeyReused, InstanceKeyInUse, JournalConflict: as a start's.
    """
    dialect = _dialect(conn.dialect.name)
    options = _options(schema_map)
    inserted = await conn.execute(_insert(new, dialect), execution_options=options)
    if inserted.first() is not None:
        for stmt in _step_inserts(new, dialect):
            await conn.execute(stmt, execution_options=options)
        return instance_from_new(new), True
    holder_q, first_q = conflict_queries(dialect, new)
    holder = (
        None
        if holder_q is None
        else (await conn.execute(holder_q, execution_options=options)).first()
    )
    first = (
        None
        if first_q is None
        else (await conn.execute(first_q, execution_options=options)).first()
    )
    record = resolve_conflict(new, holder, first)
    if record is None:
        raise _no_key_conflict(new)
    return record, False


def insert_in_sync(
    conn: Connection, new: NewInstance, schema_map: dict[str | None, str] | None
) -> tuple[InstanceRecord, bool]:
    """:func:`insert_in` on a blocking connection (a ``Session``'s or a ``Connection``).

    Raises:
        As :func:`insert_in`.
    """
    dialect = _dialect(conn.dialect.name)
    options = _options(schema_map)
    if conn.execute(_insert(new, dialect), execution_options=options).first() is not None:
        for stmt in _step_inserts(new, dialect):
            conn.execute(stmt, execution_options=options)
        return instance_from_new(new), True
    holder_q, first_q = conflict_queries(dialect, new)
    holder = None if holder_q is None else conn.execute(holder_q, execution_options=options).first()
    first = None if first_q is None else conn.execute(first_q, execution_options=options).first()
    record = resolve_conflict(new, holder, first)
    if record is None:
        raise _no_key_conflict(new)
    return record, False
