"""A store part over an engine of its own: its context, with the dialect of its database.

:class:`SqlPart` is for the parts that stand alone, outside
:class:`~flowpark.store.sql_store.SqlStore`'s roles (the outbox deliveries, the purge, the
node registry, console sessions); :func:`context_for` is the one place a context is made.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.store.base import SqlContext, SqlRole
from flowpark.store.dialects import dialect_for

__all__ = ["SqlPart", "context_for"]


def context_for(engine: AsyncEngine) -> SqlContext:
    """A :class:`~flowpark.store.base.SqlContext` over ``engine`` with its database's dialect.

    Raises:
        ValueError: a database flowpark does not support.
    """
    return SqlContext(engine, dialect_for(engine))


class SqlPart(SqlRole):
    """A store part that stands alone, outside :class:`~flowpark.store.sql_store.SqlStore`'s
    roles, with a context of its own over ``engine`` (e.g. the outbox deliveries).

    Args:
        engine: an engine from :func:`flowpark.store.db.make_async_engine`, migrated to head.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(context_for(engine))
