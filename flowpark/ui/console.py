"""The console put together: its pages' routers, its static files, and the redirects that
send a browser at the node's root to ``/ui`` and a trailing slash to the page without it
(each under a host application's prefix when one mounts flowpark)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from flowpark.ui.actions import build_actions_router
from flowpark.ui.instances import build_instances_router
from flowpark.ui.pages import STATIC, ConsoleRoute, build_console_router, problem_page
from flowpark.ui.paths import ui_root
from flowpark.ui.providers import build_providers_router
from flowpark.ui.reviews import build_reviews_router

__all__ = ["install_console"]


def install_console(app: FastAPI) -> None:
    """Serve the console on ``app`` at ``/ui`` with its static files at ``/ui/static``."""
    app.mount("/ui/static", StaticFiles(directory=str(STATIC)), name="console-static")
    app.include_router(build_console_router())
    app.include_router(build_instances_router())
    app.include_router(build_providers_router())
    app.include_router(build_actions_router())
    app.include_router(build_reviews_router())
    app.include_router(_fallback_router())
    app.include_router(_root_router())


def _root_router() -> APIRouter:
    """``GET /`` from a browser (``Accept`` names ``text/html``) goes to the console (307);
    any other client keeps the API's ``404 not_found`` problem for it."""
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def root(request: Request) -> Response:
        if "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(ui_root(request), status_code=307)
        raise StarletteHTTPException(404)

    return router


def _fallback_router() -> APIRouter:
    """Last of the console's routes: ``/ui/`` and any path with a trailing slash go to the
    page without it (308); any other unknown ``/ui`` path is a console 404 page."""
    router = APIRouter(prefix="/ui", include_in_schema=False, route_class=ConsoleRoute)

    @router.get("/{rest:path}", response_class=HTMLResponse)
    async def elsewhere(request: Request, rest: str) -> Response:
        if rest.endswith("/") or rest == "":
            root = ui_root(request)
            target = f"{root}/{rest.strip('/')}" if rest.strip("/") else root
            query = f"?{request.url.query}" if request.url.query else ""
            return RedirectResponse(target.rstrip("/") + query, status_code=308)
        return problem_page(
            request, 404, "not_found", "Not found", "The console has no page at this address."
        )

    return router
