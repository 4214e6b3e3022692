"""review items' state: claimed, resolved or dismissed, with who and when

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 00:00:00

A review item (``review_item``, written by ``request_review``) was only listed. It now has a
``state`` (``open`` until a person claims it, then ``claimed``; ``resolved`` or ``dismissed``
once closed), who claimed it and when (``claimed_by``, ``claimed_at``), who closed it and
when (``closed_by``, ``closed_at``) and the closing ``note``. Existing items are ``open``.
Downgrade drops the columns (and so what people did with the items).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("claimed_by", "claimed_at", "closed_by", "closed_at", "note")


def upgrade() -> None:
    with op.batch_alter_table("review_item") as batch:
        batch.add_column(
            sa.Column("state", sa.String(), nullable=False, server_default=sa.text("'open'"))
        )
        batch.add_column(sa.Column("claimed_by", sa.String(), nullable=True))
        batch.add_column(sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("closed_by", sa.String(), nullable=True))
        batch.add_column(sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))
    op.create_index("ix_review_item_state", "review_item", ["state", "sequence"])


def downgrade() -> None:
    op.drop_index("ix_review_item_state", table_name="review_item")
    with op.batch_alter_table("review_item") as batch:
        for name in ("state", *_COLUMNS):
            batch.drop_column(name)
