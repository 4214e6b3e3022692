"""The counts behind the gauges of ``/metrics``: one grouped query over the instances that
have not ended, and one over the pending event deliveries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Integer, and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from flowpark.store.db import READ_ONLY
from flowpark.store.mapping import INSTANCE
from flowpark.store.provider_tables import PROVIDER
from flowpark.store.tables import ACTIVE_STATES, EventDeliveryRow, ReviewItemRow

__all__ = [
    "FlowCounts",
    "active_counts",
    "pending_deliveries",
    "provider_rates",
    "waiting_reviews",
]

REVIEW = ReviewItemRow.__table__  # type: ignore[attr-defined]
#: The review states that wait for a person.
WAITING_REVIEW_STATES = ("open", "claimed")

DELIVERY = EventDeliveryRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class FlowCounts:
    """The instances of one flow that have not ended.

    Attributes:
        flow: the flow name.
        parked: suspended instances (waiting for a wake or a signal).
        running: running instances under a live lease.
        overdue: parked instances whose ``wake_at`` is before ``overdue_before``.
        stuck: running instances whose lease expired before ``stuck_before`` (no node is
            advancing them; the sweep takes them over).
    """

    flow: str
    parked: int
    running: int
    overdue: int
    stuck: int


def _count(condition: ColumnElement[bool]) -> ColumnElement[int]:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0).cast(Integer)


async def active_counts(
    engine: AsyncEngine, now: datetime, overdue_before: datetime, stuck_before: datetime
) -> list[FlowCounts]:
    """Count the instances that have not ended, by flow: one query.

    Args:
        engine: the service's database engine.
        now: the engine clock's instant (aware UTC): a lease expiring before it is expired.
        overdue_before: a parked instance due before this instant is overdue.
        stuck_before: a running instance whose lease expired before this instant is stuck.

    Returns:
        One :class:`FlowCounts` per flow with an instance that has not ended, by name.

    Raises:
        sqlalchemy.exc.SQLAlchemyError / OSError: the database could not be read.
    """
    state = INSTANCE.c.state
    lease = INSTANCE.c.lease_expires_at
    query = (
        select(
            INSTANCE.c.flow_name,
            _count(state == "suspended").label("parked"),
            _count(and_(state == "running", lease >= now)).label("running"),
            _count(and_(state == "suspended", INSTANCE.c.wake_at < overdue_before)).label(
                "overdue"
            ),
            _count(and_(state == "running", lease < stuck_before)).label("stuck"),
        )
        .where(state.in_(list(ACTIVE_STATES)))
        .group_by(INSTANCE.c.flow_name)
        .order_by(INSTANCE.c.flow_name)
    )
    async with engine.execution_options(**READ_ONLY).connect() as conn:
        rows = (await conn.execute(query)).all()
    return [FlowCounts(r.flow_name, r.parked, r.running, r.overdue, r.stuck) for r in rows]


async def pending_deliveries(engine: AsyncEngine) -> dict[str, int]:
    """Count the pending event deliveries (due or waiting for their next send), by
    subscriber: one grouped query that reads the pending rows only, through an index (the
    partial ``ix_flow_event_delivery_due`` on PostgreSQL, ``ix_flow_event_delivery_state`` on
    SQLite), as :func:`active_counts` reads the instances that have not ended.

    Args:
        engine: the service's database engine.

    Returns:
        The number of pending deliveries of each subscriber that has one.

    Raises:
        sqlalchemy.exc.SQLAlchemyError / OSError: the database could not be read.
    """
    query = (
        select(DELIVERY.c.subscriber, func.count().label("pending"))
        .where(DELIVERY.c.state == "pending")
        .group_by(DELIVERY.c.subscriber)
    )
    async with engine.execution_options(**READ_ONLY).connect() as conn:
        rows = (await conn.execute(query)).all()
    return {r.subscriber: int(r.pending) for r in rows}


async def provider_rates(engine: AsyncEngine) -> list[tuple[str, float, float]]:
    """Each declared provider's limit and effective rate (calls per second): one read of
    ``flow_provider``'s rows (one per provider).

    Args:
        engine: the service's database engine.

    Returns:
        ``(name, limit, effective rate)`` per provider, by name.

    Raises:
        sqlalchemy.exc.SQLAlchemyError / OSError: the database could not be read.
    """
    columns = PROVIDER.c
    query = select(columns.name, columns.rate_per_second, columns.effective_rate).order_by(
        columns.name
    )
    async with engine.execution_options(**READ_ONLY).connect() as conn:
        rows = (await conn.execute(query)).all()
    return [(r.name, float(r.rate_per_second), float(r.effective_rate)) for r in rows]


async def waiting_reviews(engine: AsyncEngine) -> tuple[dict[str, int], datetime | None]:
    """Count the review items that wait for a person (``open``, ``claimed``) and find when
    the oldest of them was asked for: one grouped query over those rows, through
    ``ix_flow_review_item_state``.

    Args:
        engine: the service's database engine.

    Returns:
        ``({"open": n, "claimed": n}, oldest created_at or None)``.

    Raises:
        sqlalchemy.exc.SQLAlchemyError / OSError: the database could not be read.
    """
    query = (
        select(REVIEW.c.state, func.count().label("n"), func.min(REVIEW.c.created_at))
        .where(REVIEW.c.state.in_(WAITING_REVIEW_STATES))
        .group_by(REVIEW.c.state)
    )
    async with engine.execution_options(**READ_ONLY).connect() as conn:
        rows = (await conn.execute(query)).all()
    counts = dict.fromkeys(WAITING_REVIEW_STATES, 0)
    oldest: datetime | None = None
    for state, n, first in rows:
        counts[str(state)] = int(n)
        if first is not None and (oldest is None or first < oldest):
            oldest = first
    return counts, oldest
