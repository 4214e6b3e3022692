"""flow_instance.woken: an operator's wake kept on the row until the sweep runs it

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 09:00:00

A bulk wake records its wakes instead of running them inline: each parked instance is
marked ``woken`` and made due now, and the sweep runs it at its provider's pace. The claim
that finds the mark runs the wait the instance is parked on at once (a retry's next try,
not only a poll's next attempt, whose instant the journal holds); the park that ends that
try clears it, a deferral of the try (its provider had no budget, or pushed it back) keeps
it. Every instance starts unmarked. A downgrade drops the marks: those instances wake at
their own schedule.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("flow_instance") as batch:
        batch.add_column(
            sa.Column("woken", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("flow_instance") as batch:
        batch.drop_column("woken")
