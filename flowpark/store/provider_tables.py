"""The providers' tables: ``flow_provider`` (one row per provider: its limit, its shared
schedule of call slots, its pushback state), ``flow_provider_minute`` (call outcomes per provider
and minute) and ``flow_correlation`` (a provider's id a live instance's step recorded:
unique per flow and provider, written with the step's row, deleted when the instance
finishes). Registered on :data:`flowpark.store.tables.metadata` by importing
:mod:`flowpark.store.tables`.

The instants that SQL does arithmetic on (``next_slot_s``, ``refilled_s``, ``lowered_s``) are
engine-clock instants in seconds since the epoch (float), so one portable ``UPDATE`` can
refill, grant and recover on SQLite and PostgreSQL alike; every ``*_at`` column is a
:class:`~flowpark.store.types.UtcDateTime` as elsewhere.
"""

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)

from flowpark.store.table_base import metadata
from flowpark.store.types import InstanceId, UtcDateTime

__all__ = ["CORRELATION", "PROVIDER", "PROVIDER_MINUTE"]

PROVIDER = Table(
    "flow_provider",
    metadata,
    Column("name", String(), primary_key=True),
    Column("rate_per_second", Float(), nullable=False),
    Column("burst", Integer(), nullable=False),
    Column("max_in_flight", Integer(), nullable=True),
    Column("floor_ratio", Float(), nullable=False),
    Column("effective_rate", Float(), nullable=False),
    Column("next_slot_s", Float(), nullable=False),
    Column("refilled_s", Float(), nullable=False),
    Column("lowered_s", Float(), nullable=True),
    Column("last_granted", Integer(), nullable=False),
    Column("lowered_reason", Text(), nullable=True),
    Column("paused_until", UtcDateTime(), nullable=True),
    Column("pushbacks", BigInteger(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    Column("updated_by", String(), nullable=True),
)

PROVIDER_MINUTE = Table(
    "flow_provider_minute",
    metadata,
    Column("provider", String(), nullable=False),
    Column("minute", UtcDateTime(), nullable=False),
    Column("ok", Integer(), nullable=False),
    Column("pushback", Integer(), nullable=False),
    Column("failed", Integer(), nullable=False),
    Column("deferred", Integer(), nullable=False),
    PrimaryKeyConstraint("provider", "minute", name="pk_flow_provider_minute"),
)

CORRELATION = Table(
    "flow_correlation",
    metadata,
    Column("flow_name", String(), nullable=False, primary_key=True),
    Column("provider", String(), nullable=False, primary_key=True),
    Column("key", String(), nullable=False, primary_key=True),
    Column("instance_id", InstanceId(), nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Index("ix_flow_correlation_instance", "instance_id"),
)
