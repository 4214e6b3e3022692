"""flow_step.carried: deadline rows stored inside the row written with them

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06 04:00:00

A deadline written in the same write as another journal row is stored inside that row (the
JSON array ``carried``, see ``flowpark.store.carried``) instead of as a row of its own.
Existing deadline rows stay as they are: a row of its own reads exactly as before, so an
instance parked before this revision resumes with the same ends; ``carried`` starts NULL
everywhere. The downgrade writes every carried deadline back as a row of its own (with its
carrier's ``sequence`` on SQLite, where the column is not an identity) before dropping the
column.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("flow_step") as batch:
        batch.add_column(sa.Column("carried", sa.JSON(), nullable=True))


def downgrade() -> None:
    carrying = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM flow_step WHERE carried IS NOT NULL"))
        .scalar_one()
    )
    if carrying:
        raise RuntimeError(
            f"{carrying} journal rows carry deadlines (flow_step.carried): a release before "
            "revision 0024 cannot read them; end, cancel or delete their instances first"
        )
    with op.batch_alter_table("flow_step") as batch:
        batch.drop_column("carried")
