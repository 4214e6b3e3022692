"""The outbox and the review queue: ``GET /api/v1/events`` (emitted events, in commit
order) and ``GET /api/v1/reviews`` (the human review queue, oldest first)."""

from __future__ import annotations

from fastapi import APIRouter, Query

from flowpark.api.deps import EngineDep, ReadToken
from flowpark.api.inputs import MAX_SEQUENCE, JsonBodyRoute
from flowpark.api.models import EventView, ReviewView
from flowpark.api.openapi import problem_responses
from flowpark.api.views import API, event_view, review_view
from flowpark.errors import ErrorCode

__all__ = ["build_events_router"]


def build_events_router() -> APIRouter:
    """``GET /api/v1/reviews`` and ``GET /api/v1/events``."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute)

    @router.get(
        "/reviews",
        tags=["reviews"],
        operation_id="list_reviews",
        responses=problem_responses(ErrorCode.INPUT_INVALID),
    )
    async def reviews(
        token: ReadToken, engine: EngineDep, limit: int = Query(100, ge=1, le=1000)
    ) -> list[ReviewView]:
        """The human review queue, oldest first."""
        items = await engine.store.reads.list_reviews(limit)
        return [review_view(i) for i in items]

    @router.get(
        "/events",
        tags=["events"],
        operation_id="list_events",
        responses=problem_responses(ErrorCode.INPUT_INVALID),
    )
    async def events(
        token: ReadToken,
        engine: EngineDep,
        limit: int = Query(100, ge=1, le=1000),
        after: int | None = Query(None, ge=0, le=MAX_SEQUENCE),
    ) -> list[EventView]:
        """The outbox of emitted events, in commit order (``after``: a sequence)."""
        items = await engine.store.reads.list_events(limit, after)
        return [event_view(i) for i in items]

    return router
