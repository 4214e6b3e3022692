"""lean list indexes: what the operator's list costs a parked instance

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01 00:00:00

0008 gave each list filter a full ``(column, created_at, id)`` index. Every park is a new
row version with a new entry in each of them (the update changes ``state``), which cost a
parked instance about 340 bytes (10,000 parked ``document.process`` instances on
PostgreSQL: state 149, flow 83, created 56, waiting 52 bytes each). Now:

- ``flow_name`` alone (B-tree deduplication keeps its entries as posting lists): a flow
  that is a small share of the rows is read through it and sorted; a large one through
  ``(created_at, id)`` backwards, filtered;
- ``(state, created_at, id)`` only for ended states (``completed``, ``failed``,
  ``cancelled``); ``suspended`` is read through ``(created_at, id)`` and ``running``
  through the running index;
- ``(wake_kind, created_at, id)`` only for suspended instances waiting for something other
  than a poll's next attempt (retry, signal, deadline); ``waiting=poll`` is read through
  ``(created_at, id)``.

A parked poll adds entries to ``(created_at, id)`` and ``flow_name`` only.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ENDED = "state IN ('completed', 'failed', 'cancelled')"
_WAITING = "state = 'suspended' AND wake_kind <> 'poll'"
_SUSPENDED = "state = 'suspended'"


def _create(name: str, columns: list[str], where: str | None = None) -> None:
    condition = sa.text(where) if where else None
    op.create_index(
        name,
        "flow_instance",
        columns,
        unique=False,
        sqlite_where=condition,
        postgresql_where=condition,
    )


def upgrade() -> None:
    for name in (
        "ix_flow_instance_flow_created",
        "ix_flow_instance_state_created",
        "ix_flow_instance_waiting_created",
    ):
        op.drop_index(name, table_name="flow_instance")
    _create("ix_flow_instance_flow", ["flow_name"])
    _create("ix_flow_instance_ended_created", ["state", "created_at", "id"], _ENDED)
    _create("ix_flow_instance_waiting_created", ["wake_kind", "created_at", "id"], _WAITING)


def downgrade() -> None:
    for name in (
        "ix_flow_instance_flow",
        "ix_flow_instance_ended_created",
        "ix_flow_instance_waiting_created",
    ):
        op.drop_index(name, table_name="flow_instance")
    _create("ix_flow_instance_flow_created", ["flow_name", "created_at", "id"])
    _create("ix_flow_instance_state_created", ["state", "created_at", "id"])
    _create("ix_flow_instance_waiting_created", ["wake_kind", "created_at", "id"], _SUSPENDED)
