"""RFC 9457 problem responses: one handler maps every error code to a status and a body
``{"type", "title", "status", "detail", "code", ...fields}`` served as
``application/problem+json``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import FlowparkError

__all__ = ["PROBLEM_JSON", "ApiProblem", "install_problem_handlers", "problem"]

log = logging.getLogger("flowpark.api")

PROBLEM_JSON = "application/problem+json"

STATUS_BY_CODE: dict[str, int] = {
    "flow_not_found": 404,
    "instance_not_found": 404,
    "signal_not_declared": 404,
    "stream_not_declared": 404,
    "instance_ended": 409,
    "instance_key_in_use": 409,
    "idempotency_key_reused": 422,
    "idempotency_key_missing": 400,
    "idempotency_key_invalid": 400,
    "store.journal_conflict": 409,
    "input_invalid": 422,
    "body_too_large": 413,
    "unsupported_media_type": 415,
    "unauthorized": 401,
    "lease.stale_token": 409,
    "store.schema_behind_head": 503,
    "store.unavailable": 503,
    "flow.definition_invalid": 500,
}


class ApiProblem(Exception):
    """An HTTP-level problem raised by a route (auth, missing header)."""

    def __init__(self, status: int, code: str, detail: str, **fields: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.fields = fields


def problem(
    status: int, code: str, detail: str, headers: dict[str, str] | None = None, **fields: Any
) -> JSONResponse:
    """Build a problem+json response."""
    body = {
        "type": f"urn:flowpark:problem:{code}",
        "title": code,
        "status": status,
        "detail": detail,
        "code": code,
    }
    body.update({k: v for k, v in fields.items() if v is not None})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def install_problem_handlers(app: FastAPI) -> None:
    """Register the handlers that turn every error into problem+json."""

    @app.exception_handler(FlowparkError)
    async def _domain(request: Request, exc: FlowparkError) -> JSONResponse:
        status = STATUS_BY_CODE.get(exc.code, 400)
        extra: dict[str, Any] = {_camel(k): v for k, v in exc.fields.items()}
        errors = getattr(exc, "errors", None)
        if errors:
            extra["errors"] = _clean(errors)
        return problem(status, exc.code, exc.message, **extra)

    @app.exception_handler(ApiProblem)
    async def _api(request: Request, exc: ApiProblem) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return problem(exc.status, exc.code, exc.detail, headers=headers, **exc.fields)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return problem(
            422,
            "input_invalid",
            "the request is malformed or ill-typed",
            errors=_clean(list(exc.errors())),
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return problem(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "internal_error", "an unexpected error occurred; it was logged")


def _clean(errors: list[Any]) -> list[dict[str, Any]]:
    out = []
    for err in errors:
        if isinstance(err, dict):
            out.append(
                {
                    "loc": [str(p) for p in err.get("loc", ())],
                    "msg": str(err.get("msg", "")),
                    "type": str(err.get("type", "")),
                }
            )
    return out
