"""initial schema: instances, journal, signals, idempotency, outbox, reviews, heartbeats, streams

Revision ID: 0001
Revises:
Create Date: 2026-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration never imports app code that may change.
INSTANT = sa.DateTime(timezone=True)  # flowpark.store.types.UtcDateTime: timestamptz / naive UTC
SEQUENCE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _json() -> sa.JSON:
    return sa.JSON(none_as_null=True)


def _partial(where: str) -> dict[str, sa.TextClause]:
    return {"sqlite_where": sa.text(where), "postgresql_where": sa.text(where)}


def upgrade() -> None:
    op.create_table(
        "flow_instance",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("flow_name", sa.String(), nullable=False),
        sa.Column("flow_version", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("input", _json(), nullable=True),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.Column("updated_at", INSTANT, nullable=False),
        sa.Column("deadline_at", INSTANT, nullable=True),
        sa.Column("wake_at", INSTANT, nullable=True),
        sa.Column("wake_step_id", sa.Integer(), nullable=True),
        sa.Column("wake_scope", sa.Integer(), nullable=True),
        sa.Column("lease_owner", sa.String(), nullable=True),
        sa.Column("lease_expires_at", INSTANT, nullable=True),
        sa.Column("fencing_token", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("ending", sa.String(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("result", _json(), nullable=True),
        sa.Column("error_code", sa.String(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("error_details", _json(), nullable=True),
        sa.Column("instance_key", sa.String(), nullable=True),
        sa.Column("attempt_step_id", sa.Integer(), nullable=True),
        sa.Column("attempt_scope", sa.Integer(), nullable=True),
        sa.Column("attempt_try", sa.Integer(), nullable=True),
        sa.Column("attempt_started_at", INSTANT, nullable=True),
        sa.Column("heartbeat_at", INSTANT, nullable=True),
        sa.Column("heartbeat_value", _json(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_flow_instance_wake_suspended",
        "flow_instance",
        ["wake_at"],
        **_partial("state = 'suspended'"),
    )
    op.create_index(
        "ix_flow_instance_lease_running",
        "flow_instance",
        ["lease_expires_at"],
        **_partial("state = 'running'"),
    )
    op.create_index(
        "uq_flow_instance_active_key",
        "flow_instance",
        ["flow_name", "instance_key"],
        unique=True,
        **_partial("instance_key IS NOT NULL AND state IN ('running', 'suspended')"),
    )

    op.create_table(
        "flow_step",
        sa.Column("sequence", SEQUENCE, autoincrement=True, nullable=False),
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("step_id", sa.Integer(), nullable=False),
        sa.Column("scope", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("capability_id", sa.String(), nullable=False),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("values", _json(), nullable=True),
        sa.Column("error_type", sa.String(), nullable=True),
        sa.Column("error_detail", sa.Text(), nullable=True),
        sa.Column("final", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("next_try_at", INSTANT, nullable=True),
        sa.Column("started_at", INSTANT, nullable=False),
        sa.Column("committed_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("sequence"),
        sa.UniqueConstraint(
            "instance_id", "step_id", "scope", "kind", "try_number", name="uq_flow_step_execution"
        ),
    )
    op.create_index("ix_flow_step_instance_id", "flow_step", ["instance_id"])

    op.create_table(
        "flow_signal",
        sa.Column("sequence", SEQUENCE, autoincrement=True, nullable=False),
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("payload", _json(), nullable=True),
        sa.Column("idempotency_key", sa.String(), nullable=True),
        sa.Column("received_at", INSTANT, nullable=False),
        sa.Column("taken_at", INSTANT, nullable=True),
        sa.Column("taken_step_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("sequence"),
        sa.UniqueConstraint("id", name="uq_flow_signal_id"),
        sa.UniqueConstraint("instance_id", "idempotency_key", name="uq_flow_signal_idempotency"),
    )
    op.create_index("ix_flow_signal_instance_id", "flow_signal", ["instance_id"])

    op.create_table(
        "idempotency_record",
        sa.Column("flow_name", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("request_hash", sa.String(), nullable=True),
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("flow_name", "key", name="pk_idempotency_record"),
    )

    op.create_table(
        "outbox_event",
        sa.Column("sequence", SEQUENCE, autoincrement=True, nullable=False),
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("payload", _json(), nullable=True),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.Column("published_at", INSTANT, nullable=True),
        sa.PrimaryKeyConstraint("sequence"),
        sa.UniqueConstraint("id", name="uq_outbox_event_id"),
    )

    op.create_table(
        "review_item",
        sa.Column("sequence", SEQUENCE, autoincrement=True, nullable=False),
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("subject", sa.String(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("details", _json(), nullable=True),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("sequence"),
        sa.UniqueConstraint("id", name="uq_review_item_id"),
    )

    op.create_table(
        "flow_heartbeat",
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("step_id", sa.Integer(), nullable=False),
        sa.Column("scope", sa.Integer(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("value", _json(), nullable=True),
        sa.Column("recorded_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("instance_id", "step_id", "scope", name="pk_flow_heartbeat"),
    )

    op.create_table(
        "flow_stream",
        sa.Column("sequence", SEQUENCE, autoincrement=True, nullable=False),
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("stream", sa.String(), nullable=False),
        sa.Column("payload", _json(), nullable=True),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_at", INSTANT, nullable=False),
        sa.PrimaryKeyConstraint("sequence"),
    )
    op.create_index("ix_flow_stream_read", "flow_stream", ["instance_id", "stream", "sequence"])


def downgrade() -> None:
    op.drop_index("ix_flow_stream_read", table_name="flow_stream")
    op.drop_table("flow_stream")
    op.drop_table("flow_heartbeat")
    op.drop_table("review_item")
    op.drop_table("outbox_event")
    op.drop_table("idempotency_record")
    op.drop_index("ix_flow_signal_instance_id", table_name="flow_signal")
    op.drop_table("flow_signal")
    op.drop_index("ix_flow_step_instance_id", table_name="flow_step")
    op.drop_table("flow_step")
    op.drop_index("uq_flow_instance_active_key", table_name="flow_instance")
    op.drop_index("ix_flow_instance_lease_running", table_name="flow_instance")
    op.drop_index("ix_flow_instance_wake_suspended", table_name="flow_instance")
    op.drop_table("flow_instance")
