"""Storage: SQLModel tables, the SQL journal, engines and migrations.

The only package that writes SQL. The engine sees it through
:class:`app.engine.ports.Journal` (its ports by use), implemented by :class:`SqlJournal`.
"""

from typing import TYPE_CHECKING, Any

from app.store.base import JournalConflict
from app.store.db import make_async_engine, sync_url
from app.store.schema import check_schema_at_head
from app.store.sql_journal import SqlJournal
from app.store.types import UtcDateTime

if TYPE_CHECKING:
    from app.store.migrate import (
        current_revision,
        downgrade,
        head_revision,
        upgrade,
    )

_MIGRATE = frozenset({"current_revision", "downgrade", "head_revision", "upgrade"})


def __getattr__(name: str) -> Any:
    """The migration helpers, imported on first use: Alembic's import is several percent of
    a node's start-up, which its schema check (:mod:`app.store.schema`) does without."""
    if name in _MIGRATE:
        from app.store import migrate

        return getattr(migrate, name)
    raise AttributeError(f"module 'app.store' has no attribute {name!r}")


__all__ = [
    "JournalConflict",
    "SqlJournal",
    "UtcDateTime",
    "check_schema_at_head",
    "current_revision",
    "downgrade",
    "head_revision",
    "make_async_engine",
    "sync_url",
    "upgrade",
]
