"""every table named flow_*: the five with generic names renamed, with their indexes

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 00:00:00

flowpark's tables share a database (and on PostgreSQL a schema) with an application's own:
a name such as ``outbox_event`` or ``review_item`` is one its team could pick as well. The
five tables that did not start with ``flow_`` are renamed: ``outbox_event`` ->
``flow_outbox_event``, ``event_delivery`` -> ``flow_event_delivery``, ``review_item`` ->
``flow_review_item``, ``signal_delivery`` -> ``flow_signal_delivery``, ``console_session``
-> ``flow_console_session``. Their indexes and named constraints are renamed with them
(``ix_outbox_event_instance`` -> ``ix_flow_outbox_event_instance``), and on PostgreSQL
their primary keys and sequences too (``outbox_event_pkey``, ``outbox_event_sequence_seq``),
since index, constraint and sequence names share the schema's namespace. Rows are kept.

PostgreSQL renames in place. SQLite renames the table, drops and creates its indexes under
the new names, and rebuilds a table with a named unique constraint (the name lives in the
table's definition). Downgrade renames everything back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PREFIX = "flow_"


class _Renamed(NamedTuple):
    """One renamed table: its old name, its indexes and unique constraints by the part of
    their name after the table's (``ix_<table>_<suffix>``, ``uq_<table>_<suffix>``)."""

    table: str
    #: suffix -> (columns, partial index condition or None)
    indexes: dict[str, tuple[tuple[str, ...], str | None]]
    #: suffix -> columns
    uniques: dict[str, tuple[str, ...]] = {}
    #: a ``sequence`` column fed by a PostgreSQL sequence (``<table>_sequence_seq``)
    serial: bool = False


_RENAMED = (
    _Renamed(
        "outbox_event",
        indexes={
            "unpublished": (("sequence",), "published_at IS NULL"),
            "instance": (("instance_id",), None),
        },
        uniques={"id": ("id",)},
        serial=True,
    ),
    _Renamed(
        "event_delivery",
        indexes={
            "due": (("next_try_at",), "state = 'pending'"),
            "instance": (("instance_id", "subscriber", "event_sequence"), None),
            "state": (("state", "sequence"), None),
        },
        uniques={"event": ("subscriber", "event_id")},
        serial=True,
    ),
    _Renamed(
        "review_item",
        indexes={
            "instance": (("instance_id",), None),
            "state": (("state", "sequence"), None),
        },
        uniques={"id": ("id",)},
        serial=True,
    ),
    _Renamed("signal_delivery", indexes={"instance": (("instance_id",), None)}),
    _Renamed("console_session", indexes={"last_seen": (("last_seen_at",), None)}),
)


def _rename_postgresql(renamed: _Renamed, old: str, new: str) -> None:
    op.rename_table(old, new)
    op.execute(f"ALTER TABLE {new} RENAME CONSTRAINT {old}_pkey TO {new}_pkey")
    for suffix in renamed.uniques:
        op.execute(f"ALTER TABLE {new} RENAME CONSTRAINT uq_{old}_{suffix} TO uq_{new}_{suffix}")
    for suffix in renamed.indexes:
        op.execute(f"ALTER INDEX ix_{old}_{suffix} RENAME TO ix_{new}_{suffix}")
    if renamed.serial:
        op.execute(f"ALTER SEQUENCE {old}_sequence_seq RENAME TO {new}_sequence_seq")


def _rename_sqlite(renamed: _Renamed, old: str, new: str) -> None:
    for suffix in renamed.indexes:
        op.drop_index(f"ix_{old}_{suffix}", table_name=old)
    op.rename_table(old, new)
    if renamed.uniques:
        with op.batch_alter_table(new, recreate="always") as batch:
            for suffix, columns in renamed.uniques.items():
                batch.drop_constraint(f"uq_{old}_{suffix}", type_="unique")
                batch.create_unique_constraint(f"uq_{new}_{suffix}", list(columns))
    for suffix, (columns, where) in renamed.indexes.items():
        condition = {} if where is None else {"sqlite_where": sa.text(where)}
        op.create_index(f"ix_{new}_{suffix}", new, list(columns), **condition)


def _rename_all(*, forward: bool) -> None:
    rename = _rename_sqlite if op.get_bind().dialect.name == "sqlite" else _rename_postgresql
    for renamed in _RENAMED:
        old, new = renamed.table, PREFIX + renamed.table
        if forward:
            rename(renamed, old, new)
        else:
            rename(renamed, new, old)


def upgrade() -> None:
    _rename_all(forward=True)


def downgrade() -> None:
    _rename_all(forward=False)
