"""flow_provider: a schedule of call slots replaces the token bucket

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 01:45:00

A grant reserves consecutive call slots from the provider's next free slot
(``next_slot_s``, seconds since the epoch on the engine clock) instead of taking tokens from
a bucket, so nodes can reserve large batches while their calls together stay within the
rate. The column ``tokens`` becomes ``next_slot_s``; every provider starts with no slot
reserved.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("flow_provider") as batch:
        batch.alter_column("tokens", new_column_name="next_slot_s")
    op.execute(sa.text("UPDATE flow_provider SET next_slot_s = 0"))


def downgrade() -> None:
    with op.batch_alter_table("flow_provider") as batch:
        batch.alter_column("next_slot_s", new_column_name="tokens")
    op.execute(sa.text("UPDATE flow_provider SET tokens = burst"))
