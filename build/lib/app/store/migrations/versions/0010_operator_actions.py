"""operator actions: flow_action, the history of wake, extend-budget and cancel

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 00:00:00

One row per operator action on an instance: the action, the acting token's name, the
engine-clock instant, what it did (``details``) and the request's ``Idempotency-Key``
(unique per instance and action: a repeat finds the first row and acts no more).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True)
SEQUENCE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
INSTANCE_ID = sa.String().with_variant(postgresql.UUID(as_uuid=False), "postgresql")


def upgrade() -> None:
    op.create_table(
        "flow_action",
        sa.Column("sequence", SEQUENCE, autoincrement=True, nullable=False),
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("instance_id", INSTANCE_ID, nullable=False),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("acted_at", INSTANT, nullable=False),
        sa.Column("details", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("idempotency_key", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("sequence"),
        sa.UniqueConstraint("id", name="uq_flow_action_id"),
        sa.UniqueConstraint(
            "instance_id", "action", "idempotency_key", name="uq_flow_action_idempotency"
        ),
    )
    op.create_index("ix_flow_action_instance", "flow_action", ["instance_id", "sequence"])


def downgrade() -> None:
    op.drop_index("ix_flow_action_instance", table_name="flow_action")
    op.drop_table("flow_action")
