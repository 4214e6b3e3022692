"""operator list: flow_instance.wake_kind and one index per list filter

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 00:00:00

``wake_kind`` says what a suspended instance waits for (``poll``, ``retry``, ``signal``,
``deadline``); the engine writes it with every park. The operator's list answers newest
first with a keyset on ``(created_at, id)``; each filter has an index led by its column
and followed by that key, so a first page is one index range scan read backwards:
``created_at`` alone (no filter, ``createdAfter``/``createdBefore``), ``flow_name``,
``state``, ``wake_kind`` (suspended only), ``error_code`` (failed only) and
``instance_key`` (keyed instances only). ``overdue`` and ``stuck`` use the existing
suspended-by-wake and running indexes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEXES: tuple[tuple[str, str, str | None], ...] = (
    ("ix_flow_instance_created", "", None),
    ("ix_flow_instance_flow_created", "flow_name", None),
    ("ix_flow_instance_state_created", "state", None),
    ("ix_flow_instance_waiting_created", "wake_kind", "state = 'suspended'"),
    ("ix_flow_instance_error_created", "error_code", "error_code IS NOT NULL"),
    ("ix_flow_instance_key_created", "instance_key", "instance_key IS NOT NULL"),
)


def upgrade() -> None:
    with op.batch_alter_table("flow_instance") as batch:
        batch.add_column(sa.Column("wake_kind", sa.String(), nullable=True))
    for name, lead, where in _INDEXES:
        columns = [c for c in (lead, "created_at", "id") if c]
        condition = sa.text(where) if where else None
        op.create_index(
            name,
            "flow_instance",
            columns,
            unique=False,
            sqlite_where=condition,
            postgresql_where=condition,
        )


def downgrade() -> None:
    for name, _, _ in reversed(_INDEXES):
        op.drop_index(name, table_name="flow_instance")
    with op.batch_alter_table("flow_instance") as batch:
        batch.drop_column("wake_kind")
