"""The console's routes under ``/ui``: sign-in, overview, flows, instances, actions.

Pages are rendered on the server (Jinja2) and read the same without JavaScript; every page
is reachable by a URL whose query string holds its filters. Routes know nothing of SQL: they
read through the store's read model and act through the engine, as the API does.

Every console URL is written from :func:`~flowpark.ui.paths.ui_root` (``{{ ui }}`` in the
templates): ``/ui`` when the node serves flowpark at its root, ``/flowpark/ui`` when a host
application mounts flowpark under ``/flowpark`` (the ASGI ``root_path``).

A request without a session is sent to ``/ui/sign-in`` (303). Every ``POST`` carries the
session's CSRF token. A flowpark error on a page (an unknown instance, an unreachable
database) is answered with a page naming its code and the error's status, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from jinja2 import pass_context
from jinja2.runtime import Context

from flowpark.api.deps import engine_of, nodes_of, settings_of
from flowpark.api.nodes import nodes_report
from flowpark.api.problems import status_of
from flowpark.engine.node.engine import Engine
from flowpark.errors import FlowparkError
from flowpark.flows.plan import Plan
from flowpark.redaction import redact
from flowpark.settings import DEFAULT_API_TOKEN
from flowpark.ui.graph import human_duration, layout
from flowpark.ui.overview import lateness, overview_rows
from flowpark.ui.paths import inside, ui_root
from flowpark.ui.session import (
    Session,
    check_csrf,
    clear_session,
    current_session,
    end_session,
    load_session,
    open_session,
    sign_in,
)

__all__ = [
    "DUE_WITHIN",
    "LATENESS_WINDOW",
    "RECENT_WINDOW",
    "ConsoleRoute",
    "build_console_router",
    "need_session",
    "overdue_threshold",
    "render",
    "same_origin",
    "templates",
]

HERE = Path(__file__).parent
STATIC = HERE / "static"
#: "Due in the next minute".
DUE_WITHIN = timedelta(minutes=1)
#: Completed and failed counts look back this far.
RECENT_WINDOW = timedelta(hours=1)
#: Wake lateness percentiles look back this far.
LATENESS_WINDOW = timedelta(minutes=5)

templates = Jinja2Templates(directory=str(HERE / "templates"))

#: Headers of every console page: never cached, never framed (no clickjacking of the action
#: buttons), scripts and connections to this node only (the package's own files).
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
        "form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def _fmt(instant: datetime | None) -> str:
    if instant is None:
        return ""
    return instant.strftime("%Y-%m-%d %H:%M:%S") + "Z"


def _iso(instant: datetime | None) -> str:
    return instant.isoformat().replace("+00:00", "Z") if instant is not None else ""


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 10:
        return f"{value:.2f} s"
    return f"{value:.0f} s"


def _default_token_in_use(request: Request) -> bool:
    """Whether the node accepts the public default token ``dev-token`` (a local trial's)."""
    return DEFAULT_API_TOKEN in settings_of(request).tokens


@pass_context
def _static(context: Context, name: str) -> str:
    """The URL of the console's static file ``name`` (``{{ static('console.css') }}``)."""
    return f"{context.get('ui', '/ui')}/static/{quote(name)}"


#: ``{{ text|redact }}``: a text from a run (an error's message or detail) with its secrets
#: masked, as the API shows it.
templates.env.filters["redact"] = redact
templates.env.globals.update(
    default_token_in_use=_default_token_in_use,
    fmt=_fmt,
    iso=_iso,
    seconds=_seconds,
    duration=human_duration,
    static=_static,
)


class SignInRequired(Exception):
    """No session: the page answers 303 to the sign-in page, back here afterwards."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


def _engine(request: Request) -> Engine:
    return engine_of(request)


def overdue_threshold(request: Request) -> timedelta:
    """How late a wake must be to count as overdue: two sweep intervals (a sweep that ran
    on time would have taken it), at least one second.
    """
    interval = float(settings_of(request).timer_scan_interval)
    return timedelta(seconds=max(1.0, 2 * interval))


def need_session(request: Request) -> Session:
    """The request's console session.

    Raises:
        SignInRequired: none (the route answers 303 to the sign-in page, back here after).
    """
    session = current_session(request)
    if session is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(target)
    return session


def _safe_next(request: Request, value: str | None) -> str:
    """A post-sign-in target inside the console only (no other host, no scheme); the
    console's overview otherwise."""
    root = ui_root(request)
    return value if value is not None and inside(root, value) else root


def render(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    """Render template ``name`` with ``context`` (plus ``request`` and ``ui``, the console's
    root path: :func:`~flowpark.ui.paths.ui_root`)."""
    context = {"ui": ui_root(request), **context}
    response = templates.TemplateResponse(request, name, context, status_code=status_code)
    response.headers.update(PAGE_HEADERS)
    return response


def problem_page(request: Request, status: int, code: str, title: str, detail: str) -> HTMLResponse:
    """An error page naming the error's code (``data-code``)."""
    return render(
        request,
        "problem.html",
        {
            "session": current_session(request),
            "title": title,
            "code": code,
            "detail": detail,
            "section": "",
        },
        status_code=status,
    )


def build_console_router() -> APIRouter:
    """The ``/ui`` routes (not in the OpenAPI document)."""
    router = APIRouter(prefix="/ui", include_in_schema=False, route_class=ConsoleRoute)

    @router.get("", response_class=HTMLResponse)
    async def overview(request: Request) -> HTMLResponse:
        session = need_session(request)
        engine = _engine(request)
        reads = engine.store.overview
        now = engine.clock.now()
        overdue = overdue_threshold(request)
        activity = await reads.flow_activity(
            now, overdue=overdue, due_within=DUE_WITHIN, since=now - RECENT_WINDOW
        )
        starts = await reads.attempt_starts(now - LATENESS_WINDOW)
        overall, by_flow = lateness(engine.catalog, starts)
        rows = overview_rows(engine.catalog, activity, by_flow)
        nodes = await nodes_report(engine_of(request), nodes_of(request), settings_of(request))
        review_counts = await engine.store.reviews.count_reviews()
        totals = {
            key: sum(getattr(r, key) for r in rows)
            for key in (
                "running",
                "suspended",
                "due_soon",
                "overdue",
                "stuck",
                "completed",
                "failed",
                "cancelled",
            )
        }
        return render(
            request,
            "overview.html",
            {
                "session": session,
                "section": "overview",
                "now": now,
                "rows": rows,
                "totals": totals,
                "lateness": overall,
                "nodes": nodes,
                "reviews_waiting": sum(n for s, n in review_counts.items() if not s.closed),
                "overdue_seconds": overdue.total_seconds(),
                "recent_minutes": int(RECENT_WINDOW.total_seconds() // 60),
                "lateness_minutes": int(LATENESS_WINDOW.total_seconds() // 60),
            },
        )

    @router.get("/sign-in", response_class=HTMLResponse)
    async def sign_in_page(request: Request, next: str | None = None) -> Response:
        if current_session(request) is not None:
            return RedirectResponse(_safe_next(request, next), status_code=303)
        return render(
            request,
            "sign_in.html",
            {"session": None, "next": _safe_next(request, next), "error": None, "section": ""},
        )

    @router.post("/sign-in", response_class=HTMLResponse)
    async def sign_in_submit(
        request: Request, token: str = Form(""), next: str = Form("")
    ) -> Response:
        settings = settings_of(request)
        principal = sign_in(settings, token) if token.strip() else None
        if principal is None:
            return render(
                request,
                "sign_in.html",
                {
                    "session": None,
                    "next": _safe_next(request, next),
                    "error": "That token is not one of this node's API tokens with the read scope.",
                    "section": "",
                },
                status_code=401,
            )
        response = RedirectResponse(_safe_next(request, next), status_code=303)
        await open_session(response, request, settings, token)
        return response

    @router.post("/sign-out")
    async def sign_out(request: Request, csrf: str = Form("")) -> Response:
        session = current_session(request)
        if session is not None and not check_csrf(session, csrf):
            return problem_page(
                request,
                403,
                "csrf_invalid",
                "Refused",
                "The form's CSRF token is not this session's.",
            )
        await end_session(request)  # on every node: a copy of the cookie opens nothing
        response = RedirectResponse(f"{ui_root(request)}/sign-in", status_code=303)
        clear_session(response, request)
        return response

    @router.get("/flows", response_class=HTMLResponse)
    async def flows(request: Request) -> HTMLResponse:
        session = need_session(request)
        return render(
            request,
            "flows.html",
            {"session": session, "section": "flows", "plans": _engine(request).catalog.plans()},
        )

    @router.get("/flows/{name}/{version}", response_class=HTMLResponse)
    async def flow(request: Request, name: str, version: str) -> HTMLResponse:
        session = need_session(request)
        engine = _engine(request)
        plan = engine.catalog.find(name, version)
        if plan is None:
            return problem_page(
                request,
                404,
                "flow_not_found",
                "No such flow",
                f"This node has no flow {name} {version}.",
            )
        reads = engine.store.overview
        waiting = {w.step_id: w.count for w in await reads.waiting_by_step(name, version)}
        marked = await _marked_steps(request, engine, plan)
        activity = await reads.step_activity(name, version, engine.clock.now() - RECENT_WINDOW)
        counts: dict[str, dict[str, int]] = {}
        for index in range(len(plan.steps)):
            counts[str(index)] = {
                "parked": waiting.get(index, 0),
                "running": activity.running.get(index, 0),
                "failed": activity.failed.get(index, 0),
            }
        counts["end"] = {"completed": activity.completed}
        return render(
            request,
            "flow.html",
            {
                "session": session,
                "section": "flows",
                "plan": plan,
                "graph": layout(plan, waiting, counts),
                "waiting_total": sum(waiting.values()),
                "marked": marked,
                "counts": counts,
                "recent_minutes": int(RECENT_WINDOW.total_seconds() // 60),
            },
        )

    return router


async def _marked_steps(request: Request, engine: Engine, plan: Plan) -> dict[str, Any]:
    """``?instance=ID`` on a flow page: that instance of this flow version, and the step it
    failed at (``failed``) or waits at (``waiting``), ``{"instance", "steps": {index:
    mark}}``; empty for no, a malformed or another flow's instance."""
    from flowpark.api.inputs import check_instance_id
    from flowpark.api.views import failed_step
    from flowpark.engine.records import InstanceState

    wanted = request.query_params.get("instance") or ""
    if not wanted:
        return {}
    try:
        check_instance_id(wanted)
        snap = await engine.store.reads.load(wanted)
    except FlowparkError:
        return {}
    inst = snap.instance
    if (inst.flow_name, inst.flow_version) != (plan.name, plan.version):
        return {}
    steps: dict[int, str] = {}
    failed = failed_step(plan, inst, snap.steps)
    if failed is not None:
        steps[failed.step_id] = "failed"
    elif inst.state is InstanceState.SUSPENDED and inst.wake_step_id is not None:
        steps[inst.wake_step_id] = "waiting"
    return {"instance": inst.id, "steps": steps}


def same_origin(request: Request) -> bool:
    """A form post came from the console's own pages: its ``Origin`` (or, without one, its
    ``Referer``) names this host, or the browser sent neither (a non-browser client).
    """
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return True
    if source == "null":
        return False
    return urlsplit(source).netloc == request.headers.get("host", "")


class ConsoleRoute(APIRoute):
    """A console route: no session sends the browser to sign in (303); a flowpark error
    becomes an error page with the error's status and code.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler of the route, wrapped as the class docstring says."""
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            await load_session(request)  # once: the pages read it with current_session
            if request.method == "POST" and not same_origin(request):
                return problem_page(
                    request,
                    403,
                    "forbidden",
                    "Refused",
                    "A form of another site posted here: the console takes forms from its "
                    "own pages only.",
                )
            try:
                return await handler(request)
            except SignInRequired as exc:
                return RedirectResponse(
                    f"{ui_root(request)}/sign-in?{urlencode({'next': exc.next_url})}",
                    status_code=303,
                )
            except FlowparkError as exc:
                status = status_of(exc.code)
                title = "Not found" if status == 404 else "Cannot do that"
                return problem_page(request, status, exc.code, title, exc.message)

        return guarded
