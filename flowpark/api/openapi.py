"""The OpenAPI document is the API's contract; this module builds it.

* :func:`problem_responses` gives a route's ``responses=`` for the error codes it can
  answer: one ``application/problem+json`` response per status, whose schema is the
  ``Problem`` shape with that status's ``code`` enum, with an example. A new route gets
  its error contract with one line::

      @router.get("/things/{id}", response_model=Thing,
                  responses=problem_responses(ErrorCode.INSTANCE_NOT_FOUND))

* :func:`install_openapi` makes the app's document complete: the ``Problem`` schema, the
  bearer security scheme (routes that depend on ``require_token`` carry it), any leftover
  ``422 HTTPValidationError`` replaced by the ``input_invalid`` problem, request schemas'
  ``$defs`` moved into ``components``, and the links of the stateful walk (start -> read
  -> signal -> cancel).
* every operation may answer 422 ``input_invalid``: a path, query or header holding a
  control character or a lone surrogate is refused before routing (:mod:`flowpark.api.hygiene`).
* ``python -m flowpark.runtime.openapi > docs/openapi.json`` writes the document the samples'
  app serves; a test fails when the committed file differs.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, Response
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel

from flowpark.api.hygiene import RULE
from flowpark.api.inputs import MAX_KEY
from flowpark.api.problems import PROBLEM_JSON, STATUS, status_of
from flowpark.errors import ErrorCode

__all__ = [
    "COMMON_CODES",
    "DEFS_KEY",
    "REQUIRED_HEADERS_KEY",
    "PROBLEM_SCHEMA",
    "api_app",
    "install_openapi",
    "operation_slug",
    "problem_responses",
    "request_schema",
]

#: Codes any ``/api`` route can answer: an unreachable database, a bug.
COMMON_CODES = (ErrorCode.STORE_UNAVAILABLE, ErrorCode.INTERNAL_ERROR)
#: Operation key under which :func:`request_schema` hands its ``$defs`` to
#: :func:`install_openapi` (moved into ``components.schemas``, never served).
DEFS_KEY = "x-flowpark-defs"
#: Operation key listing headers the document marks required although the route reads
#: them as optional (so a missing one answers its own problem code, not a generic 422).
REQUIRED_HEADERS_KEY = "x-flowpark-required-headers"
_REF = "#/components/schemas/{model}"
#: Added to every operation's 422 description (:mod:`flowpark.api.hygiene`).
_HYGIENE = f". Before routing: {RULE}"
#: An ``Idempotency-Key``: visible ASCII with inner spaces, at least one visible character
#: when required (the HTTP server strips spaces around a header value). A header value
#: is never null: the anyOf FastAPI writes for an optional one is replaced.
_KEY_SCHEMA = {"type": "string", "maxLength": MAX_KEY, "pattern": "^[ -~]*[!-~][ -~]*$"}
_OPTIONAL_KEY_SCHEMA = {"type": "string", "maxLength": MAX_KEY, "pattern": "^[ -~]*$"}

#: The RFC 9457 body every error answer has (``components.schemas.Problem``).
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "description": (
        "An RFC 9457 problem. `code` is stable (scripts may match on it); other members "
        "are structured context in camelCase, such as `instanceId`."
    ),
    "properties": {
        "type": {"type": "string", "description": "`urn:flowpark:problem:<code>`"},
        "title": {"type": "string"},
        "status": {"type": "integer", "description": "the HTTP status"},
        "detail": {"type": "string", "description": "a human-readable sentence"},
        "code": {"type": "string", "description": "the stable error code"},
        "errors": {
            "type": "array",
            "description": "what did not validate (`input_invalid`)",
            "items": {
                "type": "object",
                "properties": {
                    "loc": {"type": "array", "items": {"type": "string"}},
                    "msg": {"type": "string"},
                    "type": {"type": "string"},
                },
                "required": ["loc", "msg", "type"],
            },
        },
    },
    "required": ["type", "title", "status", "detail", "code"],
    "additionalProperties": True,
}


def operation_slug(name: str) -> str:
    """A flow's or signal's name as part of an operation id: lower case, every character
    but letters and digits as ``_`` (``document.process`` -> ``document_process``)."""
    return "".join(c if c.isalnum() else "_" for c in name.lower())


def _example(code: ErrorCode) -> dict[str, Any]:
    return {
        "type": f"urn:flowpark:problem:{code}",
        "title": str(code),
        "status": status_of(code),
        "detail": code.meaning.replace("`", ""),
        "code": str(code),
    }


def problem_responses(
    *codes: ErrorCode, auth: bool = True, common: bool = True
) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that can answer ``codes``.

    Args:
        *codes: the error codes the route itself can answer.
        auth: add ``unauthorized`` (401) and ``forbidden`` (403): the route needs a
            bearer token with a scope.
        common: add :data:`COMMON_CODES` (503 ``store_unavailable``, 500
            ``internal_error``).

    Returns:
        ``{status: {"description", "content": {"application/problem+json": {"schema",
        "example"}}}}``: per status, the ``Problem`` schema whose ``code`` is an enum of
        that status's codes, and an example of the first.

    Raises:
        ValueError: a code that :data:`~flowpark.api.problems.STATUS` does not map (it is never
            answered as itself).
    """
    wanted = list(codes) + ([ErrorCode.UNAUTHORIZED, ErrorCode.FORBIDDEN] if auth else [])
    wanted += list(COMMON_CODES) if common else []
    by_status: dict[int, list[ErrorCode]] = defaultdict(list)
    for code in wanted:
        if code not in STATUS:
            raise ValueError(f"{code} has no HTTP status: it is never answered")
        if code not in by_status[STATUS[code]]:
            by_status[STATUS[code]].append(code)
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted(by_status):
        members = by_status[status]
        out[status] = {
            "description": "; ".join(f"`{c}`: {c.meaning}" for c in members),
            "content": {
                PROBLEM_JSON: {
                    "schema": {
                        "allOf": [
                            {"$ref": _REF.format(model="Problem")},
                            {
                                "type": "object",
                                "properties": {
                                    "code": {"type": "string", "enum": [str(c) for c in members]},
                                    "status": {"type": "integer", "enum": [status]},
                                },
                            },
                        ]
                    },
                    "example": _example(members[0]),
                }
            },
        }
    return out


def request_schema(
    model: type[BaseModel], extra: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A request body's JSON schema (camelCase names) with its nested models as
    ``components`` references.

    Args:
        model: the body's model.
        extra: properties to add (e.g. ``instanceKey``), each ``{name: schema}``.

    Returns:
        ``(schema, defs)``: put ``defs`` under :data:`DEFS_KEY` in the operation's
        ``openapi_extra``; :func:`install_openapi` moves them into ``components``.
    """
    schema = model.model_json_schema(by_alias=True, ref_template=_REF)
    defs = schema.pop("$defs", {})
    if extra:
        schema.setdefault("properties", {}).update(extra)
    return schema, defs


def _described(parameter: dict[str, Any]) -> dict[str, Any]:
    description = parameter.get("schema", {}).get("description")
    return {"description": description} if description else {}


def _uses_bearer(operation: dict[str, Any]) -> bool:
    return any("bearer" in item for item in operation.get("security", ()))


def _complete(doc: dict[str, Any]) -> dict[str, Any]:
    """Fill in what FastAPI leaves out (see the module docstring)."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas["Problem"] = PROBLEM_SCHEMA
    invalid = problem_responses(ErrorCode.INPUT_INVALID, auth=False, common=False)[422]
    refusals = problem_responses(auth=True, common=False)
    for methods in doc.get("paths", {}).values():
        for operation in methods.values():
            summary = str(operation.get("summary", ""))
            if " " in summary and summary == summary.title():  # FastAPI's title case
                operation["summary"] = summary[:1] + summary[1:].lower()
            schemas.update(operation.pop(DEFS_KEY, {}))
            required = operation.pop(REQUIRED_HEADERS_KEY, [])
            for parameter in operation.get("parameters", ()):
                if parameter.get("in") != "header":
                    continue
                if parameter.get("name") in required:
                    parameter["required"] = True
                if parameter.get("name") == "Idempotency-Key":
                    # a value of spaces only is no key: refused where one is required
                    shape = _KEY_SCHEMA if parameter.get("required") else _OPTIONAL_KEY_SCHEMA
                    parameter["schema"] = {**shape, **_described(parameter)}
            responses = operation.setdefault("responses", {})
            default_422 = responses.get("422", {}).get("content", {}).get("application/json")
            if default_422 is not None:
                responses["422"] = invalid
            # any request line or header may be refused so (flowpark.api.hygiene)
            responses.setdefault("422", invalid)
            described = str(responses["422"].get("description", ""))
            if _HYGIENE not in described:
                responses["422"] = {**responses["422"], "description": described + _HYGIENE}
            if _uses_bearer(operation):
                for status, response in refusals.items():
                    responses.setdefault(str(status), response)
    # FastAPI's validation shapes are no longer used by any operation
    if "HTTPValidationError" not in json.dumps(doc["paths"]):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
    doc["components"]["schemas"] = dict(sorted(schemas.items()))
    return doc


def _sentence_summaries(app: FastAPI) -> None:
    """Give each operation without a summary its route's name in sentence case
    (``Start document.process@1.0.0``, ``List nodes``), not FastAPI's title case, which
    capitalises flow and signal names (``Start Document.Process@1.0.0``)."""
    from fastapi.routing import APIRoute

    for route in app.routes:  # the routes of included routers: see _complete
        if isinstance(route, APIRoute) and not route.summary and route.name:
            words = route.name.replace("_", " ")
            route.summary = words[:1].upper() + words[1:]


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (served at ``/openapi.json``) the complete contract.

    Args:
        app: the application; its ``openapi`` method is replaced by one that builds the
            document once, completes it (see the module docstring) and caches it.
    """

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            _sentence_summaries(app)
            doc = get_openapi(
                title=app.title,
                version=app.version,
                openapi_version=app.openapi_version,
                summary=app.summary,
                description=app.description,
                routes=app.routes,
                tags=app.openapi_tags,
                servers=app.servers,
            )
            app.openapi_schema = _complete(doc)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


#: Where the Swagger UI and ReDoc assets (shipped by ``fastapi-offline``) are served.
DOCS_ASSETS = "/docs/static"
#: ReDoc's bundle, as the node serves it (see :func:`_redoc_bundle`).
REDOC_BUNDLE = "/redoc/redoc.standalone.js"
_DOCS_CSP = "img-src 'self' data:; font-src 'self' data:; connect-src 'self'"
#: The image ReDoc's sidebar footer shows instead of its vendor's logo from a CDN: an
#: empty SVG of the logo's size, inline (nothing is fetched).
_REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
_NO_LOGO = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/%3E"
_DESCRIPTION = """Durable flows that wait on external systems.

Every `/api` route needs a bearer token, one of `FLOWPARK_API_TOKENS`, sent as the header
`Authorization: Bearer <token>` (curl: `-H 'Authorization: Bearer dev-token'`; from Python,
`flowpark.Client(url, token=...)`). To try operations from the browser, open the Swagger UI
page at `/docs` and enter the token once under its Authorize button; ReDoc at `/redoc` is a
read-only reference. Bodies are JSON with camelCase names, sent with
`Content-Type: application/json`. Every error is `application/problem+json` with a stable
`code`; each operation lists its codes by status. A path with a trailing slash names no route
(404 `not_found`); nothing redirects. Every operation refuses, before routing, a path, query
parameter or header value that holds a control character (U+0000-U+001F, U+007F-U+009F; a
header value may hold a tab) or a lone surrogate: 422 `input_invalid`. The free text a body
gives to be stored (a review's `note`, a start's `instanceKey`) holds no control character
either (a note may hold a tab and a line feed): 422 `input_invalid`; each such field's schema
states the rule as its `pattern`. A query parameter typed `integer` takes decimal digits only
(`after=0.0` is 422 `input_invalid`).
"""


@functools.cache
def _redoc_bundle() -> bytes:
    """``fastapi-offline``'s ReDoc bundle with its one remote image (the vendor's logo in
    the sidebar footer, from ``cdn.redoc.ly``) replaced by :data:`_NO_LOGO`: the page
    loads nothing from outside the node, not even an image its CSP would block.

    Returns:
        The bundle's bytes (read once per process, about 1 MB).
    """
    source = Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js"
    return source.read_text(encoding="utf-8").replace(_REDOC_LOGO, _NO_LOGO).encode("utf-8")


def api_app(**kwargs: Any) -> FastAPI:
    """The FastAPI application with flowpark's contract settings: Swagger UI (``/docs``)
    and ReDoc (``/redoc``) served from assets in the installed packages (no CDN, no remote
    image, no validator badge), no trailing-slash redirects, problem-complete OpenAPI
    (:func:`install_openapi`).

    Args:
        **kwargs: more ``FastAPI`` arguments (``lifespan``).

    Returns:
        The application, with no routes of its own but the docs pages.
    """
    app = FastAPIOffline(
        title="flowpark",
        version="0.1.0",
        description=_DESCRIPTION,
        redirect_slashes=False,
        static_url=DOCS_ASSETS,
        redoc_url=None,
        # validatorUrl: no badge image from validator.swagger.io on a node with a public name
        swagger_ui_parameters={
            "persistAuthorization": True,
            "displayOperationId": True,
            "validatorUrl": None,
        },
        **kwargs,
    )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title="flowpark - ReDoc",
            redoc_js_url=f"{root}{REDOC_BUNDLE}",
            redoc_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )
        # images, fonts and data from the node only: should a future bundle name another
        # remote asset, the browser refuses it (a test watches for any refusal)
        page.headers["Content-Security-Policy"] = _DOCS_CSP
        return page

    @app.get(REDOC_BUNDLE, include_in_schema=False)
    async def redoc_bundle() -> Response:
        return Response(
            _redoc_bundle(),
            media_type="text/javascript",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    install_openapi(app)
    return app
