"""What every flowpark table model is built on: its own SQLModel registry (so its tables are
on :data:`metadata` alone, never on ``SQLModel.metadata``), the models' pydantic config, and
the column helpers. The tables themselves are in :mod:`flowpark.store.tables`,
:mod:`flowpark.store.outbox_tables` and :mod:`flowpark.store.provider_tables`.
"""

from typing import Any

from pydantic import ConfigDict
from sqlalchemy import JSON, BigInteger, Boolean, Column, Integer, String, false
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

from flowpark.store.types import InstanceId, UtcDateTime

__all__ = [
    "TABLE_CONFIG",
    "FlowparkTable",
    "Sequence64",
    "flag_field",
    "instance_id_field",
    "instant_field",
    "int_field",
    "json_field",
    "metadata",
    "sequence_field",
    "str_field",
]


class FlowparkTable(SQLModel, registry=registry()):
    """Base of flowpark's table models: a SQLModel registry of flowpark's own, so that its
    tables are on :data:`metadata`, never on ``SQLModel.metadata`` (an application's own
    SQLModel tables, its ``create_all`` and its Alembic autogenerate see none of them)."""


#: flowpark's tables, and only them.
metadata = FlowparkTable.metadata

#: Every table's pydantic config. The store uses the tables' Core ``__table__`` only, so
#: their validators and serializers are built on first use (``defer_build``), not at import.
#: No ``from __future__ import annotations``: pydantic and SQLAlchemy's declarative scan
#: would each evaluate every annotation string again (a quarter of this module's ~0.1 s).
TABLE_CONFIG: Any = ConfigDict(defer_build=True)  # SQLModel types it as its own TypedDict


# A 64-bit sequence that is still SQLite's INTEGER PRIMARY KEY (rowid alias, autoincrement).
Sequence64 = BigInteger().with_variant(Integer(), "sqlite")


def json_field(name: str, *, nullable: bool = True) -> Any:
    """A JSON column (SQL NULL for ``None``)."""
    return Field(default=None, sa_column=Column(name, JSON(none_as_null=True), nullable=nullable))


def instant_field(name: str, *, nullable: bool = True) -> Any:
    """An aware-UTC instant column (:class:`~flowpark.store.types.UtcDateTime`)."""
    return Field(default=None, sa_column=Column(name, UtcDateTime(), nullable=nullable))


def str_field(name: str, *, nullable: bool = True, primary_key: bool = False) -> Any:
    """A text column."""
    return Field(
        default=None,
        sa_column=Column(name, String(), nullable=nullable, primary_key=primary_key),
    )


def instance_id_field(name: str, *, primary_key: bool = False) -> Any:
    """An instance id column (``uuid`` on PostgreSQL, text on SQLite)."""
    return Field(
        default=None,
        sa_column=Column(name, InstanceId(), nullable=False, primary_key=primary_key),
    )


def int_field(name: str, *, nullable: bool = True) -> Any:
    """An integer column."""
    return Field(default=None, sa_column=Column(name, Integer(), nullable=nullable))


def flag_field(name: str) -> Any:
    """A boolean column, false unless set."""
    column: Column[bool] = Column(
        name, Boolean(), nullable=False, default=False, server_default=false()
    )
    return Field(default=False, sa_column=column)


def sequence_field() -> Any:
    """The commit-order ``sequence`` primary key (64-bit; SQLite's rowid alias)."""
    return Field(
        default=None,
        sa_column=Column("sequence", Sequence64, primary_key=True, autoincrement=True),
    )
