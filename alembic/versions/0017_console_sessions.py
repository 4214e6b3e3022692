"""console_session: the console's sign-ins, ended server-side

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 00:00:00

One row per console sign-in. The session cookie names its row; a request opens the console
only while the row is not ended (sign-out ends it), was seen within the idle timeout, and
its token is still configured: on every node, since every node reads the same row.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANT = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "console_session",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("token_fingerprint", sa.String(), nullable=False),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.Column("last_seen_at", INSTANT, nullable=False),
        sa.Column("ended_at", INSTANT, nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_console_session_last_seen", "console_session", ["last_seen_at"])


def downgrade() -> None:
    op.drop_index("ix_console_session_last_seen", table_name="console_session")
    op.drop_table("console_session")
