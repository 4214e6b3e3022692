"""signal matched: flow_signal.matched records a signal its wait refused

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 00:00:00

A wait may declare which signals belong to it (``match=``). A delivered signal that does
not match is kept, marked out of the mailbox (``taken_at``, ``taken_step_id``) with
``matched`` false, and ends nothing. Null for every other signal (waiting or taken).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("flow_signal") as batch:
        batch.add_column(sa.Column("matched", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("flow_signal") as batch:
        batch.drop_column("matched")
