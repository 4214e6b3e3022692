"""Column types shared by the tables."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = ["UtcDateTime"]


class UtcDateTime(TypeDecorator[datetime]):
    """An instant: aware UTC in Python, whatever the database or the process time zone.

    Binding requires an aware datetime and converts it to UTC. PostgreSQL stores
    ``timestamptz``; SQLite stores the naive UTC wall time in SQLAlchemy's fixed-width
    ``YYYY-MM-DD HH:MM:SS.ffffff`` text form, so string comparisons order like instants.
    Results always come back aware, with ``tzinfo=UTC``.

    Raises:
        ValueError: (on bind) the datetime is naive, or the value is not a datetime.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(DateTime(timezone=True))
        return dialect.type_descriptor(DateTime(timezone=False))

    def process_bind_param(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise ValueError(f"UtcDateTime expects a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            raise ValueError(f"UtcDateTime expects an aware datetime, got naive {value!r}")
        instant = value.astimezone(UTC)
        if dialect.name == "postgresql":
            return instant
        return instant.replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    @property
    def python_type(self) -> type[datetime]:
        return datetime
