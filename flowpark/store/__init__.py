"""Storage: SQLModel tables, the SQL journal, engines and migrations.

The only package that writes SQL. The engine sees it through
:class:`flowpark.engine.ports.Store` (its ports by use), implemented by :class:`SqlStore`.
"""

from typing import TYPE_CHECKING, Any

from flowpark.store.base import JournalConflict
from flowpark.store.db import make_async_engine, sync_url
from flowpark.store.schema import check_schema_at_head
from flowpark.store.sql_store import SqlStore
from flowpark.store.types import UtcDateTime

if TYPE_CHECKING:
    from flowpark.store.migrate import (
        current_revision,
        downgrade,
        head_revision,
        upgrade,
    )

_MIGRATE = frozenset({"current_revision", "downgrade", "head_revision", "upgrade"})


def __getattr__(name: str) -> Any:
    """The migration helpers, imported on first use: Alembic's import is several percent of
    a node's start-up, which its schema check (:mod:`flowpark.store.schema`) does without."""
    if name in _MIGRATE:
        from flowpark.store import migrate

        return getattr(migrate, name)
    raise AttributeError(f"module 'flowpark.store' has no attribute {name!r}")


__all__ = [
    "JournalConflict",
    "SqlStore",
    "UtcDateTime",
    "check_schema_at_head",
    "current_revision",
    "downgrade",
    "head_revision",
    "make_async_engine",
    "sync_url",
    "upgrade",
]
