"""The console's review queue: ``/ui/reviews`` (the items flows' ``request_review`` wrote,
filtered by the query string: ``state`` (repeatable, or ``any``; by default the items
waiting for a person: open and claimed), ``flow``, ``claimed_by``, ``instance``), one item
at ``/ui/reviews/{id}``, and its claim, resolve and dismiss as form posts (``POST
/ui/reviews/{id}/{verb}``, the session's CSRF token, an optional note), acted through the
API's own function (:func:`flowpark.api.reviews.act_on_review`): recorded with the token's
name and the engine clock's instant. Only a token with the ``operate`` scope sees and may
post the forms. A refusal (closed, claimed by another, unknown) is an error page naming its
code, as every console error is.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from flowpark.api.deps import engine_of, settings_of
from flowpark.api.inputs import check_instance_id
from flowpark.api.reviews import NOTE_CHARS, act_on_review, review_filter
from flowpark.engine.ports.reviews import ReviewState, ReviewVerb
from flowpark.errors import FlowparkError, InstanceNotFound, shown
from flowpark.ui.pages import ConsoleRoute, need_session, problem_page, render
from flowpark.ui.paths import inside, ui_root
from flowpark.ui.session import check_csrf, notice_is_signed, notice_signature

__all__ = ["WAITING_STATES", "build_reviews_router"]

#: The states the page shows when the query string names none: waiting for a person.
WAITING_STATES = (ReviewState.OPEN, ReviewState.CLAIMED)
#: Most items on a page.
PAGE = 200
_DONE = {
    ReviewVerb.CLAIM: "Claimed",
    ReviewVerb.RESOLVE: "Resolved",
    ReviewVerb.DISMISS: "Dismissed",
}


def _states(request: Request, notices: list[str]) -> tuple[list[ReviewState], bool]:
    """The states the query string asks for, and whether it named any (``any``: all)."""
    raw = [v for v in request.query_params.getlist("state") if v]
    if not raw:
        return list(WAITING_STATES), False
    if "any" in raw:
        return [], True
    chosen = []
    for value in raw:
        try:
            chosen.append(ReviewState(value))
        except ValueError:
            notices.append(f"state {shown(value, 40)!r} is not a review state: left out")
    return chosen, True


def _back(request: Request, value: str) -> str:
    """Where a form post returns: a review page of this console only (the queue otherwise)."""
    queue = f"{ui_root(request)}/reviews"
    return value if inside(queue, value) else queue


def build_reviews_router() -> APIRouter:
    """``GET /ui/reviews``, ``GET /ui/reviews/{id}`` and ``POST /ui/reviews/{id}/{verb}``."""
    router = APIRouter(prefix="/ui", include_in_schema=False, route_class=ConsoleRoute)

    @router.get("/reviews", response_class=HTMLResponse)
    async def reviews(request: Request) -> HTMLResponse:
        session = need_session(request)
        engine = engine_of(request)
        notices: list[str] = []
        states, named = _states(request, notices)
        q = request.query_params
        instance = (q.get("instance") or "").strip() or None
        if instance is not None:
            try:
                check_instance_id(instance)
            except FlowparkError:
                notices.append(f"instance {shown(instance, 40)!r} is not an instance id: left out")
                instance = None
        where = review_filter(
            states, instance, (q.get("flow") or "").strip(), (q.get("claimed_by") or "").strip()
        )
        try:
            items = await engine.store.reviews.find_reviews(where, limit=PAGE)
        except InstanceNotFound:  # an id no instance can have: no item has it
            items = []
            notices.append(f"instance {shown(instance or '', 40)!r} is not an instance id")
        notices += _signed_notices(request)
        return render(
            request,
            "reviews.html",
            {
                "session": session,
                "section": "reviews",
                "items": items,
                "f": where,
                "named": named,
                "states": [s.value for s in ReviewState],
                "flow_names": sorted({p.name for p in engine.catalog.plans()}),
                "notices": notices,
                "here": _here(request),
                "note_chars": NOTE_CHARS,
                "page": PAGE,
            },
        )

    @router.get("/reviews/{review_id}", response_class=HTMLResponse)
    async def review(request: Request, review_id: str) -> HTMLResponse:
        session = need_session(request)
        engine = engine_of(request)
        item = await engine.store.reviews.get_review(review_id[:200])
        try:
            instance = await engine.store.reads.get_instance(item.instance_id)
        except FlowparkError:  # purged since
            instance = None
        return render(
            request,
            "review.html",
            {
                "session": session,
                "section": "reviews",
                "r": item,
                "instance": instance,
                "notices": _signed_notices(request),
                "here": f"{ui_root(request)}/reviews/{quote(item.id)}",
                "note_chars": NOTE_CHARS,
            },
        )

    @router.post("/reviews/{review_id}/{verb}")
    async def act(
        request: Request,
        review_id: str,
        verb: str,
        csrf: str = Form(""),
        note: str = Form(""),
        back: str = Form(""),
    ) -> Response:
        session = need_session(request)
        if verb not in {v.value for v in ReviewVerb}:
            return problem_page(
                request, 404, "not_found", "No such action", f"No action {shown(verb)!r}."
            )
        if not session.can_operate:
            return problem_page(
                request,
                403,
                "forbidden",
                "Not allowed",
                f"Token {session.principal.name!r} lacks the 'operate' scope.",
            )
        if not check_csrf(session, csrf):
            return problem_page(
                request,
                403,
                "csrf_invalid",
                "Refused",
                "The form's CSRF token is not this session's: reload the page and try again.",
            )
        done = await act_on_review(
            engine_of(request),
            session.principal.name,
            review_id,
            ReviewVerb(verb),
            # a browser sends a textarea's line breaks as CR LF: a note's lines end in LF
            note.replace("\r\n", "\n")[:NOTE_CHARS],
        )
        text = f"{_DONE[ReviewVerb(verb)]} by {session.principal.name}: {done.subject}."
        signature = notice_signature(settings_of(request), text)
        target = _back(request, back)
        joiner = "&" if "?" in target else "?"
        query = urlencode({"done": text, "ds": signature})
        return RedirectResponse(f"{target}{joiner}{query}", status_code=303)

    return router


def _here(request: Request) -> str:
    """This page's URL without the notice of a previous post (where a form returns)."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k not in ("done", "ds")]
    return request.url.path + (f"?{urlencode(kept)}" if kept else "")


def _signed_notices(request: Request) -> list[str]:
    done = request.query_params.get("done")
    if done and notice_is_signed(settings_of(request), done, request.query_params.get("ds")):
        return [done]
    return []
