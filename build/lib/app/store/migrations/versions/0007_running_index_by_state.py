"""running index by state: ix_flow_instance_lease_running is keyed by state, not id

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 00:00:00

The partial index of running instances (``WHERE state = 'running'``) was keyed by ``id``:
28 bytes per entry on PostgreSQL. Every start inserts its row running, so every start
adds an entry, and the entry is dead once the instance parks (until vacuum). Keyed by
``state`` instead, all entries share one key value and PostgreSQL's B-tree deduplication
keeps them as posting lists of heap pointers: about 7 bytes per entry (a synthetic run of
40,000 rows: 39.5 -> 7.0 bytes per row). The claim's use is unchanged: it reads the
running instances through the index and filters them by lease expiry. SQLite gets the
same definition (its size is not the point there; one schema on both).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "ix_flow_instance_lease_running"
_WHERE = sa.text("state = 'running'")


def _recreate(column: str) -> None:
    op.drop_index(_NAME, table_name="flow_instance")
    op.create_index(
        _NAME, "flow_instance", [column], unique=False, sqlite_where=_WHERE, postgresql_where=_WHERE
    )


def upgrade() -> None:
    _recreate("state")


def downgrade() -> None:
    _recreate("id")
