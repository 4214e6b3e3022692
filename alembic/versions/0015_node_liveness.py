"""node liveness: flow_node, one row per node process

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 00:00:00

Each node process writes its own row every beat: its id, role (``serve`` or ``worker``),
flowpark version, the flow versions it serves, whether it sweeps, the instant of its last
sweep and how many instances that sweep claimed. The console, ``GET /api/v1/nodes`` and
``/readyz`` read these rows to tell overdue work that no live node sweeps.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "flow_node",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.Column("flows", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("sweeps", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("beat_seconds", sa.Float(), nullable=False),
        sa.Column("started_at", INSTANT, nullable=False),
        sa.Column("seen_at", INSTANT, nullable=False),
        sa.Column("stopped_at", INSTANT, nullable=True),
        sa.Column("last_sweep_at", INSTANT, nullable=True),
        sa.Column("last_claimed", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("flow_node")
