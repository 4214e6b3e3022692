"""flow_step.carried, flow_instance.carried: deadlines inside the row written with them

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06 04:00:00

A deadline written in the same write as another journal row is stored inside that row (the
JSON array ``carried``, see ``flowpark.store.carried``) instead of as a row of its own; the
deadlines a start stores with its instance go inside the instance row. Existing deadline
rows stay as they are: a row of its own reads exactly as before, so an instance parked
before this revision resumes with the same ends; ``carried`` starts NULL everywhere. The
downgrade refuses while any row carries a deadline (a release before this revision could not
read it): end, cancel or delete those instances first.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("flow_step", "flow_instance")


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("carried", sa.JSON(), nullable=True))


def downgrade() -> None:
    bind = op.get_bind()
    for table in _TABLES:
        carrying = bind.execute(
            sa.text(f"SELECT count(*) FROM {table} WHERE carried IS NOT NULL")  # noqa: S608
        ).scalar_one()
        if carrying:
            raise RuntimeError(
                f"{carrying} rows of {table} carry deadlines ({table}.carried): a release "
                "before revision 0024 cannot read them; end, cancel or delete their "
                "instances first"
            )
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("carried")
