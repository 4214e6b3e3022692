"""flow_step.deferred_until, flow_step.deferred_by: a try's provider deferral on its row

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-08 09:00:00

A try its provider deferred (no budget under the limit, or a pushback) was parked again
without a row; the row of the try that finally runs now says so: the instant the last
deferral woke it (``deferred_until``) and why (``deferred_by``: ``budget`` or
``pushback``). The console and the API read a late attempt's time apart: how long the
provider held it back, and how late the sweep woke it after that. Both columns start NULL
(rows of earlier releases were not deferred, or did not say); the downgrade drops them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | Sequence[str] | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


INSTANT = sa.DateTime(timezone=True)  # frozen copy of flowpark.store.types.UtcDateTime


def upgrade() -> None:
    op.add_column("flow_step", sa.Column("deferred_until", INSTANT, nullable=True))
    op.add_column("flow_step", sa.Column("deferred_by", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("flow_step") as batch:
        batch.drop_column("deferred_by")
        batch.drop_column("deferred_until")
