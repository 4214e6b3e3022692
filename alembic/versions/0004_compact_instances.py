"""compact instances: no request hash (the row's input and instance key are the request)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 00:00:00

A repeated start (same flow and idempotency key) was judged by ``request_hash``, a sha256
of ``{"input": ..., "instanceKey": ...}`` kept as 64 hex characters on every keyed
instance. The row already holds both: a conflicting start now compares its input (as
canonical JSON) and instance key with the stored ``input`` and ``instance_key``
(``NewInstance.repeats``), so the column is dropped: 65 bytes less per keyed instance row
and per dead version of it. Measured with ``python -m bench park --store postgres --n
10000`` (a parked ``document.process``): 1,330 -> 1,265 bytes per instance (flow_instance
heap 378 -> 315).

Downgrade re-adds ``request_hash`` and recomputes it from ``input`` and ``instance_key``
(the hash the older code computes for a repeat), so a downgraded database still tells a
repeat from a reused key. In offline mode (``--sql``) the rows cannot be read: the column
comes back NULL, and a repeat of such a start would be refused as ``idempotency_key_reused``
until the hashes are filled in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import context, op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 1000


def upgrade() -> None:
    with op.batch_alter_table("flow_instance") as batch:
        batch.drop_column("request_hash")


def _request_hash(input_: Any, instance_key: str | None) -> str:
    """Frozen copy of the hash revision 0003's code computes for a start's request."""
    blob = json.dumps({"input": input_, "instanceKey": instance_key}, sort_keys=True,
                      separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _fill_request_hashes() -> None:
    """Recompute ``request_hash`` of every keyed instance, in pages of ``_BATCH`` ids."""
    instance = sa.table("flow_instance", sa.column("id", sa.String()),
                        sa.column("input", sa.JSON(none_as_null=True)),
                        sa.column("instance_key", sa.String()),
                        sa.column("idempotency_key", sa.String()),
                        sa.column("request_hash", sa.String()))
    conn = op.get_bind()
    fill = (sa.update(instance).where(instance.c.id == sa.bindparam("b_id"))
            .values(request_hash=sa.bindparam("b_hash")))
    last = ""
    while True:
        rows = conn.execute(
            sa.select(instance.c.id, instance.c.input, instance.c.instance_key)
            .where(instance.c.idempotency_key.is_not(None), instance.c.id > last)
            .order_by(instance.c.id).limit(_BATCH)).all()
        if not rows:
            return
        conn.execute(fill, [{"b_id": r.id, "b_hash": _request_hash(r.input, r.instance_key)}
                            for r in rows])
        last = rows[-1].id


def downgrade() -> None:
    with op.batch_alter_table("flow_instance") as batch:
        batch.add_column(sa.Column("request_hash", sa.String(), nullable=True))
    if not context.is_offline_mode():
        _fill_request_hashes()
