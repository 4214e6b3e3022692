"""compact instances: ids as uuid on PostgreSQL; no request hash (the row is the request)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 00:00:00

Two changes that shrink a parked instance on PostgreSQL (the target: at most 1 KiB), measured
with ``python -m bench park --store postgres --n 10000`` (a parked ``document.process``:
one instance row, two journal rows; two runs each on a quiet machine):

* ``flow_instance.request_hash`` is dropped. A repeated start (same flow and idempotency
  key) was judged by a sha256 of ``{"input": ..., "instanceKey": ...}`` kept as 64 hex
  characters on every keyed instance. The row already holds both: a conflicting start now
  compares its input (as canonical JSON) and instance key with the stored ``input`` and
  ``instance_key`` (``NewInstance.repeats``). 65 bytes less per keyed instance row and per
  dead version of it: 1,340 -> 1,261 bytes per instance (flow_instance heap 384 -> 308).
* ``flow_instance.id`` and every ``instance_id`` column (``flow_step``, ``flow_signal``,
  ``flow_heartbeat``, ``flow_stream``, ``outbox_event``, ``review_item``) become ``uuid``
  on PostgreSQL: 16 bytes instead of 37 in each row and index entry (ids are uuid7
  strings; ``flowpark.store.types.InstanceId`` keeps them canonical strings in Python).
  1,261 -> 1,073 bytes per instance (flow_instance heap 308 -> 263, its primary key
  103 -> 59, flow_step heap 434 -> 387, uq_flow_step_execution 169 -> 117). SQLite keeps
  its text columns (nothing to rewrite).

Upgrade first checks that every id is a canonical UUID string (lowercase, dashed), on both
stores: flowpark reads no other form, and PostgreSQL would refuse or re-spell it.

Downgrade turns the columns back to ``varchar`` (the canonical text) and re-adds
``request_hash``, recomputed from ``input`` and ``instance_key`` (the hash the older code
computes for a repeat), so a downgraded database still tells a repeat from a reused key.
In offline mode (``--sql``) the rows cannot be read: the column comes back NULL, and a
repeat of such a start would be refused as ``idempotency_key_reused`` until the hashes are
filled in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import context, op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 1000
#: (table, column) of every instance id: the instance's own, then its rows elsewhere.
ID_COLUMNS = (
    ("flow_instance", "id"),
    ("flow_step", "instance_id"),
    ("flow_signal", "instance_id"),
    ("flow_heartbeat", "instance_id"),
    ("flow_stream", "instance_id"),
    ("outbox_event", "instance_id"),
    ("review_item", "instance_id"),
)
# Frozen copy of flowpark.store.types.is_instance_id as SQL (SQLite's GLOB is case-sensitive).
_HEX = "[0-9a-f]"
_SQLITE_CANONICAL = "-".join(_HEX * n for n in (8, 4, 4, 4, 12))
_PG_CANONICAL = "^" + "-".join(f"{_HEX}{{{n}}}" for n in (8, 4, 4, 4, 12)) + "$"


def _refuse_non_canonical_ids() -> None:
    """Raise if an id is not a canonical UUID string (a custom id factory's ids)."""
    if context.is_offline_mode():
        return
    conn = op.get_bind()
    postgres = conn.dialect.name == "postgresql"
    for table, column in ID_COLUMNS:
        test = (
            f"{column} !~ '{_PG_CANONICAL}'"
            if postgres
            else f"NOT ({column} GLOB '{_SQLITE_CANONICAL}')"
        )
        bad = conn.exec_driver_sql(
            f"SELECT {column} FROM {table} WHERE {test} LIMIT 1"
        ).scalar_one_or_none()
        if bad is not None:
            raise RuntimeError(
                f"{table}.{column} holds {bad!r}, not a canonical UUID string (lowercase, "
                "dashed): flowpark 0004 and later need instance ids made by uuid "
                "(Engine id_factory); migrate those rows first"
            )


def upgrade() -> None:
    _refuse_non_canonical_ids()
    with op.batch_alter_table("flow_instance") as batch:
        batch.drop_column("request_hash")
    if op.get_context().dialect.name == "postgresql":
        for table, column in ID_COLUMNS:
            op.alter_column(
                table,
                column,
                type_=postgresql.UUID(as_uuid=False),
                existing_type=sa.String(),
                existing_nullable=False,
                postgresql_using=f"{column}::uuid",
            )


def _request_hash(input_: Any, instance_key: str | None) -> str:
    """Frozen copy of the hash revision 0003's code computes for a start's request."""
    blob = json.dumps(
        {"input": input_, "instanceKey": instance_key},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _fill_request_hashes() -> None:
    """Recompute ``request_hash`` of every keyed instance, in pages of ``_BATCH`` ids."""
    instance = sa.table(
        "flow_instance",
        sa.column("id", sa.String()),
        sa.column("input", sa.JSON(none_as_null=True)),
        sa.column("instance_key", sa.String()),
        sa.column("idempotency_key", sa.String()),
        sa.column("request_hash", sa.String()),
    )
    conn = op.get_bind()
    fill = (
        sa.update(instance)
        .where(instance.c.id == sa.bindparam("b_id"))
        .values(request_hash=sa.bindparam("b_hash"))
    )
    last = ""
    while True:
        rows = conn.execute(
            sa.select(instance.c.id, instance.c.input, instance.c.instance_key)
            .where(instance.c.idempotency_key.is_not(None), instance.c.id > last)
            .order_by(instance.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            return
        conn.execute(
            fill, [{"b_id": r.id, "b_hash": _request_hash(r.input, r.instance_key)} for r in rows]
        )
        last = rows[-1].id


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for table, column in ID_COLUMNS:
            op.alter_column(
                table,
                column,
                type_=sa.String(),
                existing_type=postgresql.UUID(as_uuid=False),
                existing_nullable=False,
                postgresql_using=f"{column}::text",
            )
    with op.batch_alter_table("flow_instance") as batch:
        batch.add_column(sa.Column("request_hash", sa.String(), nullable=True))
    if not context.is_offline_mode():
        _fill_request_hashes()
