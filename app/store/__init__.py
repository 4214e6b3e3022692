"""Storage: SQLModel tables, the SQL journal, engines and migrations.

The only package that writes SQL. The engine sees it through
:class:`app.engine.journal.Journal`, implemented by :class:`SqlJournal`.
"""

from app.store.base import JournalConflict
from app.store.db import make_async_engine, sync_url
from app.store.migrate import (
    check_schema_at_head,
    current_revision,
    downgrade,
    head_revision,
    upgrade,
)
from app.store.sql_journal import SqlJournal
from app.store.types import UtcDateTime

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
