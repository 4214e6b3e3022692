"""lean indexes: running leases indexed by id (HOT lease renewals), no redundant step index

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 00:00:00

* ``ix_flow_instance_lease_running`` indexes ``id`` instead of ``lease_expires_at`` (still
  partial on ``state = 'running'``): running instances are the few in flight, so the claim
  of lapsed leases reads them all cheaply either way, and a lease renewal (every journal
  write renews it) no longer changes an indexed column, so PostgreSQL can make it a HOT
  update (no new index entries, dead version pruned in-page).
* ``ix_flow_step_instance_id`` is dropped: ``uq_flow_step_execution`` leads with
  ``instance_id`` and serves the same lookups.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _partial(where: str) -> dict[str, sa.TextClause]:
    return {"sqlite_where": sa.text(where), "postgresql_where": sa.text(where)}


def upgrade() -> None:
    op.drop_index("ix_flow_instance_lease_running", table_name="flow_instance")
    op.create_index(
        "ix_flow_instance_lease_running", "flow_instance", ["id"], **_partial("state = 'running'")
    )
    op.drop_index("ix_flow_step_instance_id", table_name="flow_step")


def downgrade() -> None:
    op.create_index("ix_flow_step_instance_id", "flow_step", ["instance_id"])
    op.drop_index("ix_flow_instance_lease_running", table_name="flow_instance")
    op.create_index(
        "ix_flow_instance_lease_running",
        "flow_instance",
        ["lease_expires_at"],
        **_partial("state = 'running'"),
    )
