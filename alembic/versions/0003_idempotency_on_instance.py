"""idempotency keys on the instance row: one row per start instead of two

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 00:00:00

A start wrote its instance and a separate ``idempotency_record`` (flow, key, request hash,
instance id, created_at). The key and the request hash now live on ``flow_instance``
(``idempotency_key``, ``request_hash``) under the unique partial index
``uq_flow_instance_idempotency (flow_name, idempotency_key)``: a start is one INSERT (so a
batch of starts is one statement, and a repeated key is a conflict of that INSERT), and a
parked instance carries one heap tuple fewer (the record's ~170 bytes and its primary-key
entry). Existing records are copied onto their instances; downgrade copies them back.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True)  # frozen copy of flowpark.store.types.UtcDateTime
_KEYED = "idempotency_key IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("flow_instance") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(), nullable=True))
        batch.add_column(sa.Column("request_hash", sa.String(), nullable=True))
    op.execute(
        "UPDATE flow_instance SET "
        "idempotency_key = (SELECT r.key FROM idempotency_record r "
        "WHERE r.instance_id = flow_instance.id), "
        "request_hash = (SELECT r.request_hash FROM idempotency_record r "
        "WHERE r.instance_id = flow_instance.id) "
        "WHERE id IN (SELECT instance_id FROM idempotency_record)"
    )
    op.create_index(
        "uq_flow_instance_idempotency",
        "flow_instance",
        ["flow_name", "idempotency_key"],
        unique=True,
        sqlite_where=sa.text(_KEYED),
        postgresql_where=sa.text(_KEYED),
    )
    op.drop_table("idempotency_record")


def downgrade() -> None:
    op.create_table(
        "idempotency_record",
        sa.Column("flow_name", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("request_hash", sa.String(), nullable=True),
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("flow_name", "key", name="pk_idempotency_record"),
    )
    op.execute(
        "INSERT INTO idempotency_record (flow_name, key, request_hash, instance_id, created_at) "
        "SELECT flow_name, idempotency_key, request_hash, id, created_at FROM flow_instance "
        "WHERE idempotency_key IS NOT NULL"
    )
    op.drop_index("uq_flow_instance_idempotency", table_name="flow_instance")
    with op.batch_alter_table("flow_instance") as batch:
        batch.drop_column("request_hash")
        batch.drop_column("idempotency_key")
