"""RFC 9457 problem answers: one table maps each error code to its HTTP status, and one
set of handlers turns every error into ``application/problem+json``
``{"type", "title", "status", "detail", "code", ...fields}``.

A :class:`~flowpark.errors.FlowparkError` whose code has no status in :data:`STATUS` (an engine
invariant such as ``journal_conflict``, a definition error) and any unexpected exception
answer 500 ``internal_error``, logged with their cause; nothing of the cause is sent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic.alias_generators import to_camel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from flowpark.errors import CLI_EXIT, ErrorCode, FlowparkError, shown
from flowpark.outages import OUTAGES

__all__ = [
    "PROBLEM_JSON",
    "STATUS",
    "errors_page",
    "install_problem_handlers",
    "problem",
    "problem_members",
    "status_of",
]

log = logging.getLogger("flowpark.api")

PROBLEM_JSON = "application/problem+json"

#: The one table of HTTP statuses by error code. A code missing here answers 500
#: ``internal_error`` (a test keeps every code either here or named internal).
STATUS: dict[ErrorCode, int] = {
    ErrorCode.IDEMPOTENCY_KEY_INVALID: 400,
    ErrorCode.REQUEST_MALFORMED: 400,
    ErrorCode.IDEMPOTENCY_KEY_MISSING: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.SIGNATURE_INVALID: 401,
    ErrorCode.DELIVERY_NOT_FOUND: 404,
    ErrorCode.CORRELATION_KEY_UNKNOWN: 404,
    ErrorCode.METRICS_FORBIDDEN: 403,
    ErrorCode.FLOW_NOT_FOUND: 404,
    ErrorCode.PROVIDER_NOT_FOUND: 404,
    ErrorCode.INSTANCE_NOT_FOUND: 404,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.REVIEW_NOT_FOUND: 404,
    ErrorCode.SIGNAL_NOT_DECLARED: 404,
    ErrorCode.STREAM_NOT_DECLARED: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.ACTION_IN_PROGRESS: 409,
    ErrorCode.INSTANCE_BUSY: 409,
    ErrorCode.INSTANCE_ENDED: 409,
    ErrorCode.DELIVERY_NOT_FAILED: 409,
    ErrorCode.COMPENSATION_NOT_FAILED: 409,
    ErrorCode.CORRELATION_KEY_AMBIGUOUS: 409,
    ErrorCode.DELIVERY_ID_REUSED: 409,
    ErrorCode.CORRELATION_KEY_IN_USE: 409,
    ErrorCode.INSTANCE_KEY_IN_USE: 409,
    ErrorCode.NO_BUDGET: 409,
    ErrorCode.VERSION_NOT_SERVED: 409,
    ErrorCode.WAITS_FOR_SIGNAL: 409,
    ErrorCode.SIGNAL_DELIVERY_REPLAYED: 409,
    ErrorCode.REVIEW_CLAIMED: 409,
    ErrorCode.REVIEW_CLOSED: 409,
    ErrorCode.BODY_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.HEADERS_TOO_LARGE: 431,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: 422,
    ErrorCode.BULK_FILTER_MISSING: 422,
    ErrorCode.INPUT_INVALID: 422,
    ErrorCode.SIGNAL_PAYLOAD_INVALID: 422,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.SCHEMA_BEHIND_HEAD: 503,
    ErrorCode.STORE_UNAVAILABLE: 503,
    ErrorCode.NOT_READY: 503,
    ErrorCode.TRANSACTION_NOT_SHARED: 422,
}

#: Starlette's own refusals (routing, form parsing) by their status.
_CODE_BY_HTTP_STATUS: dict[int, ErrorCode] = {
    400: ErrorCode.INPUT_INVALID,
    401: ErrorCode.UNAUTHORIZED,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.BODY_TOO_LARGE,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
}


def status_of(code: ErrorCode) -> int:
    """The HTTP status a problem with ``code`` is answered with.

    Returns:
        The status from :data:`STATUS`, or 500 for a code it does not map.
    """
    return STATUS.get(code, 500)


def problem(
    code: ErrorCode, detail: str, headers: Mapping[str, str] | None = None, **fields: Any
) -> JSONResponse:
    """A problem+json answer for ``code``, with the status :data:`STATUS` gives it.

    Args:
        code: an error code mapped in :data:`STATUS` (an unmapped one answers 500
            ``internal_error`` with a generic detail, and is logged).
        detail: the human-readable sentence.
        headers: extra response headers.
        **fields: extra members of the body (camelCase names); None values are left out.
            A text past :data:`_MOST_ECHOED` characters (the detail too) is cut with an
            ellipsis: each place that echoes what a request sent bounds it to 100
            (:func:`flowpark.errors.shown`); this bounds what one of them would miss.

    Returns:
        The response: ``{"type": "urn:flowpark:problem:<code>", "title", "status",
        "detail", "code", ...fields}``.
    """
    if code not in STATUS:
        log.error("error code %s has no HTTP status; answered internal_error: %s", code, detail)
        code, detail, fields = ErrorCode.INTERNAL_ERROR, _INTERNAL_DETAIL, {}
    status = STATUS[code]
    body = {
        "type": f"urn:flowpark:problem:{code}",
        "title": str(code),
        "status": status,
        "detail": shown(detail, 4 * _MOST_ECHOED),
        "code": str(code),
    }
    body.update(
        {
            k: shown(v, _MOST_ECHOED) if isinstance(v, str) else v
            for k, v in fields.items()
            if v is not None
        }
    )
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


_INTERNAL_DETAIL = "an unexpected error occurred; it was logged"
#: Most characters of a problem's text field (four times that for its detail).
_MOST_ECHOED = 500


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


#: The detail of every ``store_unavailable`` answer: the cause (which names hosts and
#: ports) goes to the node's log only.
_STORE_UNAVAILABLE_DETAIL = (
    "the database is unavailable; try again (a repeat with the same Idempotency-Key is safe)"
)
#: Seconds a client should wait before trying again after a ``store_unavailable`` or an
#: ``action_in_progress`` answer.
_RETRY_AFTER = "1"


def problem_members(exc: FlowparkError) -> dict[str, Any]:
    """The members of the problem an error with a mapped code is answered with, besides
    ``type``, ``title`` and ``status`` (which its code gives): ``detail``, ``code``, its
    fields (camelCase) and ``errors``. Raising :class:`~flowpark.errors.RepeatedRefusal` with
    them answers the same problem again.

    Returns:
        ``{"detail", "code", ...fields, "errors"?}`` (None fields left out).
    """
    members: dict[str, Any] = {"detail": exc.message, "code": str(exc.code)}
    members.update({_camel(k): v for k, v in exc.fields.items() if v is not None})
    errors = getattr(exc, "errors", None)
    if errors:
        members["errors"] = _clean(errors)
    return members


def install_problem_handlers(app: FastAPI) -> None:
    """Register the handlers that turn every error into problem+json.

    Args:
        app: the application; its handlers for :class:`~flowpark.errors.FlowparkError`,
            request validation, Starlette's HTTP exceptions and any other exception are
            set.
    """

    @app.exception_handler(FlowparkError)
    async def _domain(request: Request, exc: FlowparkError) -> JSONResponse:
        if exc.code not in STATUS:
            log.error(
                "%s on %s %s: %s",
                exc.code,
                request.method,
                request.url.path,
                exc.message,
                exc_info=exc,
            )
            return problem(ErrorCode.INTERNAL_ERROR, _INTERNAL_DETAIL)
        if exc.code is ErrorCode.STORE_UNAVAILABLE:
            # the driver's message names hosts, ports, users: logged (redacted, one line
            # per interval with a count), not answered
            OUTAGES.unavailable("api", exc.message)
            return problem(
                exc.code, _STORE_UNAVAILABLE_DETAIL, headers={"Retry-After": _RETRY_AFTER}
            )
        extra = problem_members(exc)
        detail, _ = extra.pop("detail"), extra.pop("code")
        headers = (
            {"Retry-After": _RETRY_AFTER} if exc.code is ErrorCode.ACTION_IN_PROGRESS else None
        )
        return problem(exc.code, detail, headers=headers, **extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return problem(
            ErrorCode.INPUT_INVALID,
            "the request is malformed or ill-typed",
            errors=_clean([_camel_hint(e) for e in exc.errors()]),
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _CODE_BY_HTTP_STATUS.get(exc.status_code)
        if code is None:
            log.error("HTTP %s on %s %s", exc.status_code, request.method, request.url.path)
            return problem(ErrorCode.INTERNAL_ERROR, _INTERNAL_DETAIL)
        if exc.status_code == 404 and exc.detail == "Not Found":
            path = shown(request.url.path)
            root = request.scope.get("root_path", "")  # a host application's prefix
            return problem(
                code,
                f"no route {request.method} {path}: GET {root}/api/v1/flows lists the flows' "
                f"routes, {root}/docs the whole API",
                headers=exc.headers,
                flows=f"{root}/api/v1/flows",
            )
        return problem(code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        # the client went away mid-body: nothing was done, nobody reads an answer
        log.warning(
            "client %s disconnected before its %s %s body arrived; nothing done",
            request.client.host if request.client else "?",
            request.method,
            request.url.path,
        )
        return problem(ErrorCode.INPUT_INVALID, "the client disconnected mid-body")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(ErrorCode.INTERNAL_ERROR, _INTERNAL_DETAIL)


def errors_page() -> str:
    """The Markdown page ``docs/errors.md``: every error code with its status and meaning,
    from :class:`~flowpark.errors.ErrorCode` and :data:`STATUS` (a test keeps the file equal;
    refresh with ``python -m flowpark.api.problems > docs/errors.md``).

    Returns:
        The page's text.
    """
    rows = []
    for code in sorted(ErrorCode, key=lambda c: (c in CLI_EXIT, status_of(c), c.value)):
        if code in CLI_EXIT:
            status = f"CLI only, exit {CLI_EXIT[code]}"
        else:
            status = str(STATUS[code]) if code in STATUS else "500 as `internal_error`"
        rows.append(f"| `{code}` | {status} | {code.meaning} |")
    return _ERRORS_PAGE.format(rows="\n".join(rows))


_ERRORS_PAGE = """# Errors

<!-- generated by `python -m flowpark.api.problems > docs/errors.md`; a test keeps it current -->

Every error the HTTP API answers is `application/problem+json` (RFC 9457) with a stable
`code` that scripts may match on, next to `type` (`urn:flowpark:problem:<code>`), `title`,
`status`, `detail`, and structured fields such as `instanceId`; validation problems carry
`errors` (each with `loc`, `msg`, `type`). A value the request sent that a problem echoes
(a signal, flow, stream or route name, an id, a body's key in `loc`) is cut to its first
100 characters and an ellipsis (`…`). The OpenAPI document (`/docs`,
`docs/openapi.json`) lists, for each operation, the statuses it can answer and the codes of
each status.

The CLI prints the same codes: `error: <code>: <message>`, and three of its own that no
node answers (the table's last rows, with their exit codes): `usage`, `settings_invalid` and
`unreachable`.

Error codes are one `snake_case` phrase each. A code the table does not map to a status
(an engine invariant, a definition error) is never answered as itself: the answer is 500
`internal_error`, and the node logs the cause.

| code | status | when |
|---|---|---|
{rows}

Five codes were once dotted; they now follow this scheme: `store.unavailable` is
`store_unavailable`, `store.schema_behind_head` is `schema_behind_head`, `lease.stale_token` is
`stale_fencing_token`, `store.journal_conflict` is `journal_conflict` and
`flow.definition_invalid` is `definition_invalid`.

A *failed instance* is not an HTTP error: its `error.code` says why, in dotted
`area.reason` form: `flow.step_failed`, `flow.poll_not_satisfied`, `flow.deadline_exceeded`,
`flow.cancelled`, or a business code of the flow such as `document.not_read_in_time`. Rule
codes of a definition finding are dotted too (`poll.requires_durable`).
"""


def _camel_hint(error: Any) -> Any:
    """A body's unknown field in snake_case, hinted with its camelCase name (the API's
    JSON names are camelCase): ``Extra inputs are not permitted (did you mean
    ratePerSecond?)``."""
    if not isinstance(error, dict) or error.get("type") != "extra_forbidden":
        return error
    loc = tuple(error.get("loc", ()))
    if len(loc) != 2 or loc[0] != "body" or not isinstance(loc[1], str):
        return error
    camel = to_camel(loc[1])
    if camel == loc[1]:
        return error
    return {**error, "msg": f"{error.get('msg', '')} (did you mean {camel}?)"}


def _clean(errors: list[Any]) -> list[dict[str, Any]]:
    out = []
    for err in errors:
        if isinstance(err, dict):
            out.append(
                {
                    # a body's own keys and a query's names are in loc: bounded as echoed
                    "loc": [shown(p) for p in err.get("loc", ())],
                    "msg": shown(err.get("msg", ""), 300),
                    "type": str(err.get("type", "")),
                }
            )
    return out


if __name__ == "__main__":
    print(errors_page(), end="")
