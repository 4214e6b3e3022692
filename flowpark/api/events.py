"""The outbox: ``GET /api/v1/events`` (emitted events, in commit order); the review queue
is :mod:`flowpark.api.reviews`."""

from __future__ import annotations

from fastapi import APIRouter, Query

from flowpark.api.deps import EngineDep, ReadToken
from flowpark.api.inputs import MAX_SEQUENCE, JsonBodyRoute
from flowpark.api.models import EventView
from flowpark.api.openapi import problem_responses
from flowpark.api.views import API, event_view
from flowpark.errors import ErrorCode

__all__ = ["build_events_router"]


def build_events_router() -> APIRouter:
    """``GET /api/v1/events``."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute)

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
