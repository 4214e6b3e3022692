"""lifecycle: event deliveries, discarded signals, indexes for the retention purge

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 00:00:00

``event_delivery`` holds one row per outbox event and subscriber (its state, tries, last
error, next try, the node that holds it while sending). ``outbox_event.published_at`` is set
once an event's deliveries are written; ``ix_outbox_event_unpublished`` finds the events
still to relay. ``flow_signal.discarded_at``/``discarded_reason`` mark a signal that the
instance ended without taking. Outbox events and review items get an index on their
instance, so the retention purge deletes an instance's rows without a scan.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration never imports app code that may change.
_SEQUENCE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_INSTANT = sa.DateTime(timezone=True)
_INSTANCE_ID = sa.String().with_variant(postgresql.UUID(as_uuid=False), "postgresql")


def upgrade() -> None:
    op.create_table(
        "event_delivery",
        sa.Column("sequence", _SEQUENCE, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(), nullable=False),
        sa.Column("event_sequence", sa.BigInteger(), nullable=False),
        sa.Column("instance_id", _INSTANCE_ID, nullable=False),
        sa.Column("subscriber", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("next_try_at", _INSTANT, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("delivered_at", _INSTANT, nullable=True),
        sa.Column("claimed_by", sa.String(), nullable=True),
        sa.Column("claimed_until", _INSTANT, nullable=True),
        sa.Column("created_at", _INSTANT, nullable=False),
        sa.UniqueConstraint("subscriber", "event_id", name="uq_event_delivery_event"),
    )
    pending = sa.text("state = 'pending'")
    op.create_index(
        "ix_event_delivery_due",
        "event_delivery",
        ["next_try_at"],
        sqlite_where=pending,
        postgresql_where=pending,
    )
    op.create_index(
        "ix_event_delivery_instance",
        "event_delivery",
        ["instance_id", "subscriber", "event_sequence"],
    )
    op.create_index("ix_event_delivery_state", "event_delivery", ["state", "sequence"])
    unpublished = sa.text("published_at IS NULL")
    op.create_index(
        "ix_outbox_event_unpublished",
        "outbox_event",
        ["sequence"],
        sqlite_where=unpublished,
        postgresql_where=unpublished,
    )
    op.create_index("ix_outbox_event_instance", "outbox_event", ["instance_id"])
    op.create_index("ix_review_item_instance", "review_item", ["instance_id"])
    with op.batch_alter_table("flow_signal") as batch:
        batch.add_column(sa.Column("discarded_at", _INSTANT, nullable=True))
        batch.add_column(sa.Column("discarded_reason", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("flow_signal") as batch:
        batch.drop_column("discarded_reason")
        batch.drop_column("discarded_at")
    op.drop_index("ix_review_item_instance", table_name="review_item")
    op.drop_index("ix_outbox_event_instance", table_name="outbox_event")
    op.drop_index("ix_outbox_event_unpublished", table_name="outbox_event")
    op.drop_index("ix_event_delivery_state", table_name="event_delivery")
    op.drop_index("ix_event_delivery_instance", table_name="event_delivery")
    op.drop_index("ix_event_delivery_due", table_name="event_delivery")
    op.drop_table("event_delivery")
