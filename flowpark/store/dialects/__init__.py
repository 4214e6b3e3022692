"""What PostgreSQL and SQLite do differently, one module each, chosen once per store.

:func:`dialect_for` picks the :class:`~flowpark.store.base.Dialect` of an engine when the
store's context is made (:func:`flowpark.store.parts.context_for`); the store's roles call
it and hold no branch on the database themselves.

* :mod:`flowpark.store.dialects.postgres` — several nodes: claims with ``FOR UPDATE SKIP
  LOCKED``, one-statement writes in autocommit (a fenced commit, a signal's take and
  delivery, a load with its journal as JSON arrays), group commit (:mod:`flowpark.store.batched`),
  advisory locks for the one-node-at-a-time jobs, REPEATABLE READ reads.
* :mod:`flowpark.store.dialects.sqlite` — the embedded file: one writer at a time (this
  process's writers queue on an asyncio lock), so a read-then-write transaction sees
  nothing change under it; journal sequences are ``max + 1``.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.store.base import Dialect
from flowpark.store.dialects.postgres import PostgresDialect
from flowpark.store.dialects.sqlite import SqliteDialect

__all__ = ["dialect_for"]


def dialect_for(engine: AsyncEngine) -> Dialect:
    """The :class:`Dialect` of ``engine``'s database.

    Raises:
        ValueError: a database flowpark does not support.
    """
    name = engine.dialect.name
    if name == "postgresql":
        return PostgresDialect()
    if name == "sqlite":
        return SqliteDialect()
    raise ValueError(f"flowpark stores in PostgreSQL or SQLite, not {name!r}")
