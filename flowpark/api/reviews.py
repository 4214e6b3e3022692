"""The review queue: ``GET /api/v1/reviews`` (filtered, oldest first), ``GET
/api/v1/reviews/{review_id}``, and a person's actions on an item: ``POST .../claim``,
``.../resolve`` and ``.../dismiss`` (each recorded with the token's name and the engine
clock's instant).

An item is ``open`` until claimed; ``resolved`` and ``dismissed`` close it. A claim
repeated by its claimant answers the item unchanged; an action by another person than the
claimant is 409 ``review_claimed``; any action on a closed item is 409 ``review_closed``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from flowpark.api.deps import EngineDep, OperateToken, ReadToken
from flowpark.api.hygiene import LINES, TEXT_RULE, NoteText, control_in
from flowpark.api.inputs import MAX_SEQUENCE, JsonBodyRoute, check_instance_id
from flowpark.api.models import ReviewView
from flowpark.api.openapi import problem_responses
from flowpark.api.views import API, review_view
from flowpark.engine.node.engine import Engine
from flowpark.engine.ports.reviews import ReviewAct, ReviewFilter, ReviewState, ReviewVerb
from flowpark.errors import ErrorCode, InputInvalid, InstanceNotFound, ReviewNotFound

__all__ = ["ReviewNote", "act_on_review", "build_reviews_router", "review_filter"]

#: Most characters of a note, and of a filter's text.
NOTE_CHARS = 2000
_TEXT = 200
#: What an action on one review can answer besides the item.
_ACT_CODES = (
    ErrorCode.REVIEW_NOT_FOUND,
    ErrorCode.REVIEW_CLOSED,
    ErrorCode.REVIEW_CLAIMED,
    ErrorCode.INPUT_INVALID,
)


class ReviewNote(BaseModel):
    """The body of a resolve or a dismiss (optional): a note on what was done."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"note": "re-ran the OCR by hand"}]}
    )

    note: NoteText | None = Field(
        None,
        max_length=NOTE_CHARS,
        description="What was done, and why: text of lines, with no control character but "
        "a tab and a line feed.",
    )


_NO_NOTE = ReviewNote(note=None)


def review_filter(
    states: list[ReviewState] | None = None,
    instance_id: str | None = None,
    flow: str | None = None,
    claimed_by: str | None = None,
) -> ReviewFilter:
    """The store's filter from the list's parameters (empty ones select any)."""
    return ReviewFilter(
        states=tuple(states or ()),
        instance_id=instance_id or None,
        flow=flow or None,
        claimed_by=claimed_by or None,
    )


async def act_on_review(
    engine: Engine, actor: str, review_id: str, verb: ReviewVerb, note: str | None = None
) -> ReviewView:
    """Claim, resolve or dismiss a review as ``actor``, now by the engine clock.

    Raises:
        ReviewNotFound, ReviewClosed, ReviewClaimed: see the module docstring.
        InputInvalid: the note holds a control character other than a tab or a line feed
            (422; the console's form posts here as the API does).
    """
    if len(review_id) > _TEXT:
        raise ReviewNotFound("no review with such an id", review_id=review_id[:_TEXT])
    found = control_in(note or "", LINES)
    if found is not None:
        why = f"holds U+{ord(found):04X} (a control character)"
        raise InputInvalid(
            f"the note {why}: {TEXT_RULE}",
            errors=[{"loc": ["body", "note"], "msg": why, "type": "value_error"}],
        )
    act = ReviewAct(review_id, verb, actor, engine.clock.now(), (note or "").strip() or None)
    return review_view(await engine.store.reviews.act_on_review(act))


def build_reviews_router() -> APIRouter:
    """``GET /api/v1/reviews``, ``GET /api/v1/reviews/{review_id}`` and the actions."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute, tags=["reviews"])

    @router.get(
        "/reviews",
        operation_id="list_reviews",
        responses=problem_responses(ErrorCode.INPUT_INVALID),
    )
    async def reviews(
        token: ReadToken,
        engine: EngineDep,
        limit: int = Query(100, ge=1, le=1000),
        after: int | None = Query(
            None, ge=0, le=MAX_SEQUENCE, description="Only items after this `sequence`."
        ),
        state: list[ReviewState] | None = Query(
            None, description="Any of these states (repeat the parameter for several)."
        ),
        instance_id: str | None = Query(
            None, alias="instanceId", max_length=_TEXT, description="Of this instance."
        ),
        flow: str | None = Query(
            None, max_length=_TEXT, description="Of instances of this flow name."
        ),
        claimed_by: str | None = Query(
            None, alias="claimedBy", max_length=_TEXT, description="Claimed by this person."
        ),
    ) -> list[ReviewView]:
        """The human review queue, oldest first: the items that flows' `request_review`
        wrote, with where each is (`state`) and who claimed or closed it, when. Page with
        `after` (the last item's `sequence`)."""
        where = review_filter(state, instance_id, flow, claimed_by)
        try:
            if instance_id:
                check_instance_id(instance_id)
            items = await engine.store.reviews.find_reviews(where, limit, after)
        except InstanceNotFound:  # an id that cannot name an instance names no item
            return []
        return [review_view(i) for i in items]

    @router.get(
        "/reviews/{review_id}",
        operation_id="get_review",
        responses=problem_responses(ErrorCode.REVIEW_NOT_FOUND),
    )
    async def review(
        token: ReadToken,
        engine: EngineDep,
        review_id: Annotated[str, Path(description="The review's id.")],
    ) -> ReviewView:
        """One review item; 404 `review_not_found` for an unknown id."""
        if len(review_id) > _TEXT:
            raise ReviewNotFound("no review with such an id", review_id=review_id[:_TEXT])
        return review_view(await engine.store.reviews.get_review(review_id))

    @router.post(
        "/reviews/{review_id}/claim",
        operation_id="claim_review",
        responses=problem_responses(*_ACT_CODES),
    )
    async def claim(
        token: OperateToken,
        engine: EngineDep,
        review_id: Annotated[str, Path(description="The review's id.")],
    ) -> ReviewView:
        """Claim an open review: it is yours to resolve or dismiss (`claimedBy` is your
        token's name, `claimedAt` now). Claiming it again is a no-op; 409 `review_claimed`
        when another person holds it, 409 `review_closed` once resolved or dismissed."""
        return await act_on_review(engine, token.name, review_id, ReviewVerb.CLAIM)

    @router.post(
        "/reviews/{review_id}/resolve",
        operation_id="resolve_review",
        responses=problem_responses(*_ACT_CODES),
    )
    async def resolve(
        token: OperateToken,
        engine: EngineDep,
        review_id: Annotated[str, Path(description="The review's id.")],
        body: Annotated[ReviewNote, Body()] = _NO_NOTE,
    ) -> ReviewView:
        """Resolve a review (open, or claimed by you), with an optional `note`: it is
        closed, `closedBy` your token's name, `closedAt` now. 409 `review_claimed` when
        another person holds it, 409 `review_closed` when already closed."""
        note = body.note
        return await act_on_review(engine, token.name, review_id, ReviewVerb.RESOLVE, note)

    @router.post(
        "/reviews/{review_id}/dismiss",
        operation_id="dismiss_review",
        responses=problem_responses(*_ACT_CODES),
    )
    async def dismiss(
        token: OperateToken,
        engine: EngineDep,
        review_id: Annotated[str, Path(description="The review's id.")],
        body: Annotated[ReviewNote, Body()] = _NO_NOTE,
    ) -> ReviewView:
        """Dismiss a review (nothing to do), with an optional `note`; as resolve
        otherwise."""
        note = body.note
        return await act_on_review(engine, token.name, review_id, ReviewVerb.DISMISS, note)

    return router
