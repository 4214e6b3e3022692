"""The review queue in memory: the twin of :class:`flowpark.store.reviews.SqlReviews` over
a :class:`~flowpark.store.memory_state.MemoryState`'s ``reviews``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flowpark.engine.ports.reviews import (
    ReviewAct,
    ReviewFilter,
    ReviewRecord,
    ReviewState,
    act_on,
)
from flowpark.engine.records import ReviewRequest
from flowpark.errors import ReviewNotFound
from flowpark.store.memory_state import MemoryState, copy_json

__all__ = ["MemoryReviews", "add_reviews"]


def add_reviews(
    state: MemoryState, instance_id: str, reviews: tuple[ReviewRequest, ...], at: datetime
) -> None:
    """Queue ``reviews`` (asked by the instance's journal row committed ``at``)."""
    for review in reviews:
        state.reviews.append(
            {
                "sequence": next(state.sequence),
                "id": review.id,
                "instance_id": instance_id,
                "subject": review.subject,
                "reason": review.reason,
                "details": copy_json(dict(review.details)),
                "created_at": at,
                "state": ReviewState.OPEN.value,
                "claimed_by": None,
                "claimed_at": None,
                "closed_by": None,
                "closed_at": None,
                "note": None,
            }
        )


class MemoryReviews:
    """The review queue of one :class:`~flowpark.store.memory.MemoryStore`."""

    def __init__(self, state: MemoryState) -> None:
        self._s = state

    def _record(self, item: dict[str, Any]) -> ReviewRecord:
        inst = self._s.instances.get(item["instance_id"])
        return ReviewRecord(
            sequence=item["sequence"],
            id=item["id"],
            instance_id=item["instance_id"],
            flow=inst.flow_name if inst is not None else "",
            subject=item["subject"],
            reason=item["reason"],
            details=copy_json(item["details"]),
            created_at=item["created_at"],
            state=ReviewState(item["state"]),
            claimed_by=item["claimed_by"],
            claimed_at=item["claimed_at"],
            closed_by=item["closed_by"],
            closed_at=item["closed_at"],
            note=item["note"],
        )

    def _item(self, review_id: str) -> dict[str, Any]:
        for item in self._s.reviews:
            if item["id"] == review_id:
                return item
        raise ReviewNotFound(f"no review {review_id!r}", review_id=review_id)

    async def find_reviews(
        self, where: ReviewFilter, limit: int = 100, after: int | None = None
    ) -> list[ReviewRecord]:
        """See :meth:`flowpark.engine.ports.reviews.Reviews.find_reviews`."""
        records = (self._record(i) for i in self._s.reviews)
        chosen = [r for r in records if (after is None or r.sequence > after) and where.selects(r)]
        return chosen[:limit]

    async def get_review(self, review_id: str) -> ReviewRecord:
        """See :meth:`flowpark.engine.ports.reviews.Reviews.get_review`."""
        return self._record(self._item(review_id))

    async def act_on_review(self, act: ReviewAct) -> ReviewRecord:
        """See :meth:`flowpark.engine.ports.reviews.Reviews.act_on_review`."""
        item = self._item(act.review_id)
        change = act_on(self._record(item), act)
        if change is not None:
            item.update(change)
        return self._record(item)

    async def count_reviews(self) -> dict[ReviewState, int]:
        """See :meth:`flowpark.engine.ports.reviews.Reviews.count_reviews`."""
        counts = dict.fromkeys(ReviewState, 0)
        for item in self._s.reviews:
            counts[ReviewState(item["state"])] += 1
        return counts

    async def oldest_open(self) -> datetime | None:
        """See :meth:`flowpark.engine.ports.reviews.Reviews.oldest_open`."""
        opened = [i["created_at"] for i in self._s.reviews if not ReviewState(i["state"]).closed]
        return min(opened, default=None)
