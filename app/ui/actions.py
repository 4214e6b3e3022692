"""Operator actions from the console: wake now, extend budget, cancel.

Each action is a confirmation page (``GET /ui/instances/{id}/actions/{name}``) whose form
posts the session's CSRF token back (``POST`` the same URL). Only a token with the
``operate`` scope sees the buttons; any other is refused on both (403), and so is a post
without the session's CSRF token. The action itself is the engine's, as the API's route
calls it; the page then shows the instance again with what happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.api.routes import check_instance_id
from app.engine.deadlines import open_budget
from app.engine.engine import Engine
from app.errors import InstanceEnded
from app.ui.pages import ConsoleRoute, need_session, problem_page, render
from app.ui.session import Session, check_csrf

__all__ = ["ACTIONS", "Action", "build_actions_router"]


@dataclass(frozen=True)
class Action:
    """One operator action: its URL name, button label and confirmation sentence."""

    name: str
    label: str
    explain: str


ACTIONS = {
    a.name: a
    for a in (
        Action(
            "wake",
            "Wake now",
            "The instance runs its next step or attempt now instead of at its wake instant.",
        ),
        Action(
            "extend",
            "Extend budget",
            "The poll's budget ends later by the chosen amount; attempts go on until then.",
        ),
        Action(
            "cancel",
            "Cancel",
            "Compensations of completed steps run once, in reverse order, and the instance "
            "ends cancelled. This cannot be undone.",
        ),
    )
}
#: What the extend form offers (ISO 8601 duration, label).
EXTEND_CHOICES = (
    ("PT15M", "15 minutes"),
    ("PT1H", "1 hour"),
    ("PT4H", "4 hours"),
    ("P1D", "1 day"),
)


def _engine(request: Request) -> Engine:
    return cast(Engine, request.app.state.engine)


def _refusal(request: Request, session: Session, name: str) -> HTMLResponse | None:
    if name not in ACTIONS:
        return problem_page(request, 404, "not_found", "No such action", f"No action {name!r}.")
    if not session.can_operate:
        return problem_page(
            request,
            403,
            "forbidden",
            "Not allowed",
            f"Token {session.principal.name!r} lacks the 'operate' scope.",
        )
    return None


def build_actions_router() -> APIRouter:
    """The confirmation pages and posts of the operator actions."""
    router = APIRouter(prefix="/ui", include_in_schema=False, route_class=ConsoleRoute)

    @router.get("/instances/{instance_id}/actions/{name}", response_class=HTMLResponse)
    async def confirm(request: Request, instance_id: str, name: str) -> HTMLResponse:
        session = need_session(request)
        refused = _refusal(request, session, name)
        if refused is not None:
            return refused
        check_instance_id(instance_id)
        snap = await _engine(request).journal.load(instance_id)
        return render(
            request,
            "confirm.html",
            {
                "session": session,
                "section": "instances",
                "inst": snap.instance,
                "action": ACTIONS[name],
                "budget": open_budget(snap.instance.state, snap.steps),
                "extend_choices": EXTEND_CHOICES,
            },
        )

    @router.post("/instances/{instance_id}/actions/{name}")
    async def perform(
        request: Request,
        instance_id: str,
        name: str,
        csrf: str = Form(""),
        extend_by: str = Form(""),
    ) -> Response:
        session = need_session(request)
        refused = _refusal(request, session, name)
        if refused is not None:
            return refused
        if not check_csrf(session, csrf):
            return problem_page(
                request,
                403,
                "csrf_invalid",
                "Refused",
                "The form's CSRF token is not this session's: reload the page and try again.",
            )
        check_instance_id(instance_id)
        engine = _engine(request)
        done = await _act(engine, name, instance_id)
        target = f"/ui/instances/{instance_id}?done={quote(done)}"
        return RedirectResponse(target, status_code=303)

    return router


async def _act(engine: Engine, name: str, instance_id: str) -> str:
    """Run action ``name``; answers the sentence the instance page shows.

    Raises:
        InstanceNotFound: ``instance_not_found``; InstanceEnded: ``instance_ended``.
    """
    inst = await engine.journal.get_instance(instance_id)
    if inst.state.ended:
        raise InstanceEnded(
            f"instance {instance_id} has ended ({inst.state})", instance_id=instance_id
        )
    if name == "wake":
        outcome = await engine.wake(instance_id)
        if outcome is None:
            return "Not woken: another node holds it right now."
        return f"Woken: it ran and is now {outcome.state}."
    if name == "cancel":
        after = await engine.cancel(instance_id)
        return f"Cancel requested: it is now {after.state}."
    return "Extending budgets is not available on this node."
