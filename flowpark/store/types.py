"""Column types shared by the tables."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, String
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from flowpark.errors import InstanceNotFound

__all__ = ["InstanceId", "UtcDateTime", "is_instance_id"]

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: Longest part of a refused id shown in an error message.
_SHOWN = 100


def is_instance_id(value: object) -> bool:
    """Whether ``value`` can name an instance: a UUID string in canonical form (36
    characters, lowercase hex, dashed: what ``str(uuid.UUID(...))`` gives)."""
    return isinstance(value, str) and _CANONICAL_UUID.fullmatch(value) is not None


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
        instant: datetime = value
        if instant.tzinfo is None:
            return instant.replace(tzinfo=UTC)
        return instant.astimezone(UTC)

    @property
    def python_type(self) -> type[datetime]:
        return datetime


class InstanceId(TypeDecorator[str]):
    """An instance id: a canonical UUID string in Python, ``uuid`` (16 bytes) on
    PostgreSQL, text on SQLite.

    Binding checks the value once for every statement that names an instance, on both
    stores: a value that is not a canonical UUID string (:func:`is_instance_id`) names no
    instance, so the statement is not sent and :class:`~flowpark.errors.InstanceNotFound` is
    raised (code ``instance_not_found``), as for an unknown id. (PostgreSQL would refuse it
    with an error, or read an upper-case form as the same id where SQLite would not.)
    Results are always the canonical string.

    Raises:
        InstanceNotFound: (on bind) the value is not a canonical UUID string. The store's
            edge (``flowpark.store.base``) raises it as itself.
    """

    impl = String()
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(UUID(as_uuid=False))
        return dialect.type_descriptor(String())

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if not is_instance_id(value):
            shown = str(value)
            if len(shown) > _SHOWN:
                shown = shown[:_SHOWN] + "..."
            raise InstanceNotFound(f"no instance {shown!r}", instance_id=shown)
        return value  # type: ignore[no-any-return]

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else str(value)

    @property
    def python_type(self) -> type[str]:
        return str
