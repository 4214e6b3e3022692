"""flowpark's outbox tables: the events an ``emit`` writes (``flow_outbox_event``), their
deliveries to subscribers (``flow_event_delivery``), and the reviews an escalation asks a
person for (``flow_review_item``); on :data:`flowpark.store.tables.metadata`, with the same
conventions as every table there (see :mod:`flowpark.store.tables`, which exports them too).
"""

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Column, Index, Integer, String, Text, UniqueConstraint, text
from sqlmodel import Field

from flowpark.store.table_base import (
    TABLE_CONFIG,
    FlowparkTable,
    instance_id_field,
    instant_field,
    int_field,
    json_field,
    sequence_field,
    str_field,
)

__all__ = ["EventDeliveryRow", "OutboxEventRow", "ReviewItemRow"]


class OutboxEventRow(FlowparkTable, table=True):
    """``flow_outbox_event``: domain events written by emit steps, for a publisher to relay."""

    model_config = TABLE_CONFIG
    __tablename__ = "flow_outbox_event"
    __table_args__ = (
        UniqueConstraint("id", name="uq_flow_outbox_event_id"),
        # events not yet relayed to the subscribers' deliveries (``published_at`` null)
        Index(
            "ix_flow_outbox_event_unpublished",
            "sequence",
            sqlite_where=text("published_at IS NULL"),
            postgresql_where=text("published_at IS NULL"),
        ),
        Index("ix_flow_outbox_event_instance", "instance_id"),
    )

    sequence: int | None = sequence_field()
    id: str = str_field("id", nullable=False)
    instance_id: str = instance_id_field("instance_id")
    name: str = str_field("name", nullable=False)
    payload: dict[str, Any] | None = json_field("payload")
    created_at: datetime = instant_field("created_at", nullable=False)
    published_at: datetime | None = instant_field("published_at")


class EventDeliveryRow(FlowparkTable, table=True):
    """``flow_event_delivery``: one outbox event's delivery to one subscriber.

    ``state`` is ``pending`` (due at ``next_try_at``), ``delivered`` or ``failed`` (its
    tries ran out). A node holds a pending delivery while it sends it (``claimed_by``,
    until ``claimed_until``). ``event_sequence`` orders an instance's events: a delivery is
    sent only once no earlier event of its instance is pending for the same subscriber.
    """

    model_config = TABLE_CONFIG
    __tablename__ = "flow_event_delivery"
    __table_args__ = (
        UniqueConstraint("subscriber", "event_id", name="uq_flow_event_delivery_event"),
        Index(
            "ix_flow_event_delivery_due",
            "next_try_at",
            sqlite_where=text("state = 'pending'"),
            postgresql_where=text("state = 'pending'"),
        ),
        Index("ix_flow_event_delivery_instance", "instance_id", "subscriber", "event_sequence"),
        Index("ix_flow_event_delivery_state", "state", "sequence"),
    )

    sequence: int | None = sequence_field()
    event_id: str = str_field("event_id", nullable=False)
    event_sequence: int = Field(
        default=None, sa_column=Column("event_sequence", BigInteger(), nullable=False)
    )
    instance_id: str = instance_id_field("instance_id")
    subscriber: str = str_field("subscriber", nullable=False)
    state: str = str_field("state", nullable=False)
    tries: int = Field(
        default=0,
        sa_column=Column("tries", Integer(), nullable=False, server_default=text("0")),
    )
    next_try_at: datetime | None = instant_field("next_try_at")
    last_error: str | None = Field(default=None, sa_column=Column("last_error", Text()))
    last_status: int | None = int_field("last_status")
    delivered_at: datetime | None = instant_field("delivered_at")
    claimed_by: str | None = str_field("claimed_by")
    claimed_until: datetime | None = instant_field("claimed_until")
    created_at: datetime = instant_field("created_at", nullable=False)


class ReviewItemRow(FlowparkTable, table=True):
    """``flow_review_item``: the human review queue; ``state`` is ``open``, ``claimed``,
    ``resolved`` or ``dismissed``, with who claimed and who closed an item, and when."""

    model_config = TABLE_CONFIG
    __tablename__ = "flow_review_item"
    __table_args__ = (
        UniqueConstraint("id", name="uq_flow_review_item_id"),
        Index("ix_flow_review_item_instance", "instance_id"),
        Index("ix_flow_review_item_state", "state", "sequence"),
    )

    sequence: int | None = sequence_field()
    id: str = str_field("id", nullable=False)
    instance_id: str = instance_id_field("instance_id")
    subject: str = str_field("subject", nullable=False)
    reason: str = Field(default=None, sa_column=Column("reason", Text(), nullable=False))
    details: dict[str, Any] | None = json_field("details")
    created_at: datetime = instant_field("created_at", nullable=False)
    state: str = Field(
        default="open",
        sa_column=Column("state", String(), nullable=False, server_default=text("'open'")),
    )
    claimed_by: str | None = str_field("claimed_by")
    claimed_at: datetime | None = instant_field("claimed_at")
    closed_by: str | None = str_field("closed_by")
    closed_at: datetime | None = instant_field("closed_at")
    note: str | None = Field(default=None, sa_column=Column("note", Text()))
