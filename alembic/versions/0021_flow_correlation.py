"""flow_correlation: the correlation keys live instances hold

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 00:00:00

A step records the id a provider minted for what it started (``ctx.correlate(provider,
key)``): one row per key, written with the step's journal row, unique per flow and
provider, deleted when its instance finishes. A provider signal's fixed route finds the
instance holding a key here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True)
INSTANCE_ID = sa.String().with_variant(postgresql.UUID(as_uuid=False), "postgresql")


def upgrade() -> None:
    op.create_table(
        "flow_correlation",
        sa.Column("flow_name", sa.String(), nullable=False),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("instance_id", INSTANCE_ID, nullable=False),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("flow_name", "provider", "key"),
    )
    op.create_index("ix_flow_correlation_instance", "flow_correlation", ["instance_id"])


def downgrade() -> None:
    op.drop_index("ix_flow_correlation_instance", table_name="flow_correlation")
    op.drop_table("flow_correlation")
