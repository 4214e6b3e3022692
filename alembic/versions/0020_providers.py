"""flow_provider and flow_provider_minute: providers' shared limits and call tallies

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 00:00:00

One ``flow_provider`` row per declared provider: the limit in force (declared, set by a
setting or by an operator, with who and when), the shared token bucket every node's grant
draws from in one statement, and the pushback state (effective rate, pause, reason). One
``flow_provider_minute`` row per provider and minute with the nodes' call outcome counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "flow_provider",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("rate_per_second", sa.Float(), nullable=False),
        sa.Column("burst", sa.Integer(), nullable=False),
        sa.Column("max_in_flight", sa.Integer(), nullable=True),
        sa.Column("floor_ratio", sa.Float(), nullable=False),
        sa.Column("effective_rate", sa.Float(), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("refilled_s", sa.Float(), nullable=False),
        sa.Column("lowered_s", sa.Float(), nullable=True),
        sa.Column("last_granted", sa.Integer(), nullable=False),
        sa.Column("lowered_reason", sa.Text(), nullable=True),
        sa.Column("paused_until", INSTANT, nullable=True),
        sa.Column("pushbacks", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", INSTANT, nullable=False),
        sa.Column("updated_by", sa.String(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "flow_provider_minute",
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("minute", INSTANT, nullable=False),
        sa.Column("ok", sa.Integer(), nullable=False),
        sa.Column("pushback", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("deferred", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("provider", "minute", name="pk_flow_provider_minute"),
    )


def downgrade() -> None:
    op.drop_table("flow_provider_minute")
    op.drop_table("flow_provider")
