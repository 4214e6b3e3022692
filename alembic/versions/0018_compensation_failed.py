"""compensations that failed for good: flow_instance.compensation_failed

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 00:00:00

An ended instance whose compensation failed for good (its retry policy allowed no other
try, or an operator's retry of it failed) is marked, so an operator can list the instances
whose unwind left something undone (``GET /api/v1/instances?compensationFailed=true``):
the flag is written with the instance's final state, from the failure's details, and
cleared when a retry of every failed compensation succeeds. Only marked instances have an
entry in its partial index. Instances that ended before this revision are marked from
their journals (a compensation's last row a final failure, and no row of it a success).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MARKED = "compensation_failed"

BACKFILL = """
UPDATE flow_instance SET compensation_failed = true
WHERE state IN ('failed', 'cancelled') AND EXISTS (
    SELECT 1 FROM flow_step f
    WHERE f.instance_id = flow_instance.id AND f.kind = 'compensation'
      AND f.outcome = 'failure' AND f.final
      AND NOT EXISTS (
          SELECT 1 FROM flow_step s
          WHERE s.instance_id = f.instance_id AND s.step_id = f.step_id
            AND s.scope = f.scope AND s.kind = 'compensation' AND s.outcome = 'success'
      )
)
"""


def upgrade() -> None:
    with op.batch_alter_table("flow_instance") as batch:
        batch.add_column(sa.Column(MARKED, sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute(BACKFILL)
    op.create_index(
        "ix_flow_instance_compensation_failed_created",
        "flow_instance",
        ["created_at", "id"],
        sqlite_where=sa.text(MARKED),
        postgresql_where=sa.text(MARKED),
    )


def downgrade() -> None:
    op.drop_index("ix_flow_instance_compensation_failed_created", table_name="flow_instance")
    with op.batch_alter_table("flow_instance") as batch:
        batch.drop_column(MARKED)
