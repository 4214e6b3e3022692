"""signal_delivery: a signed delivery's id, unique per flow and signal across instances

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 00:00:00

A verified (signed) signal's delivery id is its provider's: one delivery is one event for
one instance. The first instance a delivery id reaches is recorded here; a replay of that
id to another instance is refused (``signal_delivery_replayed``) and stores nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True)
INSTANCE_ID = sa.String().with_variant(postgresql.UUID(as_uuid=False), "postgresql")


def upgrade() -> None:
    op.create_table(
        "signal_delivery",
        sa.Column("flow_name", sa.String(), nullable=False),
        sa.Column("signal_name", sa.String(), nullable=False),
        sa.Column("delivery_id", sa.String(), nullable=False),
        sa.Column("instance_id", INSTANCE_ID, nullable=False),
        sa.Column("received_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("flow_name", "signal_name", "delivery_id"),
    )
    op.create_index("ix_signal_delivery_instance", "signal_delivery", ["instance_id"])


def downgrade() -> None:
    op.drop_index("ix_signal_delivery_instance", table_name="signal_delivery")
    op.drop_table("signal_delivery")
