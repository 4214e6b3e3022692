"""trace context of the start: flow_instance.trace_context

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 00:00:00

A traced start stores its W3C trace context (``traceparent``, ``tracestate``) with the
instance, so every later run of it (a wake hours later, on any node) joins the start's
trace. NULL when the start was not traced.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "flow_instance", sa.Column("trace_context", sa.JSON(none_as_null=True), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("flow_instance") as batch:
        batch.drop_column("trace_context")
