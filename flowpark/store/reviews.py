"""SQL of the review queue (``flow_review_item``): lists, reads and people's actions on items
(:class:`flowpark.engine.ports.reviews.Reviews`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, Table, func, select, update

from flowpark.engine.ports.reviews import (
    ReviewAct,
    ReviewFilter,
    ReviewRecord,
    ReviewState,
    act_on,
)
from flowpark.errors import ReviewNotFound
from flowpark.store.base import SqlRole
from flowpark.store.mapping import INSTANCE
from flowpark.store.tables import ReviewItemRow

__all__ = ["SqlReviews", "review_record"]

REVIEW: Table = ReviewItemRow.__table__  # type: ignore[attr-defined]
_OPEN = (ReviewState.OPEN.value, ReviewState.CLAIMED.value)


def review_record(m: Any, flow: str | None) -> ReviewRecord:
    """A review row's mapping (and its instance's flow name) as a record."""
    return ReviewRecord(
        sequence=m["sequence"],
        id=m["id"],
        instance_id=m["instance_id"],
        flow=flow or "",
        subject=m["subject"],
        reason=m["reason"],
        details=m["details"] or {},
        created_at=m["created_at"],
        state=ReviewState(m["state"]),
        claimed_by=m["claimed_by"],
        claimed_at=m["claimed_at"],
        closed_by=m["closed_by"],
        closed_at=m["closed_at"],
        note=m["note"],
    )


def _query() -> Select[Any]:
    return select(REVIEW, INSTANCE.c.flow_name).select_from(
        REVIEW.outerjoin(INSTANCE, INSTANCE.c.id == REVIEW.c.instance_id)
    )


class SqlReviews(SqlRole):
    """The review queue over SQL."""

    async def find_reviews(
        self, where: ReviewFilter, limit: int = 100, after: int | None = None
    ) -> list[ReviewRecord]:
        """See :meth:`flowpark.engine.ports.reviews.Reviews.find_reviews`."""
        query = _query()
        if where.states:
            query = query.where(REVIEW.c.state.in_([s.value for s in where.states]))
        if where.instance_id is not None:
            query = query.where(REVIEW.c.instance_id == where.instance_id)
        if where.flow is not None:
            query = query.where(INSTANCE.c.flow_name == where.flow)
        if where.claimed_by is not None:
            query = query.where(REVIEW.c.claimed_by == where.claimed_by)
        if after is not None:
            query = query.where(REVIEW.c.sequence > after)
        async with self._read() as conn:
            rows = await conn.execute(query.order_by(REVIEW.c.sequence).limit(limit))
            return [review_record(r._mapping, r.flow_name) for r in rows]

    async def get_review(self, review_id: str) -> ReviewRecord:
        """See :meth:`flowpark.engine.ports.reviews.Reviews.get_review`."""
        async with self._read() as conn:
            row = (await conn.execute(_query().where(REVIEW.c.id == review_id))).first()
        if row is None:
            raise ReviewNotFound(f"no review {review_id!r}", review_id=review_id)
        return review_record(row._mapping, row.flow_name)

    async def act_on_review(self, act: ReviewAct) -> ReviewRecord:
        """See :meth:`flowpark.engine.ports.reviews.Reviews.act_on_review`: the change is
        written only if the item's state and claimant are still as read (else it is read
        and decided again)."""
        while True:
            record = await self.get_review(act.review_id)
            change = act_on(record, act)
            if change is None:
                return record
            query = (
                update(REVIEW)
                .where(
                    REVIEW.c.id == record.id,
                    REVIEW.c.state == record.state.value,
                    REVIEW.c.claimed_by.is_(None)
                    if record.claimed_by is None
                    else REVIEW.c.claimed_by == record.claimed_by,
                )
                .values(**change)
            )
            async with self._write() as conn:
                written = bool((await conn.execute(query)).rowcount)
            if written:
                return await self.get_review(act.review_id)

    async def count_reviews(self) -> dict[ReviewState, int]:
        """See :meth:`flowpark.engine.ports.reviews.Reviews.count_reviews`."""
        query = select(REVIEW.c.state, func.count()).group_by(REVIEW.c.state)
        async with self._read() as conn:
            found = {str(s): int(n) for s, n in await conn.execute(query)}
        return {s: found.get(s.value, 0) for s in ReviewState}

    async def oldest_open(self) -> datetime | None:
        """See :meth:`flowpark.engine.ports.reviews.Reviews.oldest_open`."""
        query = select(func.min(REVIEW.c.created_at)).where(REVIEW.c.state.in_(_OPEN))
        async with self._read() as conn:
            value = (await conn.execute(query)).scalar_one_or_none()
        return value if isinstance(value, datetime) else None
